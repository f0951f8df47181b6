// The CUDA kernels of row gathers and scatters, pooling, im2col/col2im and the LSTM cell
// (kernels/cuda/index.cu, pool.cu, conv.cu, lstm.cu) against their CPU references (kernels/cpu/).
// How a case reads, and the tolerances: cuda_kernel_checks.h.
// Every case starts with `if (!have_gpu()) return;`. A build without CUDA has no case here.
#include "tests/testing.h"

#ifdef MG_WITH_CUDA
#include "tests/cuda_kernel_checks.h"
#include "kernels/conv.h"
#include "kernels/index.h"
#include "kernels/lstm.h"
#include "kernels/pool.h"

using namespace mg;
using namespace mg::testing;
using kernels::ReduceShape;
using kernels::Window2d;

// ---- gather and scatter ---------------------------------------------------------------------------------

TEST_CASE("cuda gather_rows and scatter_along_dim move bits exactly; scatter_add_rows sums repeated rows") {
  if (!have_gpu()) return;
  Generator generator(41);
  const Tensor indices = randint(0, 50, {129}, generator);  // 129 lookups into 50 rows: many repeats
  // Widths that reach every copy unit: 64 f16 = 128 bytes (16-byte units), 2 f32 = 8 bytes (8), 129 f32 (4),
  // 37 f16 = 74 bytes (2).
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::I32}) {
    for (std::int64_t width : {1, 2, 37, 64, 129}) {
      INFO(dtype_name(dtype) << " table [50, " << width << "]");
      const Tensor table = whole_numbers({50, width}, DType::F32, -1000, 1000, 42).to(dtype);
      Tensor out = cpu_empty({129, width}, dtype), out_gpu = poisoned({129, width}, dtype);
      kernels::cpu::gather_rows(table, indices, out);
      kernels::cuda::gather_rows(gpu(table), gpu(indices), out_gpu);
      check_exact(out_gpu, out);
    }
  }
  for (DType dtype : kFloating) {
    for (std::int64_t width : {1, 129}) {
      INFO(dtype_name(dtype) << " scatter_add_rows into [37, " << width << "] from 1000 rows");
      Generator index_generator(43);
      const Tensor rows = randint(0, 37, {1000}, index_generator);  // each table row hit ~27 times
      // Quarters in [-8, 8): the f32 sums (|sum| < 2^13) are exact whatever order the atomics land in.
      const Tensor grad = whole_numbers({1000, width}, dtype, -32, 32, 44, 0.25);
      Tensor table = cpu_empty({37, width}, dtype), table_gpu = poisoned({37, width}, dtype);
      kernels::cpu::scatter_add_rows(grad, rows, table);
      kernels::cuda::scatter_add_rows(gpu(grad), gpu(rows), table_gpu);
      check_exact(table_gpu, table);
    }
    const View views[] = {{37, 129, 1, "inner == 1"}, {3, 17, 5, "inner > 1"}};
    for (const View& v : views) {
      INFO(dtype_name(dtype) << " scatter_along_dim into [" << v.outer << ", " << v.n << ", " << v.inner << "]");
      const ReduceShape s{v.outer, v.n, v.inner};
      Generator index_generator(45);
      const Tensor where = randint(0, v.n, {v.outer, v.inner}, index_generator);
      const Tensor values = uniform_values({v.outer, v.inner}, dtype, -2.0, 2.0, 46);
      Tensor out = cpu_empty({v.outer, v.n, v.inner}, dtype), out_gpu = poisoned({v.outer, v.n, v.inner}, dtype);
      kernels::cpu::scatter_along_dim(values, where, s, out);
      kernels::cuda::scatter_along_dim(gpu(values), gpu(where), s, out_gpu);
      check_exact(out_gpu, out);
    }
  }
}

// ---- pooling, im2col, col2im ----------------------------------------------------------------------------

namespace {

// Odd sizes; overlapping windows (stride < kernel) with padding; the CNN's 2x2; a non-square window.
const Window2d kWindows[] = {
    {.batch = 2,
     .channels = 3,
     .height = 7,
     .width = 9,
     .kernel_h = 3,
     .kernel_w = 3,
     .stride_h = 2,
     .stride_w = 2,
     .pad_h = 1,
     .pad_w = 1},
    {.batch = 2, .channels = 3, .height = 8, .width = 6, .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2},
    {.batch = 1,
     .channels = 5,
     .height = 9,
     .width = 7,
     .kernel_h = 3,
     .kernel_w = 3,
     .stride_h = 1,
     .stride_w = 1,
     .pad_h = 1,
     .pad_w = 1},
    {.batch = 3,
     .channels = 2,
     .height = 5,
     .width = 11,
     .kernel_h = 2,
     .kernel_w = 3,
     .stride_h = 1,
     .stride_w = 2,
     .pad_h = 1,
     .pad_w = 1},
};

Shape input_shape(const Window2d& w) { return {w.batch, w.channels, w.height, w.width}; }
Shape output_shape(const Window2d& w) { return {w.batch, w.channels, w.out_h(), w.out_w()}; }

}  // namespace

// Both backends visit each window row by row and add each pixel's window terms in (oh, ow) order, in
// f32, and round once: every result below is the CPU's to the bit.
TEST_CASE("cuda max_pool2d and avg_pool2d: forward and backward match the CPU bit for bit") {
  if (!have_gpu()) return;
  for (DType dtype : kFloating) {
    for (const Window2d& w : kWindows) {
      INFO(dtype_name(dtype) << " x [" << w.batch << ", " << w.channels << ", " << w.height << ", " << w.width
                             << "], kernel " << w.kernel_h << "x" << w.kernel_w << ", stride " << w.stride_h << "x"
                             << w.stride_w << ", padding " << w.pad_h << "x" << w.pad_w);
      const Shape in = input_shape(w), out = output_shape(w);
      // Seven values: ties in most windows; two NaNs, which must win their windows.
      const Tensor ties = whole_numbers(in, dtype, -3, 4, 51);
      const Tensor x = with_nan_at(ties, {5, ties.numel() - 7});
      Tensor y = cpu_empty(out, dtype), y_gpu = poisoned(out, dtype);
      Tensor argmax = cpu_empty(out, DType::I32), argmax_gpu = poisoned(out, DType::I32);
      kernels::cpu::max_pool2d(x, w, y, argmax);
      kernels::cuda::max_pool2d(gpu(x), w, y_gpu, argmax_gpu);
      check_exact(y_gpu, y);
      CHECK(argmax_gpu.to(Device::cpu()).to_vector<std::int32_t>() == argmax.to_vector<std::int32_t>());

      const Tensor dout = uniform_values(out, dtype, -1.0, 1.0, 52);
      Tensor dx = cpu_empty(in, dtype), dx_gpu = poisoned(in, dtype);
      kernels::cpu::max_pool2d_backward(dout, argmax, w, dx);
      kernels::cuda::max_pool2d_backward(gpu(dout), gpu(argmax), w, dx_gpu);
      check_exact(dx_gpu, dx);

      const Tensor real = uniform_values(in, dtype, -2.0, 2.0, 53);
      Tensor avg = cpu_empty(out, dtype), avg_gpu = poisoned(out, dtype);
      kernels::cpu::avg_pool2d(real, w, avg);
      kernels::cuda::avg_pool2d(gpu(real), w, avg_gpu);
      check_exact(avg_gpu, avg);

      Tensor avg_dx = cpu_empty(in, dtype), avg_dx_gpu = poisoned(in, dtype);
      kernels::cpu::avg_pool2d_backward(dout, w, avg_dx);
      kernels::cuda::avg_pool2d_backward(gpu(dout), w, avg_dx_gpu);
      check_exact(avg_dx_gpu, avg_dx);
    }
  }
}

TEST_CASE("cuda im2col copies exactly; col2im sums each pixel's columns (f32 or dx's dtype) in the CPU's order") {
  if (!have_gpu()) return;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::I32}) {
    for (const Window2d& w : kWindows) {
      INFO(dtype_name(dtype) << " x [" << w.batch << ", " << w.channels << ", " << w.height << ", " << w.width
                             << "], kernel " << w.kernel_h << "x" << w.kernel_w << ", stride " << w.stride_h << "x"
                             << w.stride_w << ", padding " << w.pad_h << "x" << w.pad_w);
      const Shape cols_shape{w.batch * w.out_h() * w.out_w(), w.channels * w.kernel_h * w.kernel_w};
      const Tensor x = whole_numbers(input_shape(w), DType::F32, -1000, 1000, 61).to(dtype);
      Tensor cols = cpu_empty(cols_shape, dtype), cols_gpu = poisoned(cols_shape, dtype);
      kernels::cpu::im2col(x, w, cols);
      kernels::cuda::im2col(gpu(x), w, cols_gpu);
      check_exact(cols_gpu, cols);
      if (dtype == DType::I32) continue;  // col2im is for gradients: floating only

      // dcols in dx's dtype, and in f32 (conv2d's f32 window gradients into an f16/bf16 dx).
      for (DType cols_dtype : {dtype, DType::F32}) {
        const Tensor dcols = uniform_values(cols_shape, cols_dtype, -1.0, 1.0, 62);
        Tensor dx = cpu_empty(input_shape(w), dtype), dx_gpu = poisoned(input_shape(w), dtype);
        kernels::cpu::col2im(dcols, w, dx);
        kernels::cuda::col2im(gpu(dcols), w, dx_gpu);
        check_exact(dx_gpu, dx);
      }
    }
  }
}

// ---- LSTM cell --------------------------------------------------------------------------------------------

TEST_CASE("cuda lstm_cell: forward and backward, with the state and bias in the gates' dtype or in f32") {
  if (!have_gpu()) return;
  const std::int64_t B = 37, H = 33;
  struct Dtypes {
    DType gates, state, bias;
  };
  const Dtypes cases[] = {{DType::F32, DType::F32, DType::F32},
                          {DType::F16, DType::F16, DType::F16},
                          {DType::BF16, DType::F32, DType::F32},
                          {DType::F16, DType::F32, DType::F16}};
  for (const Dtypes& d : cases) {
    INFO("gates " << dtype_name(d.gates) << ", state " << dtype_name(d.state) << ", bias " << dtype_name(d.bias));
    const Tensor gates_x = uniform_values({B, 4 * H}, d.gates, -2.0, 2.0, 71);
    const Tensor recurrent = uniform_values({B, 4 * H}, DType::F32, -2.0, 2.0, 72);
    const Tensor bias = uniform_values({4 * H}, d.bias, -1.0, 1.0, 73);
    const Tensor c_prev = uniform_values({B, H}, DType::F32, -1.0, 1.0, 74);
    Tensor acts = cpu_empty({B, 4 * H}, DType::F32), c = cpu_empty({B, H}, DType::F32);
    Tensor hc = cpu_empty({B, 2 * H}, d.state), h_x = cpu_empty({B, H}, d.gates);
    Tensor acts_gpu = poisoned({B, 4 * H}, DType::F32), c_gpu = poisoned({B, H}, DType::F32);
    Tensor hc_gpu = poisoned({B, 2 * H}, d.state), h_x_gpu = poisoned({B, H}, d.gates);
    kernels::cpu::lstm_cell(gates_x, recurrent, bias, c_prev, acts, c, hc, h_x);
    kernels::cuda::lstm_cell(gpu(gates_x), gpu(recurrent), gpu(bias), gpu(c_prev), acts_gpu, c_gpu, hc_gpu, h_x_gpu);
    // The gate inputs are added in the same order; sigmoid/tanh differ by expf/tanhf's ulps (<= 8 eps
    // through 1 / (1 + exp(-z))). c = f c_prev + i g (|terms| <= 1, maybe fused on one side) is off by
    // 16 eps absolute, h = o tanh(c) by 32; c as stored and h are rounded to their dtypes.
    check_near(acts_gpu, acts, 8.0);
    check_near(c_gpu, c, 16.0, 32.0 * kEps32, d.state);
    check_near(hc_gpu, hc, 16.0, 32.0 * kEps32);
    check_near(h_x_gpu, h_x, 16.0, 32.0 * kEps32);

    const Tensor dhc = uniform_values({B, 2 * H}, d.state, -1.0, 1.0, 75);
    const Tensor dh_recurrent = uniform_values({B, H}, DType::F32, -1.0, 1.0, 76);
    const Tensor dc_start = uniform_values({B, H}, DType::F32, -1.0, 1.0, 77);
    const Tensor db_start = uniform_values({4 * H}, DType::F32, -1.0, 1.0, 78);
    Tensor dc_carry = dc_start.clone(), db = db_start.clone(), dgates = cpu_empty({B, 4 * H}, d.gates);
    Tensor dc_carry_gpu = gpu(dc_start), db_gpu = gpu(db_start), dgates_gpu = poisoned({B, 4 * H}, d.gates);
    kernels::cpu::lstm_cell_backward(acts, c_prev, c, dhc, dh_recurrent, dc_carry, dgates, db);
    kernels::cuda::lstm_cell_backward(gpu(acts), gpu(c_prev), gpu(c), gpu(dhc), gpu(dh_recurrent), dc_carry_gpu,
                                      dgates_gpu, db_gpu);
    // dc sums three terms of size <= 2 after tanh(c)'s few ulps: 64 eps absolute; the gate gradients
    // scale it by factors <= 1. dbias_sum adds B such gradients in the same order: B times 64 eps, and
    // as much again for the running sum's roundings of the slightly different terms.
    check_near(dc_carry_gpu, dc_carry, 16.0, 64.0 * kEps32);
    check_near(dgates_gpu, dgates, 16.0, 64.0 * kEps32);
    check_near(db_gpu, db, 16.0, 128.0 * static_cast<double>(B) * kEps32);
  }
}

#else
TEST_CASE("cuda kernels: this build has no CUDA backend") { MESSAGE("skipped: built without CUDA"); }
#endif
