// Fused layer normalization over the last dim, forward and backward, on the CPU. For each of `rows`
// rows of x [rows, features], with f the number of features:
//
//   mean_r = sum_i x_ri / f,   rstd_r = 1 / sqrt(sum_i (x_ri - mean_r)^2 / f + eps)
//   y_ri = xhat_ri w_i + b_i,  xhat_ri = (x_ri - mean_r) rstd_r
//
// and, from dy, with gw = dy w (Ba, Kiros and Hinton 2016; the same three lines as PyTorch's kernel):
//
//   dx_ri = rstd_r (gw_ri - sum_i gw_ri / f - xhat_ri sum_i gw_ri xhat_ri / f)
//   dw_i = sum_r dy_ri xhat_ri,   db_i = sum_r dy_ri
//
// Everything is computed in the compute type C (f32; f64 for f64) and each output rounded once: x
// may be f16 or bf16 while y is f32 (layer_norm under autocast reads the lower-precision rows as they
// are, widening them in the kernel instead of in a cast that writes an f32 copy first).
//
// Dtypes: y, weight, bias and dy share one dtype (f32, or x's); mean and rstd [rows] are C; dx is
// x's dtype, dweight and dbias weight's. weight and bias may be undefined (1 and 0); an undefined dx,
// dweight or dbias is not computed. mg::layer_norm (autograd/ops.h) checks everything first.
// The CPU only: on a GPU mg::layer_norm composes its ops (mean, sub, mul, pow, add).
// Tests: build/tests/test_ops_norm.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mg::kernels {

struct LayerNormShape {
  std::int64_t rows = 0, features = 0;
  double eps = 1e-5;
};

// Entry points: check shapes, dtypes and devices, then run the CPU kernel (an mg::Error on a GPU).
void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const LayerNormShape& shape,
                        Tensor& y, Tensor& mean, Tensor& rstd);
void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const LayerNormShape& shape, Tensor& dx, Tensor& dweight, Tensor& dbias);

namespace cpu {
void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const LayerNormShape& shape,
                        Tensor& y, Tensor& mean, Tensor& rstd);
void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const LayerNormShape& shape, Tensor& dx, Tensor& dweight, Tensor& dbias);
}  // namespace cpu

}  // namespace mg::kernels
