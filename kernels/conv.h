// im2col and col2im: convolution as one GEMM (autograd/conv.cpp).
//
// im2col copies every input window into one row of a matrix:
//   x    [batch, channels, height, width]
//   cols [batch * out_h * out_w, channels * kernel_h * kernel_w]
//   cols[(n, oh, ow), (c, kh, kw)] = x[n, c, oh * stride_h - pad_h + kh, ow * stride_w - pad_w + kw]
// (0 where the window hangs over the zero padding). A convolution is then cols x weight^T with the
// weight viewed as [out_channels, channels * kernel_h * kernel_w]: one GEMM, Tensor Cores included.
// im2col only moves values, so it is exact in every dtype.
//
// col2im is its adjoint (the gradient of im2col): dx = 0; dx[n, c, ih, iw] += dcols[(n, oh, ow), (c, kh, kw)]
// for every window position that read (ih, iw). An input pixel is read by up to kernel_h * kernel_w
// windows, so the sums are accumulated in f32 (f64 for f64) and rounded once. dcols has dx's dtype,
// or f32 for an f16/bf16 dx: conv2d passes its f32 GEMM result, so no window's share is rounded to
// f16 before the sum.
#pragma once

#include "core/tensor.h"
#include "kernels/window.h"

namespace mg::kernels {

void im2col(const Tensor& x, const Window2d& window, Tensor& cols);
void col2im(const Tensor& cols, const Window2d& window, Tensor& dx);

namespace cpu {
void im2col(const Tensor& x, const Window2d& window, Tensor& cols);
void col2im(const Tensor& cols, const Window2d& window, Tensor& dx);
}  // namespace cpu

// The CUDA backend (kernels/cuda/), in builds with MG_WITH_CUDA: same contract, tensors on one GPU.
namespace cuda {
void im2col(const Tensor& x, const Window2d& window, Tensor& cols);
void col2im(const Tensor& cols, const Window2d& window, Tensor& dx);
}  // namespace cuda

}  // namespace mg::kernels
