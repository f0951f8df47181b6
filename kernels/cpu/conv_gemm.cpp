// Convolution on the CPU as implicit GEMMs (kernels/conv.h): the packed GEMM (kernels/cpu/
// gemm_packed.h) reads each window straight from the image as it packs, so no im2col matrix is
// written, and its output is already channels-first. Shapes, for x [N, C, H, W], weight [O, C, KH, KW],
// P = OH * OW output positions and T = C * KH * KW taps:
//
//   forward   y[n]  [O, P]   = W [O, T]  x  im2col(x[n])^T [T, P]   + bias per row   one product per image
//   dW        dW    [O, T]   = dy [O, N * P] x im2col(x) [N * P, T]                   k runs over every image
//   dx        dx[n] [C, H W] = W' [C, O KH KW] x im2col'(dy[n])^T                    stride 1 only:
//             a convolution of dy with the weight flipped and transposed (W'[c, o, kh, kw] =
//             W[o, c, KH-1-kh, KW-1-kw]) and padding K-1-pad, the adjoint of the forward window.
//
// Every output element is one f32 sum in a fixed order, rounded once into its dtype (the microkernel
// contract): dx is not rounded per window share, as col2im's f32 sums were not either.
// Threads: the images of a batch (forward, dx), the columns of dW.
// Tests: build/tests/test_ops_conv, build/tests/test_ops_conv_grad (against f64 references and the
// im2col path). Benchmark: build/bench/train_step conv:128 cnn:128.
#include <algorithm>

#include "kernels/conv.h"
#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/threads.h"

namespace mg::kernels::cpu {

namespace {

const std::byte* image_bytes(const Tensor& t, std::int64_t offset) {
  return static_cast<const std::byte*>(t.data_ptr()) + offset * static_cast<std::int64_t>(dtype_size(t.dtype()));
}

// out[n] = weight [rows, T] x im2col(x[n])^T (+ bias per row), for every image n of `window`, rows =
// out.size(1): the forward convolution, and dx as the convolution of dy.
void convolve(const MicroKernel& kernel, const Tensor& x, const Tensor& weight, const float* bias, const Window2d& w,
              Tensor& out) {
  const std::int64_t rows = weight.size(0), taps = w.channels * w.kernel_h * w.kernel_w, positions = w.out_h() * w.out_w();
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
                      .c = const_cast<std::byte*>(image_bytes(out, n * rows * positions)),
                      .c_dtype = out.dtype(),
                      .ldc = positions,
                      .bias = bias,
                      .bias_per_row = true};
      packed_gemm_tile(gemm, 0, rows, std::min(positions, cut.begin(part) * kernel.nr),
                       std::min(positions, cut.end(part) * kernel.nr));
    }
  });
}

}  // namespace

bool conv2d_implicit(const Tensor& x, const Window2d& w) {
  // dx needs the transposed window to fit: stride 1, padding at most K - 1.
  return convolution_microkernel(x.dtype()) != nullptr && w.stride_h == 1 && w.stride_w == 1 && w.pad_h < w.kernel_h &&
         w.pad_w < w.kernel_w;
}

void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& w, Tensor& y) {
  if (y.numel() == 0) return;
  const Tensor bias_f32 = bias.defined() ? widened<float>(bias) : Tensor();  // exact
  convolve(*convolution_microkernel(x.dtype()), x, weight, bias_f32.defined() ? bias_f32.data<float>() : nullptr, w, y);
}

void conv2d_input_grad(const Tensor& dy, const Tensor& weight, const Window2d& w, Tensor& dx) {
  if (dx.numel() == 0) return;
  const std::int64_t out_channels = weight.size(0), kernel = w.kernel_h * w.kernel_w;
  // W'[c, o, kh, kw] = W[o, c, KH-1-kh, KW-1-kw]: a copy of the (small) weight, bits moved as they are.
  Tensor flipped = Tensor::empty({w.channels, out_channels * kernel}, {.dtype = weight.dtype()});
  const std::size_t size = dtype_size(weight.dtype());
  const auto* from = static_cast<const std::byte*>(weight.data_ptr());
  auto* to = static_cast<std::byte*>(flipped.data_ptr());
  for (std::int64_t o = 0; o < out_channels; ++o)
    for (std::int64_t c = 0; c < w.channels; ++c)
      for (std::int64_t tap = 0; tap < kernel; ++tap)
        std::copy_n(from + ((o * w.channels + c) * kernel + kernel - 1 - tap) * size, size,
                    to + ((c * out_channels + o) * kernel + tap) * size);
  const Window2d transposed{.batch = w.batch, .channels = out_channels, .height = w.out_h(), .width = w.out_w(),
                            .kernel_h = w.kernel_h, .kernel_w = w.kernel_w, .stride_h = 1, .stride_w = 1,
                            .pad_h = w.kernel_h - 1 - w.pad_h, .pad_w = w.kernel_w - 1 - w.pad_w};
  convolve(*convolution_microkernel(dy.dtype()), dy, flipped, nullptr, transposed, dx);
}

void conv2d_weight_grad(const Tensor& dy, const Tensor& x, const Window2d& w, Tensor& dw) {
  if (dw.numel() == 0) return;
  const MicroKernel& kernel = *convolution_microkernel(x.dtype());
  const std::int64_t out_channels = dw.size(0), taps = w.channels * w.kernel_h * w.kernel_w;
  const std::int64_t positions = w.out_h() * w.out_w();
  // Columns (taps) per thread; every tile packs all of dy again, so as few tiles as threads.
  const std::int64_t panels = (taps + kernel.nr - 1) / kernel.nr;
  const Chunks cut{panels, std::clamp<std::int64_t>(num_threads(), 1, panels)};
  parallel_for(cut.count, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t part = begin; part < end; ++part) {
      PackedGemm gemm{.kernel = &kernel,
                      .a = {.data = dy.data_ptr(), .dtype = dy.dtype(), .line_stride = positions, .k_stride = 1,
                            .k_run = positions, .k_run_stride = out_channels * positions},
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
