// CUDA LSTM cell: the pointwise half of one step, forward and backward (contract and formulas:
// kernels/lstm.h; reference: kernels/cpu/lstm.cpp, whose expressions these kernels repeat in the same
// order, with the same functors from kernels/pointwise.h).
//
// B = batch, H = hidden. Dtypes, as on the CPU: X is the gates' dtype (f32, f16 or bf16); the compute
// type C is f32; S, the dtype of hc and dhc, is X or f32; the bias is X or f32.
//   forward   gates_x [B, 4H] X, recurrent [B, 4H] C, bias [4H], c_prev [B, H] C
//             -> acts [B, 4H] C (i, f, g, o), c_out [B, H] C (c after rounding to S), hc [B, 2H] S, h_x [B, H] X
//   backward  acts, c_prev, c [B, H] C, dhc [B, 2H] S, dh_recurrent [B, H] C
//             -> dgates [B, 4H] X, dc_carry [B, H] C (in place), dbias_sum [4H] C (+= column sums of dgates)
//
// Launch geometry: 1-D grid-stride loops of 256-thread blocks.
//   cell, cell_backward  one thread per (r, j), j < H: it owns hidden unit j of row r and the four
//                        gate columns j, H + j, 2H + j, 3H + j (adjacent threads: adjacent j, coalesced)
//   bias sums            one thread per column of dgates, adding rows r = 0, 1, ... in order: the CPU's
//                        order, deterministic, no atomics. It reads the unrounded f32 gradients (dgates
//                        itself when X is f32, else an f32 scratch copy the cell kernel writes), since
//                        the CPU sums before rounding to X.
//
// Test: build/tests/test_cuda_kernels -tc='cuda lstm*'. Benchmark: none of its own yet; profile the
// LSTM example's training step with nsys.
#include "kernels/cuda/common.cuh"
#include "kernels/pointwise.h"
#include "kernels/lstm.h"

namespace mg::kernels::cuda {

namespace {

constexpr int kBlock = 256;

template <class X, class Bias, class S>
__global__ void __launch_bounds__(kBlock)
    cell(const X* gates_x, const float* recurrent, const Bias* bias, const float* c_prev, std::int64_t batch,
         std::int64_t hidden, float* acts, float* c_out, S* hc, X* h_x) {
  for (std::int64_t t = first_index(); t < batch * hidden; t += grid_stride()) {
    const std::int64_t r = t / hidden, j = t % hidden;
    float gate[4];  // i, f, g, o
    for (int k = 0; k < 4; ++k) {
      const std::int64_t at = r * 4 * hidden + k * hidden + j;
      const float z = to_float(gates_x[at]) + recurrent[at] + to_float(bias[k * hidden + j]);
      gate[k] = k == 2 ? functors::Tanh{}(z) : functors::Sigmoid{}(z);
      acts[at] = gate[k];
    }
    const float c = gate[1] * c_prev[t] + gate[0] * gate[2];
    const float h = gate[3] * functors::Tanh{}(c);
    hc[r * 2 * hidden + j] = from_float<S>(h);
    hc[r * 2 * hidden + hidden + j] = from_float<S>(c);
    h_x[t] = from_float<X>(h);
    c_out[t] = to_float(from_float<S>(c));  // the state the next step reads is c as stored
  }
}

template <class X, class S>
__global__ void __launch_bounds__(kBlock)
    cell_backward(const float* acts, const float* c_prev, const float* c, const S* dhc, const float* dh_recurrent,
                  std::int64_t batch, std::int64_t hidden, float* dc_carry, X* dgates, float* dgates_f32) {
  for (std::int64_t t = first_index(); t < batch * hidden; t += grid_stride()) {
    const std::int64_t r = t / hidden, j = t % hidden;
    const float* act = acts + r * 4 * hidden + j;
    const float i = act[0], f = act[hidden], g = act[2 * hidden], o = act[3 * hidden];
    const float tc = functors::Tanh{}(c[t]);
    const float dh = dh_recurrent[t] + to_float(dhc[r * 2 * hidden + j]);
    const float dc = dc_carry[t] + to_float(dhc[r * 2 * hidden + hidden + j]) + functors::Tanh{}.grad(dh * o, tc);
    const float grad[4] = {functors::Sigmoid{}.grad(dc * g, i), functors::Sigmoid{}.grad(dc * c_prev[t], f),
                           functors::Tanh{}.grad(dc * i, g), functors::Sigmoid{}.grad(dh * tc, o)};
    dc_carry[t] = dc * f;
    for (int k = 0; k < 4; ++k) {
      const std::int64_t at = r * 4 * hidden + k * hidden + j;
      dgates[at] = from_float<X>(grad[k]);
      if (dgates_f32) dgates_f32[at] = grad[k];
    }
  }
}

// dbias_sum[k] += dgates[0, k] + dgates[1, k] + ..., added one row at a time as on the CPU.
__global__ void __launch_bounds__(kBlock)
    add_column_sums(const float* dgates, std::int64_t batch, std::int64_t columns, float* dbias_sum) {
  for (std::int64_t k = first_index(); k < columns; k += grid_stride()) {
    float sum = dbias_sum[k];
    for (std::int64_t r = 0; r < batch; ++r) sum += dgates[r * columns + k];
    dbias_sum[k] = sum;
  }
}

// Calls fn(X{}) when `dtype` is the gates' dtype and fn(float{}) when it is f32: f16/bf16 gates may
// keep their state and bias in f32.
template <class X, class Fn>
void visit_x_or_f32(DType dtype, DType x_dtype, const char* kernel, Fn&& fn) {
  if (dtype == x_dtype) return fn(X{});
  MG_CHECK(dtype == DType::F32, "CUDA kernel {}: expected {} (the gates' dtype) or f32, got {}", kernel, x_dtype,
           dtype);
  fn(float{});
}

}  // namespace

void lstm_cell(const Tensor& gates_x, const Tensor& recurrent, const Tensor& bias, const Tensor& c_prev, Tensor& acts,
               Tensor& c_out, Tensor& hc, Tensor& h_x) {
  const std::int64_t batch = c_prev.size(0), hidden = c_prev.size(1);
  if (batch * hidden == 0) return;
  mg::cuda::DeviceGuard guard(acts.device().index);
  visit_device_floating(gates_x.dtype(), "lstm_cell", [&](auto x_zero) {
    using X = decltype(x_zero);
    visit_x_or_f32<X>(bias.dtype(), gates_x.dtype(), "lstm_cell (bias)", [&](auto bias_zero) {
      visit_x_or_f32<X>(hc.dtype(), gates_x.dtype(), "lstm_cell (hc)", [&](auto s_zero) {
        using Bias = decltype(bias_zero);
        using S = decltype(s_zero);
        MG_LAUNCH(cell, blocks_for(batch * hidden, kBlock), kBlock, 0, stream_of(acts))
        (device_ptr<X>(gates_x), device_ptr<float>(recurrent), device_ptr<Bias>(bias), device_ptr<float>(c_prev), batch,
         hidden, device_ptr<float>(acts), device_ptr<float>(c_out), device_ptr<S>(hc), device_ptr<X>(h_x));
        MG_CUDA_LAUNCHED();
      });
    });
  });
}

void lstm_cell_backward(const Tensor& acts, const Tensor& c_prev, const Tensor& c, const Tensor& dhc,
                        const Tensor& dh_recurrent, Tensor& dc_carry, Tensor& dgates, Tensor& dbias_sum) {
  const std::int64_t batch = c.size(0), hidden = c.size(1);
  if (batch * hidden == 0) return;
  mg::cuda::DeviceGuard guard(dgates.device().index);
  const cudaStream_t stream = stream_of(dgates);
  // The bias sums read unrounded gradients: dgates itself when it is f32, else this f32 copy.
  const bool rounded = dgates.dtype() != DType::F32;
  Tensor dgates_f32 = rounded ? Tensor::empty(dgates.shape(), {.dtype = DType::F32, .device = dgates.device()})
                              : dgates;
  visit_device_floating(dgates.dtype(), "lstm_cell_backward", [&](auto x_zero) {
    using X = decltype(x_zero);
    visit_x_or_f32<X>(dhc.dtype(), dgates.dtype(), "lstm_cell_backward (dhc)", [&](auto s_zero) {
      using S = decltype(s_zero);
      MG_LAUNCH(cell_backward, blocks_for(batch * hidden, kBlock), kBlock, 0, stream)
      (device_ptr<float>(acts), device_ptr<float>(c_prev), device_ptr<float>(c), device_ptr<S>(dhc),
       device_ptr<float>(dh_recurrent), batch, hidden, device_ptr<float>(dc_carry), device_ptr<X>(dgates),
       rounded ? device_ptr<float>(dgates_f32) : nullptr);
      MG_CUDA_LAUNCHED();
    });
  });
  MG_LAUNCH(add_column_sums, blocks_for(4 * hidden, kBlock), kBlock, 0, stream)
  (device_ptr<float>(dgates_f32), batch, 4 * hidden, device_ptr<float>(dbias_sum));
  MG_CUDA_LAUNCHED();
}

}  // namespace mg::kernels::cuda
