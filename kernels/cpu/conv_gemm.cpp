// Convolution on the CPU as implicit GEMMs (kernels/conv.h), in two forms. This file is the window form,
// and the choice: the padded-image forms of kernels/cpu/conv_shifted.h run instead wherever they apply
// (every microkernel reads them in place: every stride-1 pass but a dx with padding >= the kernel;
// ConvForm::Best), since they pack nothing and compute no junk.
// The window form: the packed GEMM (kernels/cpu/gemm_packed.h) reads each window straight from the
// image as it packs, so no im2col matrix is written, and its output is already channels-first. Shapes,
// for x [N, C, H, W], weight [O, C, KH, KW], P = OH * OW output positions and T = C * KH * KW taps:
//
//   forward   y[n]  [O, P]   = W [O, T]  x  im2col(x[n])^T [T, P]   + bias per row   one product per image
//   dW        dW    [O, T]   = dy [O, N * P] x im2col(x) [N * P, T]                   k runs over every image
//   dx        shares [T, P] = W^T [T, O] x dy[n] [O, P]   in f32, one image at a time (a few hundred
//             KiB, in cache), then each pixel's window shares added in f32 (col2im) and rounded once
//
// y and dW are each one f32 sum per element in a fixed order, rounded once into their dtype (the
// microkernel contract); dx is f32 shares summed in f32 and rounded once, as col2im's always were.
// Threads: the images of a batch (forward, dx), the columns of dW.
// Tests: build/tests/test_ops_conv (forward against f64 loops), build/tests/test_ops_conv_grad (dx, dW
// and db against f64 references; both forms on every kernel). Benchmark: build/bench/train_step conv:128 cnn:128.
#include <algorithm>
#include <vector>

#include "core/convert.h"
#include "kernels/conv.h"
#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/conv_shifted.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/threads.h"

namespace mg::kernels::cpu {

namespace {

// out[n] = weight [O, T] x im2col(x[n])^T (+ bias per row), for every image n of `window`: the forward
// convolution.
void convolve(const MicroKernel& kernel, const Tensor& x, const Tensor& weight, const float* bias, const Window2d& w,
              Tensor& out) {
  const std::int64_t rows = weight.size(0) /* O */, taps = w.channels * w.kernel_h * w.kernel_w,
                     positions = w.out_h() * w.out_w();
  // Whole images per thread; a batch smaller than the pool is also cut along positions.
  const std::int64_t parts = std::clamp<std::int64_t>((num_threads() + w.batch - 1) / w.batch, 1,
                                                      (positions + kernel.nr - 1) / kernel.nr);
  const Chunks cut{(positions + kernel.nr - 1) / kernel.nr, parts};
  parallel_for(w.batch * parts, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t n = item / parts, part = item % parts;
      PackedGemm gemm{.kernel = &kernel,
                      .a = {.data = weight.data_ptr(), .dtype = weight.dtype(), .line_stride = taps, .k_stride = 1},
                      .b = {.data = x.data_ptr(), .dtype = x.dtype(), .window = &w, .image = n},
                      .k = taps,
                      .c = bytes_at(out, n * rows * positions),
                      .c_dtype = out.dtype(),
                      .ldc = positions,
                      .bias = bias,
                      .bias_per_row = true};
      packed_gemm_tile(gemm, 0, rows, std::min(positions, cut.begin(part) * kernel.nr),
                       std::min(positions, cut.end(part) * kernel.nr));
    }
  });
}

// sum[c, ih, iw] += shares[(c, kh, kw), (oh, ow)] over every window of one image that reads (ih, iw):
// col2im (kernels/conv.h) for one image, its shares f32 and laid out [taps, positions], so that each
// tap adds a row of shares into a row of pixels (stride 1: neighbouring outputs, neighbouring pixels).
void add_window_shares(const float* shares, const Window2d& w, float* sum) {
  const std::int64_t out_h = w.out_h(), out_w = w.out_w();
  for (std::int64_t c = 0; c < w.channels; ++c)
    for (std::int64_t kh = 0; kh < w.kernel_h; ++kh)
      for (std::int64_t kw = 0; kw < w.kernel_w; ++kw, shares += out_h * out_w) {
        const std::int64_t iw0 = kw - w.pad_w;  // the pixel column output column 0 reads at this tap
        const std::int64_t first = std::clamp<std::int64_t>(-iw0, 0, out_w),
                           last = std::clamp<std::int64_t>(w.width - iw0, 0, out_w);
        for (std::int64_t oh = 0; oh < out_h; ++oh) {
          const std::int64_t ih = oh - w.pad_h + kh;
          if (ih < 0 || ih >= w.height) continue;
          float* pixels = sum + (c * w.height + ih) * w.width + iw0;
          const float* row = shares + oh * out_w;
          for (std::int64_t ow = first; ow < last; ++ow) pixels[ow] += row[ow];
        }
      }
}

// The kernel dW reads both operands in place on, or nullptr: the convolution's own where it can (an
// Fma kernel; the dot kernel where each output row holds whole pairs of positions), else, for the dot
// kernel's bf16, the Fma kernel of its family (the images and dy widened to f32 as they are laid out,
// exactly): one f32 FMA chain per element, as that kernel's bf16 GEMMs.
const MicroKernel* weight_grad_kernel(const MicroKernel& kernel, const Window2d& w) {
  if (!kernel.run_gathered) return nullptr;
  if (kernel.arith == MicroArith::Fma || conv2d_weight_grad_pairs_apply(w)) return &kernel;
  return microkernel(kernel.id == MicroKernelId::ModelBf16Dot ? MicroKernelId::ModelFma : MicroKernelId::Avx512Fma);
}

}  // namespace

bool conv2d_implicit(const Tensor& x, const Window2d& w) {
  // The window operands copy runs of an input row: stride 1, where neighbouring outputs read
  // neighbouring pixels.
  return convolution_microkernel(x.dtype()) != nullptr && w.stride_h == 1 && w.stride_w == 1;
}

void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& w, Tensor& y,
                    ConvForm form) {
  if (y.numel() == 0) return;
  const Tensor bias_f32 = bias.defined() ? widened<float>(bias) : Tensor();  // exact
  const MicroKernel& kernel = *convolution_microkernel(x.dtype());
  const float* bias_values = bias_f32.defined() ? bias_f32.data<float>() : nullptr;
  if (form != ConvForm::Window && kernel.run_gathered)
    return conv2d_forward_shifted(kernel, x, weight, bias_values, w, y);
  convolve(kernel, x, weight, bias_values, w, y);
}

void conv2d_input_grad(const Tensor& dy, const Tensor& weight, const Window2d& w, Tensor& dx, ConvForm form) {
  if (dx.numel() == 0) return;
  const MicroKernel& kernel = *convolution_microkernel(dy.dtype());
  if (form != ConvForm::Window && kernel.run_gathered && conv2d_shifted_input_grad_applies(w))
    return conv2d_input_grad_shifted(kernel, dy, weight, w, dx);
  const std::int64_t out_channels = weight.size(0), taps = w.channels * w.kernel_h * w.kernel_w;
  const std::int64_t positions = w.out_h() * w.out_w(), image = w.channels * w.height * w.width;
  parallel_for(w.batch, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> shares(static_cast<std::size_t>(positions * taps)), sum(static_cast<std::size_t>(image));
    for (std::int64_t n = begin; n < end; ++n) {
      // The windows' shares of image n, in f32: W^T [T, O] x dy[n] [O, P] (both packed from their own layout).
      PackedGemm gemm{.kernel = &kernel,
                      .a = {.data = weight.data_ptr(), .dtype = weight.dtype(), .line_stride = 1, .k_stride = taps},
                      .b = {.data = bytes_at(dy, n * out_channels * positions),
                            .dtype = dy.dtype(),
                            .line_stride = 1,
                            .k_stride = positions},
                      .k = out_channels,
                      .c = shares.data(),
                      .c_dtype = DType::F32,
                      .ldc = positions};
      packed_gemm_tile(gemm, 0, taps, 0, positions);
      // Each pixel's shares added in f32 (the windows in order), then rounded once into dx.
      std::fill(sum.begin(), sum.end(), 0.0f);
      add_window_shares(shares.data(), w, sum.data());
      convert(sum.data(), DType::F32, bytes_at(dx, n * image), dx.dtype(), image);
    }
  });
}

void conv2d_weight_grad(const Tensor& dy, const Tensor& x, const Window2d& w, Tensor& dw, ConvForm form) {
  if (dw.numel() == 0) return;
  const MicroKernel& kernel = *convolution_microkernel(x.dtype());
  // Both operands read in place, nothing packed (kernels/cpu/conv_shifted.h): Shifted and Best alike.
  if (const MicroKernel* in_place = weight_grad_kernel(kernel, w); in_place && form != ConvForm::Window)
    return conv2d_weight_grad_gathered(*in_place, dy, x, w, dw);
  const std::int64_t out_channels = dw.size(0), taps = w.channels * w.kernel_h * w.kernel_w;
  const std::int64_t positions = w.out_h() * w.out_w();
  // Columns (taps) per thread; every tile packs all of dy again, so as few tiles as threads.
  const std::int64_t panels = (taps + kernel.nr - 1) / kernel.nr;
  const Chunks cut{panels, std::clamp<std::int64_t>(num_threads(), 1, panels)};
  parallel_for(cut.count, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t part = begin; part < end; ++part) {
      PackedGemm gemm{.kernel = &kernel,
                      .a = {.data = dy.data_ptr(),
                            .dtype = dy.dtype(),
                            .line_stride = positions,
                            .k_stride = 1,
                            .k_run = positions,
                            .k_run_stride = out_channels * positions},
                      .b = {.data = x.data_ptr(), .dtype = x.dtype(), .window = &w, .positions_along_k = true},
                      .k = w.batch * positions,
                      .c = dw.data_ptr(),
                      .c_dtype = dw.dtype(),
                      .ldc = taps};
      packed_gemm_tile(gemm, 0, out_channels, std::min(taps, cut.begin(part) * kernel.nr),
                       std::min(taps, cut.end(part) * kernel.nr));
    }
  });
}

}  // namespace mg::kernels::cpu
