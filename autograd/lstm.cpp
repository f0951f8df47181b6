// mg::lstm_recurrence: the time loop of an LSTM layer, forward and backward side by side.
//
// Recorded as one op instead of ~15 small ones per step: a step at batch 32 and hidden 256 is a
// few microseconds of arithmetic, so per-op bookkeeping (and, for a sliced [T, B, 4H] input, a
// full-size gradient per step) would dominate. The GEMMs go through kernels::gemm (f16/bf16
// operands, f32 accumulation); the pointwise part of each step is kernels::lstm_cell.
//
//   forward   for t:  rec = h_{t-1} W_hh^T          gemm, f32 out     [B, 4H]
//                     lstm_cell(gates_x[t], rec, b)  -> acts[t], c[t], out[t] = (h_t, c_t), h_t in X
//   backward  for t = T-1 .. 0:
//                     lstm_cell_backward(...)        -> dgates[t] (X), dc carried, db summed
//                     dh_{t-1} = dgates[t] W_hh       gemm, f32 out     [B, H]
//             dW_hh = dgates^T h_prev                 one gemm over all T*B rows
//
// Saved for backward (in the compute dtype C = f32, or f64): the gate activations [T, B, 4H], the
// cell states [T, B, H] and c0, and the GEMM operands h_prev [T, B, H] in X.
#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "core/factory.h"
#include "kernels/copy.h"
#include "kernels/gemm.h"
#include "kernels/lstm.h"

namespace mg {

namespace {

// Step t of a contiguous [T, ...] tensor as a [rows, cols] view. Made directly, not with the slice
// and reshape ops: they are the kernel's bookkeeping, so the tape records lstm_recurrence alone
// and op observers (amp/diagnostics.h) see no internal steps.
Tensor step(const Tensor& t, std::int64_t index, std::int64_t rows, std::int64_t cols) {
  Tensor view = t.detach();
  view.impl().shape = {rows, cols};
  view.impl().offset += dtype_bytes(t.dtype(), index * rows * cols);
  return view;
}

}  // namespace

Tensor lstm_recurrence(const Tensor& gates_x_in, const Tensor& weight_hh_in, const Tensor& bias_hh, const Tensor& h0,
                       const Tensor& c0) {
  constexpr Op op = Op::LstmRecurrence;
  const OpSpan span(op);
  for (const Tensor* t : {&gates_x_in, &weight_hh_in, &bias_hh, &h0, &c0}) check::floating(op, *t);
  check::same_device(op, {gates_x_in, weight_hh_in, bias_hh, h0, c0});
  MG_CHECK(weight_hh_in.dim() == 2 && weight_hh_in.size(0) == 4 * weight_hh_in.size(1),
           "{}: weight_hh must be [4H, H], got {}", op, weight_hh_in.shape());
  const std::int64_t H = weight_hh_in.size(1);
  MG_CHECK(gates_x_in.dim() == 3 && gates_x_in.size(2) == 4 * H && gates_x_in.size(0) > 0,
           "{}: gates_x must be [T, B, 4H] = [T, B, {}] with T > 0, got {}", op, 4 * H, gates_x_in.shape());
  const std::int64_t T = gates_x_in.size(0), B = gates_x_in.size(1);
  MG_CHECK(bias_hh.shape() == Shape{4 * H}, "{}: bias_hh must be [4H] = [{}], got {}", op, 4 * H, bias_hh.shape());
  MG_CHECK(h0.shape() == (Shape{B, H}) && c0.shape() == (Shape{B, H}),
           "{}: h0 and c0 must be [B, H] = [{}, {}], got {} and {}", op, B, H, h0.shape(), c0.shape());
  auto [gates_x, weight_hh] = autocast_inputs(op, gates_x_in, weight_hh_in);
  check::same_dtype(op, gates_x, weight_hh);
  check::same_dtype(op, h0, c0);
  const DType X = gates_x.dtype(), S = h0.dtype();
  const DType C = X == DType::F64 ? DType::F64 : DType::F32;
  MG_CHECK(S == X || (S == DType::F32 && C == DType::F32),
           "{}: the state (h0, c0) must have the gates' dtype ({}) or f32 (with f16/bf16 gates), got {}", op, X, S);
  MG_CHECK(bias_hh.dtype() == X || (bias_hh.dtype() == DType::F32 && C == DType::F32),
           "{}: bias_hh must have the gates' dtype ({}) or f32 (with f16/bf16 gates), got {}", op, X, bias_hh.dtype());

  const TensorOptions in_c{.dtype = C, .device = h0.device()};
  Tensor out = Tensor::empty({T, B, 2 * H}, check::like(h0));
  Tensor acts = Tensor::empty({T, B, 4 * H}, in_c);
  Tensor cs = Tensor::empty({T, B, H}, in_c);  // c_t as the next step reads it
  Tensor h_prev = Tensor::empty({T, B, H}, {.dtype = X, .device = h0.device()});  // GEMM operand of step t
  Tensor c_first = Tensor::empty({B, H}, in_c);
  kernels::cast(c0, c_first);
  {
    Tensor first = step(h_prev, 0, B, H);
    kernels::cast(h0, first);
  }
  Tensor rec = Tensor::empty({B, 4 * H}, in_c);
  Tensor h_next = Tensor::empty({B, H}, {.dtype = X, .device = h0.device()});
  // W_hh is multiplied T times here and T times in backward: the CPU packs it into its microkernel's
  // panels (or widens an f16/bf16 W_hh to f32) once per pass instead of once per GEMM (kernels/gemm.h;
  // nothing on a GPU).
  const kernels::GemmShape recurrent{.m = B, .n = 4 * H, .k = H, .transpose_b = true};
  const kernels::PreparedGemmB weight_prepared = kernels::prepare_gemm_b(weight_hh, recurrent);
  for (std::int64_t t = 0; t < T; ++t) {
    kernels::gemm_prepared_b(step(h_prev, t, B, H), weight_hh, weight_prepared, rec, recurrent);
    Tensor acts_t = step(acts, t, B, 4 * H), c_t = step(cs, t, B, H), out_t = step(out, t, B, 2 * H);
    Tensor h_x = t + 1 < T ? step(h_prev, t + 1, B, H) : h_next;
    kernels::lstm_cell(step(gates_x, t, B, 4 * H), rec, bias_hh, t == 0 ? c_first : step(cs, t - 1, B, H), acts_t, c_t,
                       out_t, h_x);
  }

  record(op, {gates_x, weight_hh, bias_hh, h0, c0}, out,
         [acts = Saved(acts), cs = Saved(cs), c_first = Saved(c_first), h_prev = Saved(h_prev),
          weight_hh = Saved(weight_hh), bias_dtype = bias_hh.dtype(), T, B, H](const Tensor& g, const auto& needs) {
           const Tensor& w = weight_hh;
           const DType X = w.dtype(), C = acts.get().dtype();
           const TensorOptions in_c{.dtype = C, .device = g.device()};
           Tensor dgates = Tensor::empty({T, B, 4 * H}, {.dtype = X, .device = g.device()});
           Tensor dh_rec = zeros({B, H}, in_c), dc = zeros({B, H}, in_c), db = zeros({4 * H}, in_c);
           const kernels::GemmShape recurrent{.m = B, .n = H, .k = 4 * H};
           const kernels::PreparedGemmB w_prepared = kernels::prepare_gemm_b(w, recurrent);
           for (std::int64_t t = T; t-- > 0;) {
             Tensor dgates_t = step(dgates, t, B, 4 * H);
             kernels::lstm_cell_backward(step(acts, t, B, 4 * H), t == 0 ? c_first.get() : step(cs, t - 1, B, H),
                                         step(cs, t, B, H), step(g, t, B, 2 * H), dh_rec, dc, dgates_t, db);
             kernels::gemm_prepared_b(dgates_t, w, w_prepared, dh_rec, recurrent);  // dh_{t-1}, f32
           }
           Grads grads(5);
           grads[0] = dgates;
           if (needs[1]) {
             grads[1] = Tensor::empty({4 * H, H}, {.dtype = X, .device = g.device()});
             kernels::gemm(dgates.reshape({T * B, 4 * H}), h_prev.get().reshape({T * B, H}), grads[1],
                           {.m = 4 * H, .n = H, .k = T * B, .transpose_a = true});
           }
           const DType S = g.dtype();
           grads[2] = Tensor::empty({4 * H}, {.dtype = bias_dtype, .device = g.device()});
           kernels::cast(db, grads[2]);
           grads[3] = Tensor::empty({B, H}, {.dtype = S, .device = g.device()});
           kernels::cast(dh_rec, grads[3]);
           grads[4] = Tensor::empty({B, H}, {.dtype = S, .device = g.device()});
           kernels::cast(dc, grads[4]);
           return grads;
         });
  return out;
}

}  // namespace mg
