// A stride-1 convolution as GEMMs over zero-padded copies of the images: kernels/cpu/conv_shifted.h.
#include "kernels/cpu/conv_shifted.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <vector>

#include "core/convert.h"
#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/threads.h"

namespace mg::kernels::cpu {

namespace {

// A stack of images [batch, channels, height, width], contiguous.
struct Images {
  const std::byte* data = nullptr;
  DType dtype = DType::F32;
  std::int64_t batch = 0, channels = 0, height = 0, width = 0;
};

// Each thread's padded image and GEMM result, kept from call to call (fresh pages cost ~10 us each).
thread_local std::vector<std::byte> padded_buffer, result_buffer;

std::byte* reserve_bytes(std::vector<std::byte>& buffer, std::int64_t bytes) {
  if (buffer.size() < static_cast<std::size_t>(bytes)) buffer.resize(static_cast<std::size_t>(bytes));
  return buffer.data();
}

// n values of one image row into the padded copy: moved as they are, or widened to f32 (exact). Rows
// are short (14 values): plain loops, not a call to memcpy or convert() per row.
void copy_row(const std::byte* src, DType from, std::byte* dst, DType to, std::int64_t n) {
  if (from == to && from == DType::F32) {
    const auto* s = reinterpret_cast<const float*>(src);
    auto* d = reinterpret_cast<float*>(dst);
    for (std::int64_t i = 0; i < n; ++i) d[i] = s[i];
  } else if (from == to) {
    const auto* s = reinterpret_cast<const std::uint16_t*>(src);
    auto* d = reinterpret_cast<std::uint16_t*>(dst);
    for (std::int64_t i = 0; i < n; ++i) d[i] = s[i];
  } else if (from == DType::BF16) {
    const auto* s = reinterpret_cast<const std::uint16_t*>(src);
    auto* d = reinterpret_cast<std::uint32_t*>(dst);
    for (std::int64_t i = 0; i < n; ++i) d[i] = std::uint32_t{s[i]} << 16;  // bf16 is f32's upper half
  } else {
    convert(src, from, dst, to, n);
  }
}

// Columns [from, to) of each of `rows` rows of the GEMM's result (ld apart) into out (out_ld apart):
// the valid positions of an output row.
template <class Bits>
void keep_columns(const std::byte* result, std::int64_t ld, std::int64_t rows, std::int64_t count, std::byte* out,
                  std::int64_t out_ld) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto* s = reinterpret_cast<const Bits*>(result) + r * ld;
    auto* d = reinterpret_cast<Bits*>(out) + r * out_ld;
    for (std::int64_t i = 0; i < count; ++i) d[i] = s[i];
  }
}

// out[n] [rows, OH, OW] = weight [rows, channels * kh * kw] (+ bias per row) convolved with image n of
// `in`, zero-padded by (pad_h, pad_w), stride 1; weight has in's dtype. The heart of both passes.
void convolve_shifted(const MicroKernel& kernel, const Images& in, const std::byte* weight, std::int64_t rows,
                      std::int64_t kernel_h, std::int64_t kernel_w, std::int64_t pad_h, std::int64_t pad_w,
                      const float* bias, Tensor& out) {
  // The FMA kernels read the padded image in place (MicroKernel::run_shifted), so it is made f32 as it is
  // copied (exact); the dot kernel packs its bf16 pairs from the bits.
  const DType padded_dtype = kernel.arith == MicroArith::Fma ? DType::F32 : in.dtype;
  const std::int64_t size = static_cast<std::int64_t>(dtype_size(padded_dtype));
  const std::int64_t in_size = static_cast<std::int64_t>(dtype_size(in.dtype));
  const std::int64_t padded_h = in.height + 2 * pad_h, padded_w = in.width + 2 * pad_w, plane = padded_h * padded_w;
  const std::int64_t out_h = padded_h - kernel_h + 1, out_w = padded_w - kernel_w + 1;
  assert(out.numel() == in.batch * rows * out_h * out_w);
  const std::int64_t taps = in.channels * kernel_h * kernel_w;
  const std::int64_t cols = out_h * padded_w;  // positions in the padded image's numbering
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(taps));
  for (std::int64_t c = 0, t = 0; c < in.channels; ++c)
    for (std::int64_t kh = 0; kh < kernel_h; ++kh)
      for (std::int64_t kw = 0; kw < kernel_w; ++kw)
        offsets[static_cast<std::size_t>(t++)] = c * plane + kh * padded_w + kw;
  // The last position of the last tap reads (channels - 1) * plane + (kernel_h - 1 + out_h) * padded_w +
  // kernel_w - 2 = channels * plane + kernel_w - 2: a few zeros past the last channel's plane, and a
  // kernel reading in place reads a whole micro-panel, up to nr - 1 positions past the last.
  const std::int64_t padded_elements = in.channels * plane + kernel_w - 1 + kernel.nr;
  const std::int64_t out_size = static_cast<std::int64_t>(dtype_size(out.dtype()));
  assert(out_size == 4 || out_size == 2);  // f32, f16 or bf16 (no microkernel multiplies f64)
  // Whole images per thread; a batch smaller than the pool is also cut along positions.
  const std::int64_t panels = (cols + kernel.nr - 1) / kernel.nr;
  const std::int64_t parts = std::clamp<std::int64_t>((num_threads() + in.batch - 1) / in.batch, 1, panels);
  const Chunks cut{panels, parts};
  parallel_for(in.batch * parts, 1, [&](std::int64_t begin, std::int64_t end) {
    std::byte* padded = reserve_bytes(padded_buffer, padded_elements * size);
    std::byte* result = reserve_bytes(result_buffer, rows * cols * out_size);
    std::fill(padded, padded + padded_elements * size, std::byte{0});  // the border stays zero from here on
    std::int64_t copied = -1;  // the image now in `padded`
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t n = item / parts, part = item % parts;
      if (n != copied) {
        for (std::int64_t c = 0; c < in.channels; ++c)
          for (std::int64_t ih = 0; ih < in.height; ++ih)
            copy_row(in.data + (((n * in.channels + c) * in.height + ih) * in.width) * in_size, in.dtype,
                     padded + (c * plane + (ih + pad_h) * padded_w + pad_w) * size, padded_dtype, in.width);
        copied = n;
      }
      const std::int64_t col0 = std::min(cols, cut.begin(part) * kernel.nr),
                         col1 = std::min(cols, cut.end(part) * kernel.nr);
      PackedGemm gemm{.kernel = &kernel,
                      .a = {.data = weight, .dtype = in.dtype, .line_stride = taps, .k_stride = 1},
                      .b = {.data = padded, .dtype = padded_dtype, .line_stride = 1, .k_offsets = offsets.data()},
                      .k = taps,
                      .c = result,
                      .c_dtype = out.dtype(),
                      .ldc = cols,
                      .bias = bias,
                      .bias_per_row = true};
      packed_gemm_tile(gemm, 0, rows, col0, col1);
      // The first out_w positions of each output row this part computed, into out[n].
      for (std::int64_t oh = 0; oh < out_h; ++oh) {
        const std::int64_t from = std::max(col0, oh * padded_w), to = std::min(col1, oh * padded_w + out_w);
        if (from >= to) continue;
        std::byte* first = reinterpret_cast<std::byte*>(
            bytes_at(out, (n * rows * out_h + oh) * out_w + (from - oh * padded_w)));
        if (out_size == 4)
          keep_columns<std::uint32_t>(result + from * out_size, cols, rows, to - from, first, out_h * out_w);
        else
          keep_columns<std::uint16_t>(result + from * out_size, cols, rows, to - from, first, out_h * out_w);
      }
    }
  });
}

}  // namespace

bool conv2d_shifted_forward_applies(const Window2d& w) { return w.stride_h == 1 && w.stride_w == 1; }

bool conv2d_shifted_input_grad_applies(const Window2d& w) {
  return conv2d_shifted_forward_applies(w) && w.pad_h < w.kernel_h && w.pad_w < w.kernel_w;
}

void conv2d_forward_shifted(const MicroKernel& kernel, const Tensor& x, const Tensor& weight, const float* bias,
                            const Window2d& w, Tensor& y) {
  assert(conv2d_shifted_forward_applies(w) && weight.dtype() == x.dtype());
  const Images images{.data = reinterpret_cast<const std::byte*>(x.data_ptr()),
                      .dtype = x.dtype(),
                      .batch = w.batch,
                      .channels = w.channels,
                      .height = w.height,
                      .width = w.width};
  convolve_shifted(kernel, images, reinterpret_cast<const std::byte*>(weight.data_ptr()), weight.size(0), w.kernel_h,
                   w.kernel_w, w.pad_h, w.pad_w, bias, y);
}

void conv2d_input_grad_shifted(const MicroKernel& kernel, const Tensor& dy, const Tensor& weight, const Window2d& w,
                               Tensor& dx) {
  assert(conv2d_shifted_input_grad_applies(w) && weight.dtype() == dy.dtype());
  const std::int64_t out_channels = weight.size(0), size = static_cast<std::int64_t>(dtype_size(weight.dtype()));
  const std::int64_t kh = w.kernel_h, kw = w.kernel_w;
  // W'[c, o, i, j] = W[o, c, kh - 1 - i, kw - 1 - j]: the channels swapped, the taps mirrored (moved as bits).
  std::vector<std::byte> mirrored(static_cast<std::size_t>(weight.numel() * size));
  const auto* source = reinterpret_cast<const std::byte*>(weight.data_ptr());
  for (std::int64_t o = 0; o < out_channels; ++o)
    for (std::int64_t c = 0; c < w.channels; ++c)
      for (std::int64_t i = 0; i < kh; ++i)
        for (std::int64_t j = 0; j < kw; ++j)
          std::memcpy(mirrored.data() + (((c * out_channels + o) * kh + i) * kw + j) * size,
                      source + (((o * w.channels + c) * kh + (kh - 1 - i)) * kw + (kw - 1 - j)) * size,
                      static_cast<std::size_t>(size));
  const Images gradients{.data = reinterpret_cast<const std::byte*>(dy.data_ptr()),
                         .dtype = dy.dtype(),
                         .batch = w.batch,
                         .channels = out_channels,
                         .height = w.out_h(),
                         .width = w.out_w()};
  convolve_shifted(kernel, gradients, mirrored.data(), w.channels, kh, kw, kh - 1 - w.pad_h, kw - 1 - w.pad_w, nullptr,
                   dx);
}

}  // namespace mg::kernels::cpu
