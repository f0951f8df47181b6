// Row gather and scatter-add: the embedding lookup and its gradient.
//
// gather_rows:      out[i, :] = table[indices[i], :]           table [rows, width], indices i32 [count]
// scatter_add_rows: grad_table = 0; grad_table[indices[i], :] += grad[i, :]
//                   accumulated in f32 (f64 for f64) and rounded once, so a token seen 1000 times
//                   in a batch does not lose its gradient to f16 rounding on every addition.
// scatter_along_dim: out = 0; out[o, indices[o, i], i] = values[o, i] for out viewed as
//                   [outer, n, inner] and values, indices (i32) as [outer, inner]: max's backward
//                   along a dim (the gradient goes to the first maximum, as PyTorch's max(dim) does).
// share_among_ties: the backward of max over every element, PyTorch's evenly_distribute_backward:
//                   dx = g / ties where x == max (where x is NaN, if max is NaN), 0 elsewhere, with
//                   ties the number of such elements. g and max are one element of x's dtype, dx has
//                   x's shape and dtype; g / ties is computed in f32 (f64 for f64) and rounded into
//                   dx's dtype, as PyTorch's grad / mask.sum() is.
// Indices are range-checked by the op before the kernel runs.
#pragma once

#include "core/tensor.h"
#include "kernels/backends.h"
#include "kernels/reduce.h"

namespace mg::kernels {

MG_KERNELS(void gather_rows(const Tensor& table, const Tensor& indices, Tensor& out);
           void scatter_add_rows(const Tensor& grad, const Tensor& indices, Tensor& grad_table);
           void scatter_along_dim(const Tensor& values, const Tensor& indices, const ReduceShape& shape, Tensor& out);
           void share_among_ties(const Tensor& g, const Tensor& x, const Tensor& max, Tensor& dx);)

}  // namespace mg::kernels
