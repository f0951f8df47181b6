// 2-D max and average pooling over [batch, channels, height, width] (kernels/window.h geometry).
//
// max_pool2d:          out[n, c, oh, ow] = max over the window (padding never wins: it is -inf);
//                      argmax (i32, out's shape) = ih * width + iw of the first maximum, NaN wins.
// max_pool2d_backward: dx = 0; dx[n, c, argmax] += dout: accumulated in f32 (f64 for f64), since
//                      overlapping windows (stride < kernel) may pick one pixel several times.
// avg_pool2d:          out = sum over the window / divisor, where the divisor is kernel_h * kernel_w
//                      (padding counts as zeros, PyTorch's count_include_pad = true).
// avg_pool2d_backward: every input pixel of a window receives dout / divisor, accumulated in f32.
// Values are read in f32 (f64 for f64) and rounded once on store.
#pragma once

#include "core/tensor.h"
#include "kernels/backends.h"
#include "kernels/window.h"

namespace mg::kernels {

MG_KERNELS(void max_pool2d(const Tensor& x, const Window2d& window, Tensor& out, Tensor& argmax);
           void max_pool2d_backward(const Tensor& dout, const Tensor& argmax, const Window2d& window, Tensor& dx);
           void avg_pool2d(const Tensor& x, const Window2d& window, Tensor& out);
           void avg_pool2d_backward(const Tensor& dout, const Window2d& window, Tensor& dx);)

}  // namespace mg::kernels
