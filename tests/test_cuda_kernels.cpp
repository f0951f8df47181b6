// The CUDA kernels of reductions, softmax and cross-entropy, row gathers and scatters, pooling,
// im2col/col2im and the LSTM cell (kernels/cuda/*.cu) against their CPU references (kernels/cpu/).
//
// How a case reads (add one the same way):
//   1. build the inputs on the CPU in f32, f16 and bf16, with odd sizes and both memory patterns
//      (inner == 1 and inner > 1), sized to reach every launch path of the kernel file;
//   2. run kernels::cpu::fn into CPU outputs, and kernels::cuda::fn on copies of the inputs into GPU
//      outputs poisoned with NaN (i32: -12345) first, so an element a kernel forgot to write fails;
//   3. bring the GPU outputs back and compare them
//      - exactly, where both backends do the same operations in the same order (moves, max and
//        argmax, the window sums of pooling and col2im) or where the inputs make every order exact
//        (sums of small whole numbers are exact in f32, whatever the order of additions);
//      - otherwise within check_near's tolerance: 1 eps of the stored dtype (the two backends may round
//        f32 values that differ in their last bits to neighbouring f16/bf16 values) plus a number of
//        f32 eps derived beside each case for the reordered f32 arithmetic and CUDA's expf/tanhf
//        (at most 2 ulp off; glibc's 1).
// A reordered f32 sum of n terms: each addition rounds by at most eps/2 of a partial sum, and the
// errors of the two orders add like a random walk, so their difference stays within about
// 2.5 sqrt(n) eps of the largest partial sum (6 standard deviations); `reorder(n)` = 4 sqrt(n) + 16
// eps leaves room for the last, tree-shaped levels of the GPU's reduction.
// Every case starts with `if (!have_gpu()) return;`. A build without CUDA has no case here.
#include "tests/testing.h"

#ifdef MG_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/conv.h"
#include "kernels/copy.h"
#include "kernels/index.h"
#include "kernels/lstm.h"
#include "kernels/pool.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"

using namespace mg;
using namespace mg::testing;
using kernels::ReduceOp;
using kernels::ReduceShape;
using kernels::Window2d;

namespace {

const DType kFloating[] = {DType::F32, DType::F16, DType::BF16};
const double kEps32 = dtype_eps(DType::F32);
const double kNaN = std::numeric_limits<double>::quiet_NaN();

double reorder(std::int64_t n) { return 4.0 * std::sqrt(static_cast<double>(n)) + 16.0; }

Tensor cpu_empty(const Shape& shape, DType dtype) { return Tensor::empty(shape, {.dtype = dtype}); }

// A GPU tensor full of NaN (i32: -12345, never a valid index).
Tensor poisoned(const Shape& shape, DType dtype) {
  Tensor out = Tensor::empty(shape, {.dtype = dtype, .device = Device::cuda()});
  kernels::copy_between_devices(full(shape, dtype == DType::I32 ? -12345.0 : kNaN, {.dtype = dtype}), out);
  return out;
}

Tensor gpu(const Tensor& t) { return t.to(Device::cuda()); }

Tensor uniform_values(const Shape& shape, DType dtype, double low, double high, std::uint64_t seed) {
  Generator generator(seed);
  return uniform(shape, low, high, generator, {.dtype = DType::F32}).to(dtype);
}

// Whole numbers in [low, high) times `scale` (a power of two keeps them exact in every dtype).
Tensor whole_numbers(const Shape& shape, DType dtype, std::int64_t low, std::int64_t high, std::uint64_t seed,
                     double scale = 1.0) {
  Generator generator(seed);
  return mul(randint(low, high, shape, generator).to(DType::F32), scale).to(dtype);
}

Tensor with_nan_at(const Tensor& t, const std::vector<std::int64_t>& positions) {
  std::vector<double> values = t.to_vector<double>();
  for (std::int64_t at : positions) values[static_cast<std::size_t>(at)] = kNaN;
  return from_vector(values, t.shape(), {.dtype = t.dtype()});
}

// The largest value that is not NaN.
double max_ignoring_nan(const Tensor& t) {
  double best = -std::numeric_limits<double>::infinity();
  for (double v : t.to_vector<double>())
    if (!std::isnan(v)) best = std::max(best, v);
  return best;
}

void check_exact(const Tensor& on_gpu, const Tensor& expected) {
  check_close(on_gpu.to(Device::cpu()), expected, 0.0, 0.0);
}

// |gpu - cpu| <= (eps(stored) + f32_eps * eps32) |cpu| + atol, where `stored` is the dtype the value was
// last rounded to (f16 also gets its subnormal spacing 2^-24 as atol: a flip there is not relative).
void check_near(const Tensor& on_gpu, const Tensor& expected, double f32_eps, double atol = 0.0,
                DType stored = DType::F32) {
  if (expected.dtype() != DType::F32) stored = expected.dtype();
  const double rounding = stored == DType::F32 ? 0.0 : dtype_eps(stored);
  if (stored == DType::F16) atol += std::ldexp(1.0, -24);
  check_close(on_gpu.to(Device::cpu()), expected, rounding + f32_eps * kEps32, atol);
}

struct View {
  std::int64_t outer, n, inner;
  const char* path;
};

}  // namespace

// ---- reduce ---------------------------------------------------------------------------------------

TEST_CASE("cuda reduce: sum, mean and max match the CPU bit for bit on whole numbers, NaN and ties included") {
  if (!have_gpu()) return;
  const View views[] = {{37, 129, 1, "a warp per row"},        {3, 5000, 1, "a block per row"},
                        {1, 100003, 1, "rows in 13 parts"},     {2, 17, 7, "columns, one part"},
                        {3, 129, 5, "columns in 5 parts"},      {1, 10000, 2, "columns in 250 parts"},
                        {37, 1, 1, "n = 1"},                    {4, 1, 3, "n = 1, inner > 1"}};
  for (DType dtype : kFloating) {
    for (const View& v : views) {
      INFO(dtype_name(dtype) << " [" << v.outer << ", " << v.n << ", " << v.inner << "]: " << v.path);
      const ReduceShape s{v.outer, v.n, v.inner};
      const Shape out_shape{v.outer, v.inner};
      // |sum| <= 8 * 100003 < 2^24: every partial sum is exact in f32, so every order gives the CPU's bits.
      const Tensor x = whole_numbers({v.outer, v.n, v.inner}, dtype, -8, 9, 11);
      const Tensor x_gpu = gpu(x);
      std::vector<DType> outs{dtype};
      if (dtype != DType::F32) outs.push_back(DType::F32);  // an f32 out keeps an f16 sum exact
      for (DType out_dtype : outs) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean}) {
          Tensor expected = cpu_empty(out_shape, out_dtype), got = poisoned(out_shape, out_dtype);
          kernels::cpu::reduce(op, x, s, expected, nullptr);
          kernels::cuda::reduce(op, x_gpu, s, got, nullptr);
          check_exact(got, expected);
        }
      }
      // Max: ties everywhere (17 values), and two NaNs of which the first must win, across parts too.
      const Tensor y = with_nan_at(x, {x.numel() / 2 + 1, x.numel() * 3 / 4});
      const Tensor y_gpu = gpu(y);
      Tensor expected = cpu_empty(out_shape, dtype), got = poisoned(out_shape, dtype);
      Tensor expected_index = cpu_empty(out_shape, DType::I32), got_index = poisoned(out_shape, DType::I32);
      kernels::cpu::reduce(ReduceOp::Max, y, s, expected, &expected_index);
      kernels::cuda::reduce(ReduceOp::Max, y_gpu, s, got, &got_index);
      check_exact(got, expected);
      CHECK(got_index.to(Device::cpu()).to_vector<std::int32_t>() == expected_index.to_vector<std::int32_t>());
    }
  }
}

TEST_CASE("cuda reduce: sums of real values within the reordering tolerance") {
  if (!have_gpu()) return;
  const View views[] = {{37, 129, 1, "warp"}, {1, 100003, 1, "row parts"}, {3, 129, 5, "column parts"}};
  for (DType dtype : kFloating) {
    for (const View& v : views) {
      INFO(dtype_name(dtype) << " [" << v.outer << ", " << v.n << ", " << v.inner << "]: " << v.path);
      const ReduceShape s{v.outer, v.n, v.inner};
      // Positive terms (0.5 to 1.5): the largest partial sum is the result, so reorder(n) is relative.
      const Tensor x = uniform_values({v.outer, v.n, v.inner}, dtype, 0.5, 1.5, 12);
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean}) {
        Tensor expected = cpu_empty({v.outer, v.inner}, dtype), got = poisoned({v.outer, v.inner}, dtype);
        kernels::cpu::reduce(op, x, s, expected, nullptr);
        kernels::cuda::reduce(op, gpu(x), s, got, nullptr);
        check_near(got, expected, reorder(v.n));
      }
    }
  }
}

// ---- softmax and cross-entropy ------------------------------------------------------------------------

TEST_CASE("cuda softmax and log_softmax: forward and backward, every launch path") {
  if (!have_gpu()) return;
  const View views[] = {{37, 129, 1, "a warp per row"}, {3, 5000, 1, "a block per row"},
                        {3, 129, 5, "a thread per row"}, {5, 1, 1, "n = 1"}};
  for (DType dtype : kFloating) {
    for (const View& v : views) {
      for (bool log : {false, true}) {
        INFO(dtype_name(dtype) << (log ? " log_softmax" : " softmax") << " [" << v.outer << ", " << v.n << ", "
                               << v.inner << "]: " << v.path);
        const ReduceShape s{v.outer, v.n, v.inner};
        const Shape shape{v.outer, v.n, v.inner};
        // One NaN: its whole row must come out NaN on both backends.
        const Tensor x = with_nan_at(uniform_values(shape, dtype, -6.0, 6.0, 21), {v.inner});
        Tensor y = cpu_empty(shape, dtype), y_gpu = poisoned(shape, dtype);
        kernels::cpu::softmax(x, s, log, y);
        kernels::cuda::softmax(gpu(x), s, log, y_gpu);
        // The max is the same element on both; log_sum differs by the sum's relative difference,
        // reorder(n) + 3 eps (expf: 3 ulp between the backends), plus logf's ulp (|log_sum| < 21: 16 eps).
        // log_softmax = x - max - log_sum carries that absolute difference; softmax = exp(it) turns it
        // into a relative one, plus the argument's rounding (|argument| < 33: 16 eps) and expf's 3 ulp.
        if (log) check_near(y_gpu, y, 4.0, (reorder(v.n) + 19.0) * kEps32);
        else check_near(y_gpu, y, reorder(v.n) + 38.0);

        const Tensor dy = uniform_values(shape, dtype, -1.0, 1.0, 22);
        Tensor dx = cpu_empty(shape, dtype), dx_gpu = poisoned(shape, dtype);
        kernels::cpu::softmax_backward(y, dy, s, log, dx);
        kernels::cuda::softmax_backward(gpu(y), gpu(dy), s, log, dx_gpu);
        // softmax: dx = y (dy - dot) with |dot| <= sum |dy y| <= 1, so dot is off by reorder(n) eps and dx
        // by |y| <= 1 times that. log_softmax: dx = dy - exp(y) dot with dot = sum(dy), off by reorder(n)
        // eps of the row's sum |dy|, times exp(y) <= 1.
        // (The NaN row is NaN on both; it is left out of the scale.)
        const double scale =
            log ? std::exp(max_ignoring_nan(y)) * mg::max(sum(abs(dy.to(DType::F32)), 1)).item() + 1.0 : 2.0;
        check_near(dx_gpu, dx, 8.0, reorder(v.n) * scale * kEps32);
      }
    }
  }
}

TEST_CASE("cuda cross_entropy: loss and logsumexp per row, gradient per logit, ignore_index rows") {
  if (!have_gpu()) return;
  const std::int64_t ignore_index = -100;
  const std::int64_t sizes[][2] = {{37, 129}, {3, 5000}, {5, 1}};
  for (DType dtype : kFloating) {
    for (const auto& size : sizes) {
      const std::int64_t rows = size[0], classes = size[1];
      INFO(dtype_name(dtype) << " logits [" << rows << ", " << classes << "]");
      const Tensor logits = uniform_values({rows, classes}, dtype, -6.0, 6.0, 31);
      Generator generator(32);
      std::vector<double> label_values = randint(0, classes, {rows}, generator).to_vector<double>();
      label_values[0] = label_values[static_cast<std::size_t>(rows / 2)] = static_cast<double>(ignore_index);
      const Tensor labels = from_vector(label_values, {rows}, {.dtype = DType::I32});
      Tensor loss = cpu_empty({rows}, DType::F32), lse = cpu_empty({rows}, DType::F32);
      Tensor loss_gpu = poisoned({rows}, DType::F32), lse_gpu = poisoned({rows}, DType::F32);
      kernels::cpu::cross_entropy(logits, labels, ignore_index, loss, lse);
      kernels::cuda::cross_entropy(gpu(logits), gpu(labels), ignore_index, loss_gpu, lse_gpu);
      // lse = max + log(sum): off by the sum's reorder(classes) + 3 eps (expf), logf's ulp (|log_sum| < 16:
      // 8 eps) and the roundings of lse and of the loss lse - x (|lse| < 16: 4 eps each); absolute, all f32.
      // Ignored rows are exactly 0 on both.
      check_near(lse_gpu, lse, 0.0, (reorder(classes) + 19.0) * kEps32);
      check_near(loss_gpu, loss, 0.0, (reorder(classes) + 19.0) * kEps32);
      CHECK(loss_gpu.to(Device::cpu()).to_vector<double>()[0] == 0.0);

      // Backward from the CPU's lse on both, so only the kernel is compared: x - lse is the same on both,
      // p = expf(it) <= 1 differs by 3 ulp, and p - [c == label] and the product with |w| < 1.5 round once each.
      const Tensor row_weight = uniform_values({rows}, DType::F32, 0.5, 1.5, 33);
      Tensor dlogits = cpu_empty({rows, classes}, dtype), dlogits_gpu = poisoned({rows, classes}, dtype);
      kernels::cpu::cross_entropy_backward(logits, labels, lse, row_weight, ignore_index, dlogits);
      kernels::cuda::cross_entropy_backward(gpu(logits), gpu(labels), gpu(lse), gpu(row_weight), ignore_index,
                                            dlogits_gpu);
      check_near(dlogits_gpu, dlogits, 4.0, 1.5 * 4.0 * kEps32);
    }
  }
}

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
    {.batch = 2, .channels = 3, .height = 7, .width = 9, .kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2,
     .pad_h = 1, .pad_w = 1},
    {.batch = 2, .channels = 3, .height = 8, .width = 6, .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2},
    {.batch = 1, .channels = 5, .height = 9, .width = 7, .kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1,
     .pad_h = 1, .pad_w = 1},
    {.batch = 3, .channels = 2, .height = 5, .width = 11, .kernel_h = 2, .kernel_w = 3, .stride_h = 1, .stride_w = 2,
     .pad_h = 1, .pad_w = 1},
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

TEST_CASE("cuda im2col copies exactly; col2im sums each pixel's columns in the CPU's order") {
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

      const Tensor dcols = uniform_values(cols_shape, dtype, -1.0, 1.0, 62);
      Tensor dx = cpu_empty(input_shape(w), dtype), dx_gpu = poisoned(input_shape(w), dtype);
      kernels::cpu::col2im(dcols, w, dx);
      kernels::cuda::col2im(gpu(dcols), w, dx_gpu);
      check_exact(dx_gpu, dx);
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
