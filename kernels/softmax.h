// Softmax, log-softmax and fused cross-entropy. All math in f32 (f64 for f64): exponentials of
// f16 logits are exactly what overflows, so these ops never compute in f16 (paper, section 3.3).
//
// softmax / log_softmax: x, y, dy, dx share one dtype and the [outer, n, inner] view of
// kernels/reduce.h, with the softmax taken along n. A row holding +inf or NaN, or only -inf, is NaN
// throughout, forward and backward (PyTorch's result); a -inf beside finite values has probability 0.
//   forward   y = softmax(x)                      or  y = log_softmax(x)
//   backward  dx = y * (dy - sum(dy * y))         or  dx = dy - exp(y) * sum(dy)
//
// cross_entropy on logits [rows, classes] and i32 labels [rows]:
//   forward  writes row_stats [rows, 2]: (max_c x[r, c], log_sum[r] = log(sum_c exp(x[r, c] - max))) and
//            loss[r] = log_sum[r] - (x[r, label[r]] - max) (0 where label == ignore_index), in the
//            compute dtype (f32; f64 for f64 logits), so backward rebuilds the softmax without saving it
//   backward dx[r, c] = row_weight[r] * (exp((x[r, c] - max) - log_sum[r]) - [c == label[r]]), in x's
//            dtype; rows with label == ignore_index get 0. row_weight (compute dtype) carries the
//            reduction: g for sum, g / count for mean, g[r] for none.
// max and log_sum are kept apart, never added into one logsumexp: rounded at the scale of max (2^-11
// for a logit near 1e4 in f32), that sum would carry its rounding into every probability. x - max is
// small, and exact when the two are within a factor of 2, as in PyTorch's log_softmax.
// A row holding +inf or NaN, or only -inf, has NaN statistics: its loss and gradient are NaN (PyTorch).
// Labels are range-checked by the op before the kernel runs.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/backends.h"
#include "kernels/reduce.h"

namespace mg::kernels {

MG_KERNELS(void softmax(const Tensor& x, const ReduceShape& shape, bool log, Tensor& y);
           void softmax_backward(const Tensor& y, const Tensor& dy, const ReduceShape& shape, bool log, Tensor& dx);

           void cross_entropy(const Tensor& logits, const Tensor& labels, std::int64_t ignore_index, Tensor& loss,
                              Tensor& row_stats);
           void cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& row_stats,
                                       const Tensor& row_weight, std::int64_t ignore_index, Tensor& dlogits);)

}  // namespace mg::kernels
