// The pointwise half of one LSTM step (mg::lstm_recurrence runs the time loop and the GEMMs).
// Math in C = f32 (f64 for f64 tensors); every tensor is contiguous and B = batch, H = hidden.
//
// forward, for one step t (PyTorch's gate order i, f, g, o):
//   gates  = gates_x [B, 4H] (dtype X) + recurrent [B, 4H] (C: h W_hh^T) + bias [4H] (X or f32)
//   i, f, o = sigmoid(gates blocks 0, 1, 3);  g = tanh(gates block 2)
//   c = f * c_prev + i * g;  h = o * tanh(c)          c_prev [B, H] in C
//   writes acts [B, 4H] (C: i, f, g, o), c_out [B, H] (C: c as stored, i.e. after rounding to S),
//          hc [B, 2H] (dtype S: h and c side by side) and h_x [B, H] (dtype X: the next step's GEMM operand)
// backward, for the same step, walking t downwards:
//   dh = dh_recurrent [B, H] (C: dgates_{t+1} W_hh) + dhc[:, :H];  tc = tanh(c)
//   dc = dc_carry + dhc[:, H:] + dh * o * (1 - tc^2)
//   dgates = [dc g i(1-i), dc c_prev f(1-f), dc i (1-g^2), dh tc o(1-o)]  -> dgates [B, 4H] (dtype X)
//   dc_carry = dc * f (C, in place);  dbias_sum [4H] (C) += the column sums of dgates
// Tests: build/tests/test_ops_lstm.
#pragma once

#include "core/tensor.h"
#include "kernels/backends.h"

namespace mg::kernels {

MG_KERNELS(void lstm_cell(const Tensor& gates_x, const Tensor& recurrent, const Tensor& bias, const Tensor& c_prev,
                          Tensor& acts, Tensor& c_out, Tensor& hc, Tensor& h_x);
           void lstm_cell_backward(const Tensor& acts, const Tensor& c_prev, const Tensor& c, const Tensor& dhc,
                                   const Tensor& dh_recurrent, Tensor& dc_carry, Tensor& dgates, Tensor& dbias_sum);)

}  // namespace mg::kernels
