// Fused scaled-dot-product attention, FlashAttention-2's algorithm (Dao 2023) on the CPU: for each
// of `batch` independent heads,
//
//   S = scale q k^T   [q_len, kv_len], entry (t, s) left out (as -inf) where causal and s > t
//   P = softmax(S) along s,  O = dropout(P) v,  lse_t = log sum_s exp(S_ts)
//
// without ever storing S or P: one query row at a time, its scores are computed, exponentiated
// against a running maximum (the online softmax: a key block that raises the maximum rescales the
// sum and the output so far by exp(old max - new max)) and multiplied into v, all in the compute
// type (f32; f64 for f64), then O is rounded once to q's dtype. The backward recomputes P from the
// saved lse (P_ts = exp(S_ts - lse_t), no second softmax) and gives
//
//   dV = dropout(P)^T dO,   dP = dO v^T (through the mask),   dS = P (dP - D),  D_t = dO_t . O_t,
//   dQ = scale dS k,        dK = scale dS^T q.
//
// Dropout keeps weight (b, t, s) when u >= p, u the f32 in [0, 1) that Philox word
// (b q_len + t) kv_len + s of (seed, first_block) gives: the mask mg::dropout draws for the [batch,
// q_len, kv_len] weights from the same generator position (kernels/random.h), so the fused and the
// unfused attention drop the same weights, and the backward redraws the mask instead of storing it.
//
// Layouts: q [batch, q_len, head_dim], k [batch, kv_len, head_dim], v [batch, kv_len, value_dim],
// out [batch, q_len, value_dim] (q's dtype), lse [batch, q_len] in the compute type; gradients like
// their inputs. mg::scaled_dot_product_attention (autograd/ops.h) checks everything first.
// The CPU only: on a GPU the op runs its unfused composition until a kernel lands (kernels/cuda/README.md).
// Tests: build/tests/test_ops_attention.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mg::kernels {

struct AttentionShape {
  std::int64_t batch = 0, q_len = 0, kv_len = 0, head_dim = 0, value_dim = 0;
  double scale = 1.0;  // multiplies q k^T (1 / sqrt(head_dim) unless the caller chose)
  bool causal = false;  // query t sees keys s <= t
  double dropout = 0.0;  // the probability of dropping a weight; 0: none
  std::uint64_t seed = 0, first_block = 0;  // dropout's Philox position (Generator::reserve)
};

// Entry points: check devices and dtypes, then run the CPU kernel (an mg::Error on another device).
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& shape, Tensor& out,
                       Tensor& lse);
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& d_out,
                        const Tensor& lse, const AttentionShape& shape, Tensor& dq, Tensor& dk, Tensor& dv);

namespace cpu {
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& shape, Tensor& out,
                       Tensor& lse);
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& d_out,
                        const Tensor& lse, const AttentionShape& shape, Tensor& dq, Tensor& dk, Tensor& dv);
}  // namespace cpu

}  // namespace mg::kernels
