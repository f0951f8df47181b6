// 2-D max and average pooling over [batch, channels, height, width] (kernels/window.h geometry).
//
// max_pool2d:          out[n, c, oh, ow] = max over the window (padding never wins: it is -inf);
//                      argmax (i32, out's shape) = ih * width + iw of the first maximum, NaN wins.
// max_pool2d_backward: dx = 0; dx[n, c, argmax] += dout: accumulated in f32 (f64 for f64), since
//                      overlapping windows (stride < kernel) may pick one pixel several times.
// avg_pool2d:          out = sum over the window / divisor, where the divisor is kernel_h * kernel_w
//                      (padding counts as zeros, PyTorch's count_include_pad = true); the sum in the
//                      order of window_sum below, on both backends.
// avg_pool2d_backward: every input pixel of a window receives dout / divisor, accumulated in f32.
// Values are read in f32 (f64 for f64) and rounded once on store.
#pragma once

#include "core/host_device.h"
#include "core/tensor.h"
#include "kernels/backends.h"
#include "kernels/window.h"

namespace mg::kernels {

// The sum of the window at (ih0, iw0) (its top-left corner, which may be padding) over one plane of
// pixels [height, width], widened to C by `widen`: written once for the CPU and the CUDA kernel, so that
// both add in one order. The window's rows in order; in each, the pixel of window column kw goes into
// lane kw % 4; the lanes are added as (0 + 1) + (2 + 3) at the end. Four chains of dependent adds
// instead of one: a 14 x 14 global pool (the conv benchmark's head) was bound by the latency of 196
// adds in a row.
template <class C, class T, class Widen>
MG_HOST_DEVICE C window_sum(const T* pixels, const Window2d& w, std::int64_t ih0, std::int64_t iw0, Widen widen) {
  C lane[4] = {C(0), C(0), C(0), C(0)};
  const std::int64_t ih_begin = ih0 < 0 ? 0 : ih0, ih_end = ih0 + w.kernel_h < w.height ? ih0 + w.kernel_h : w.height;
  const std::int64_t kw_begin = iw0 < 0 ? -iw0 : 0, kw_end = iw0 + w.kernel_w < w.width ? w.kernel_w : w.width - iw0;
  for (std::int64_t ih = ih_begin; ih < ih_end; ++ih) {
    const std::int64_t row = ih * w.width + iw0;  // pixels[row + kw]: window column kw
    for (std::int64_t group = kw_begin - kw_begin % 4; group < kw_end; group += 4) {
      // Loops of a constant count, unrolled, so that each lane stays in a register.
      if (group >= kw_begin && group + 4 <= kw_end) {  // four columns inside the image
        for (int j = 0; j < 4; ++j) lane[j] += widen(pixels[row + group + j]);
        continue;
      }
      for (int j = 0; j < 4; ++j) {
        const std::int64_t kw = group + j;
        if (kw >= kw_begin && kw < kw_end) lane[j] += widen(pixels[row + kw]);
      }
    }
  }
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

MG_KERNELS(void max_pool2d(const Tensor& x, const Window2d& window, Tensor& out, Tensor& argmax);
           void max_pool2d_backward(const Tensor& dout, const Tensor& argmax, const Window2d& window, Tensor& dx);
           void avg_pool2d(const Tensor& x, const Window2d& window, Tensor& out);
           void avg_pool2d_backward(const Tensor& dout, const Window2d& window, Tensor& dx);)

}  // namespace mg::kernels
