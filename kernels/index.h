// Row gather and scatter-add: the embedding lookup and its gradient.
//
// gather_rows:      out[i, :] = table[indices[i], :]           table [rows, width], indices i32 [count]
// scatter_add_rows: grad_table = 0; grad_table[indices[i], :] += grad[i, :]
//                   accumulated in f32 (f64 for f64) and rounded once, so a token seen 1000 times
//                   in a batch does not lose its gradient to f16 rounding on every addition.
// scatter_along_dim: out = 0; out[o, indices[o, i], i] = values[o, i] for out viewed as
//                   [outer, n, inner] and values, indices (i32) as [outer, inner]: max's backward.
// Indices are range-checked by the op before the kernel runs.
#pragma once

#include "core/tensor.h"
#include "kernels/reduce.h"

namespace mg::kernels {

void gather_rows(const Tensor& table, const Tensor& indices, Tensor& out);
void scatter_add_rows(const Tensor& grad, const Tensor& indices, Tensor& grad_table);
void scatter_along_dim(const Tensor& values, const Tensor& indices, const ReduceShape& shape, Tensor& out);

namespace cpu {
void gather_rows(const Tensor& table, const Tensor& indices, Tensor& out);
void scatter_add_rows(const Tensor& grad, const Tensor& indices, Tensor& grad_table);
void scatter_along_dim(const Tensor& values, const Tensor& indices, const ReduceShape& shape, Tensor& out);
}  // namespace cpu

// The CUDA backend (kernels/cuda/), in builds with MG_WITH_CUDA: same contract, tensors on one GPU.
namespace cuda {
void gather_rows(const Tensor& table, const Tensor& indices, Tensor& out);
void scatter_add_rows(const Tensor& grad, const Tensor& indices, Tensor& grad_table);
void scatter_along_dim(const Tensor& values, const Tensor& indices, const ReduceShape& shape, Tensor& out);
}  // namespace cuda

}  // namespace mg::kernels
