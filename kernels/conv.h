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
#include "kernels/backends.h"
#include "kernels/window.h"

namespace mg::kernels {

MG_KERNELS(void im2col(const Tensor& x, const Window2d& window, Tensor& cols);
           void col2im(const Tensor& cols, const Window2d& window, Tensor& dx);)

// Convolution as implicit GEMMs, channels-first in and out (CPU: kernels/cpu/conv_gemm.cpp): each
// window is read from the image as the GEMM packs it, so no im2col matrix is made, and y, dx and dW
// are each one f32 sum per element rounded once into their dtype.
//   conv2d_implicit(x, window)   whether the three below run for x (its device, its dtype's microkernel,
//                                the window's stride 1); else im2col
//   conv2d_forward               y [N, O, OH, OW] = x * weight [O, C, KH, KW] + bias [O] (or none)
//   conv2d_input_grad            dx [N, C, H, W] from dy [N, O, OH, OW]
//   conv2d_weight_grad           dW [O, C, KH, KW] from dy and x
// All tensors contiguous, weight, dy, y, dx and dW of x's dtype (bias: x's or f32).
bool conv2d_implicit(const Tensor& x, const Window2d& window);
void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& window, Tensor& y);
void conv2d_input_grad(const Tensor& dy, const Tensor& weight, const Window2d& window, Tensor& dx);
void conv2d_weight_grad(const Tensor& dy, const Tensor& x, const Window2d& window, Tensor& dw);

// The implicit GEMMs are the CPU's alone (a GPU runs im2col and a GEMM).
// Each pass has two forms: Window (the implicit GEMMs above) and Shifted (over zero-padded copies of the
// images read in place, kernels/cpu/conv_shifted.h; the dot kernel's bf16 dW on its family's Fma kernel
// where an output row is odd in length). Best is Shifted wherever it applies; the tests name each form.
namespace cpu {
enum class ConvForm : std::uint8_t { Best, Window, Shifted };
bool conv2d_implicit(const Tensor& x, const Window2d& window);
void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& window, Tensor& y,
                    ConvForm form = ConvForm::Best);
void conv2d_input_grad(const Tensor& dy, const Tensor& weight, const Window2d& window, Tensor& dx,
                       ConvForm form = ConvForm::Best);
void conv2d_weight_grad(const Tensor& dy, const Tensor& x, const Window2d& window, Tensor& dw,
                        ConvForm form = ConvForm::Best);
}  // namespace cpu

}  // namespace mg::kernels
