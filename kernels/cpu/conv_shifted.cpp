// A stride-1 convolution as GEMMs over zero-padded copies of the images: kernels/cpu/conv_shifted.h.
#include "kernels/cpu/conv_shifted.h"

#include <algorithm>
#include <bit>
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

constexpr int kMaxMicroRows = 12;  // the largest MR of kernels/cpu/microkernel.h

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

// x [N, C, H, W] of a convolution's window as a stack of images.
Images input_images(const Tensor& x, const Window2d& w) {
  return {.data = reinterpret_cast<const std::byte*>(x.data_ptr()),
          .dtype = x.dtype(),
          .batch = w.batch,
          .channels = w.channels,
          .height = w.height,
          .width = w.width};
}

// Where each tap (c, kh, kw) sits from a window's start in a padded image [channels, padded_h, padded_w].
std::vector<std::int64_t> tap_offsets(std::int64_t channels, std::int64_t kernel_h, std::int64_t kernel_w,
                                      std::int64_t padded_h, std::int64_t padded_w) {
  std::vector<std::int64_t> offsets;
  offsets.reserve(static_cast<std::size_t>(channels * kernel_h * kernel_w));
  for (std::int64_t c = 0; c < channels; ++c)
    for (std::int64_t kh = 0; kh < kernel_h; ++kh)
      for (std::int64_t kw = 0; kw < kernel_w; ++kw) offsets.push_back((c * padded_h + kh) * padded_w + kw);
  return offsets;
}

// Where the window of each output position (oh, ow) starts in a padded image padded_w wide.
std::vector<std::int64_t> position_offsets(std::int64_t out_h, std::int64_t out_w, std::int64_t padded_w) {
  std::vector<std::int64_t> offsets;
  offsets.reserve(static_cast<std::size_t>(out_h * out_w));
  for (std::int64_t oh = 0; oh < out_h; ++oh)
    for (std::int64_t ow = 0; ow < out_w; ++ow) offsets.push_back(oh * padded_w + ow);
  return offsets;
}

// Image n of `in` into the inside of a zero-bordered buffer of dtype `to` (its border left as it is).
void pad_image(const Images& in, std::int64_t n, std::int64_t pad_h, std::int64_t pad_w, std::byte* padded, DType to) {
  const std::int64_t in_size = static_cast<std::int64_t>(dtype_size(in.dtype)),
                     to_size = static_cast<std::int64_t>(dtype_size(to));
  const std::int64_t padded_w = in.width + 2 * pad_w, padded_h = in.height + 2 * pad_h;
  for (std::int64_t c = 0; c < in.channels; ++c)
    for (std::int64_t ih = 0; ih < in.height; ++ih)
      copy_row(in.data + (((n * in.channels + c) * in.height + ih) * in.width) * in_size, in.dtype,
               padded + ((c * padded_h + ih + pad_h) * padded_w + pad_w) * to_size, to, in.width);
}

// Image n of a bf16 stack into the inside of a zero-bordered buffer of channel pairs [ceil(C / 2), Hp, Wp]
// for the dot kernel: each 32-bit value holds channel 2q in its low half and 2q + 1 in its high half
// (zero past the last channel), a pair of k as vdpbf16ps takes it. Stored as floats (the type of
// MicroKernel::run_gathered's lines), copied as bits.
void pad_image_pairs(const Images& in, std::int64_t n, std::int64_t pad_h, std::int64_t pad_w, float* padded) {
  assert(in.dtype == DType::BF16);
  const std::int64_t padded_w = in.width + 2 * pad_w, padded_h = in.height + 2 * pad_h, plane = in.height * in.width;
  const auto* image = reinterpret_cast<const std::uint16_t*>(in.data) + n * in.channels * plane;
  for (std::int64_t q = 0; 2 * q < in.channels; ++q) {
    const std::uint16_t* even = image + 2 * q * plane;
    const std::uint16_t* odd = 2 * q + 1 < in.channels ? even + plane : nullptr;
    for (std::int64_t ih = 0; ih < in.height; ++ih) {
      float* to = padded + (q * padded_h + ih + pad_h) * padded_w + pad_w;
      const std::int64_t row = ih * in.width;
      for (std::int64_t iw = 0; iw < in.width; ++iw)
        to[iw] = std::bit_cast<float>(std::uint32_t{even[row + iw]} |
                                      (odd ? std::uint32_t{odd[row + iw]} << 16 : std::uint32_t{0}));
    }
  }
}

// The weight [rows, channels, KH, KW] as the gathered kernels' B, [steps, row_width] (zeros past the last
// row): an Fma kernel's step is a tap (c, kh, kw), widened to f32; the dot kernel's a tap of a pair of
// channels (q, kh, kw), channel 2q in the low half (bf16 bits).
std::vector<float> gathered_weight(const std::byte* weight, DType dtype, std::int64_t rows, std::int64_t channels,
                                   std::int64_t kernel_taps, std::int64_t row_width, bool pairs) {
  const std::int64_t steps = (pairs ? (channels + 1) / 2 : channels) * kernel_taps, taps = channels * kernel_taps;
  std::vector<float> b(static_cast<std::size_t>(steps * row_width), 0.0f);
  if (pairs) {
    assert(dtype == DType::BF16);
    const auto* w = reinterpret_cast<const std::uint16_t*>(weight);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < channels; c += 2)
        for (std::int64_t k = 0; k < kernel_taps; ++k) {
          const std::uint16_t* even = w + r * taps + c * kernel_taps + k;
          const std::uint32_t pair = std::uint32_t{*even} |
                                     (c + 1 < channels ? std::uint32_t{even[kernel_taps]} << 16 : 0u);
          b[static_cast<std::size_t>(((c / 2) * kernel_taps + k) * row_width + r)] = std::bit_cast<float>(pair);
        }
    return b;
  }
  std::vector<float> line(static_cast<std::size_t>(taps));
  const std::int64_t size = static_cast<std::int64_t>(dtype_size(dtype));
  for (std::int64_t r = 0; r < rows; ++r) {
    copy_row(weight + r * taps * size, dtype, reinterpret_cast<std::byte*>(line.data()), DType::F32, taps);
    for (std::int64_t t = 0; t < taps; ++t)
      b[static_cast<std::size_t>(t * row_width + r)] = line[static_cast<std::size_t>(t)];
  }
  return b;
}

// The same convolution on a kernel that reads both operands in place (MicroKernel::run_gathered): the
// rows of a tile are MR output positions, each a line of the padded image starting where its window
// does; a step is a tap (on the dot kernel a tap of a pair of channels, the image padded as pairs), at
// the tap's offset on every line; B is the weight transposed, [steps, rows] (rows padded to whole
// micro-panels of NR with zeros). So no junk columns and no packing: the tile [positions, rows] is
// stored transposed into out[n] [rows, positions], with the bias added to the f32 sum and one rounding,
// as the window form's epilogue (on an Fma kernel the same chain over the taps: the same bits; on the
// dot kernel its own chain, pairs of channels where the window form pairs neighbouring taps).
void convolve_gathered(const MicroKernel& kernel, const Images& in, const std::byte* weight, std::int64_t rows,
                       std::int64_t kernel_h, std::int64_t kernel_w, std::int64_t pad_h, std::int64_t pad_w,
                       const float* bias, Tensor& out) {
  const int mr = kernel.mr, nr = kernel.nr;
  assert(kernel.run_gathered && mr <= kMaxMicroRows && mr * nr <= kMaxMicroRows * 32);
  const bool pairs = kernel.arith == MicroArith::Bf16Dot;
  const std::int64_t padded_h = in.height + 2 * pad_h, padded_w = in.width + 2 * pad_w, plane = padded_h * padded_w;
  const std::int64_t out_h = padded_h - kernel_h + 1, out_w = padded_w - kernel_w + 1, positions = out_h * out_w;
  assert(out.numel() == in.batch * rows * positions);
  const std::int64_t planes = pairs ? (in.channels + 1) / 2 : in.channels, steps = planes * kernel_h * kernel_w;
  const std::vector<std::int64_t> steps_at = tap_offsets(planes, kernel_h, kernel_w, padded_h, padded_w),
                                  windows_at = position_offsets(out_h, out_w, padded_w);
  const std::int64_t row_width = (rows + nr - 1) / nr * nr;
  const std::vector<float> transposed = gathered_weight(weight, in.dtype, rows, in.channels, kernel_h * kernel_w,
                                                        row_width, pairs);
  const bool direct = out.dtype() == DType::F32;  // else f32 sums, rounded per row of the part
  // Whole images per thread; a batch smaller than the pool is also cut along positions.
  const std::int64_t panels = (positions + mr - 1) / mr;
  const std::int64_t parts = std::clamp<std::int64_t>((num_threads() + in.batch - 1) / in.batch, 1, panels);
  const Chunks cut{panels, parts};
  parallel_for(in.batch * parts, 1, [&](std::int64_t begin, std::int64_t end) {
    auto* padded = reinterpret_cast<float*>(reserve_bytes(padded_buffer, planes * plane * 4));
    auto* sums = reinterpret_cast<float*>(reserve_bytes(result_buffer, direct ? 0 : rows * positions * 4));
    std::fill(padded, padded + planes * plane, 0.0f);  // the border stays zero from here on
    alignas(64) float tile[kMaxMicroRows * 32];
    std::int64_t copied = -1;  // the image now in `padded`
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t n = item / parts, part = item % parts;
      if (n != copied) {
        if (pairs)
          pad_image_pairs(in, n, pad_h, pad_w, padded);
        else
          pad_image(in, n, pad_h, pad_w, reinterpret_cast<std::byte*>(padded), DType::F32);
        copied = n;
      }
      float* image = direct ? reinterpret_cast<float*>(bytes_at(out, n * rows * positions)) : sums;
      const std::int64_t p_begin = cut.begin(part) * mr, p_end = std::min(positions, cut.end(part) * mr);
      for (std::int64_t p0 = p_begin; p0 < p_end; p0 += mr) {
        const std::int64_t valid = std::min<std::int64_t>(mr, p_end - p0);
        const float* lines[kMaxMicroRows];
        for (int i = 0; i < mr; ++i)  // rows past the last position repeat it; their sums are dropped
          lines[i] = padded + windows_at[static_cast<std::size_t>(p0 + std::min<std::int64_t>(i, valid - 1))];
        for (std::int64_t j = 0; j < rows; j += nr) {
          kernel.run_gathered(steps, lines, steps_at.data(), transposed.data() + j, row_width, tile, nr, false);
          const std::int64_t count = std::min<std::int64_t>(nr, rows - j);
          for (std::int64_t r = 0; r < count; ++r) {
            float* to = image + (j + r) * positions + p0;
            const float b = bias ? bias[j + r] : 0.0f;
            if (bias)
              for (std::int64_t i = 0; i < valid; ++i) to[i] = tile[i * nr + r] + b;
            else
              for (std::int64_t i = 0; i < valid; ++i) to[i] = tile[i * nr + r];
          }
        }
      }
      if (!direct)  // this part's positions of every row, rounded once
        for (std::int64_t r = 0; r < rows; ++r)
          convert(sums + r * positions + p_begin, DType::F32, bytes_at(out, (n * rows + r) * positions + p_begin),
                  out.dtype(), p_end - p_begin);
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
  const Images images = input_images(x, w);
  convolve_gathered(kernel, images, reinterpret_cast<const std::byte*>(weight.data_ptr()), weight.size(0), w.kernel_h,
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
  convolve_gathered(kernel, gradients, mirrored.data(), w.channels, kh, kw, kh - 1 - w.pad_h, kw - 1 - w.pad_w, nullptr,
                    dx);
}

bool conv2d_weight_grad_pairs_apply(const Window2d& w) {
  return conv2d_shifted_forward_applies(w) && w.out_w() % 2 == 0;
}

void conv2d_weight_grad_gathered(const MicroKernel& kernel, const Tensor& dy, const Tensor& x, const Window2d& w,
                                 Tensor& dw) {
  assert(kernel.run_gathered && conv2d_shifted_forward_applies(w));
  // On the dot kernel a step is a pair of neighbouring positions of one output row.
  const bool pairs = kernel.arith == MicroArith::Bf16Dot;
  assert(!pairs || (conv2d_weight_grad_pairs_apply(w) && x.dtype() == DType::BF16 && dy.dtype() == DType::BF16));
  const std::int64_t out_channels = dw.size(0), taps = w.channels * w.kernel_h * w.kernel_w;
  const std::int64_t out_h = w.out_h(), out_w = w.out_w(), positions = out_h * out_w;
  const std::int64_t steps = pairs ? positions / 2 : positions;
  const std::int64_t padded_h = w.height + 2 * w.pad_h, padded_w = w.width + 2 * w.pad_w, plane = padded_h * padded_w;
  const int mr = kernel.mr, nr = kernel.nr;
  assert(mr <= kMaxMicroRows);
  // Where a tap's line starts in the padded image, and where each step's position (the first of a pair)
  // sits on every line.
  const std::vector<std::int64_t> taps_at = tap_offsets(w.channels, w.kernel_h, w.kernel_w, padded_h, padded_w),
                                  windows_at = position_offsets(out_h, out_w, padded_w);
  std::vector<std::int64_t> steps_at(static_cast<std::size_t>(steps));
  for (std::int64_t s = 0; s < steps; ++s)
    steps_at[static_cast<std::size_t>(s)] = windows_at[static_cast<std::size_t>(pairs ? 2 * s : s)];
  const Images images = input_images(x, w);
  // dy of one image as [steps, channels], each row whole micro-panels of NR (zeros past the last channel).
  const std::int64_t panels = (out_channels + nr - 1) / nr, row_width = panels * nr;
  const std::int64_t dy_size = static_cast<std::int64_t>(dtype_size(dy.dtype()));
  const std::int64_t row_panels = (taps + mr - 1) / mr;
  // Taps (rows of the transposed dW) per thread; each thread reads every image.
  const Chunks cut{row_panels, std::clamp<std::int64_t>(num_threads(), 1, row_panels)};
  parallel_for(cut.count, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t part = begin; part < end; ++part) {
      const std::int64_t first = cut.begin(part) * mr, last = std::min(taps, cut.end(part) * mr);
      const std::int64_t rows = (cut.end(part) - cut.begin(part)) * mr;
      // The f32 sums, [taps of this part, channels]: one chain per element over every image's positions,
      // from +0 (as the window form's; on an Fma kernel the same bits).
      std::vector<float> sums(static_cast<std::size_t>(rows * row_width), 0.0f);
      auto* padded = reinterpret_cast<float*>(reserve_bytes(padded_buffer, w.channels * plane * 4));
      auto* gradient = reinterpret_cast<float*>(reserve_bytes(result_buffer, steps * row_width * 4));
      std::fill(padded, padded + w.channels * plane, 0.0f);
      std::fill(gradient, gradient + steps * row_width, 0.0f);
      // The dot kernel's image: the bf16 padded image (one zero past its end), then each value paired with
      // the next, so that a pair of positions at any offset is one aligned 32-bit word.
      std::vector<std::uint16_t> staging(pairs ? static_cast<std::size_t>(w.channels * plane + 1) : 0, 0);
      std::vector<float> row(pairs ? 0 : static_cast<std::size_t>(positions));  // a row of dy widened
      for (std::int64_t n = 0; n < w.batch; ++n) {
        const std::byte* dy_image = reinterpret_cast<const std::byte*>(dy.data_ptr()) +
                                    n * out_channels * positions * dy_size;
        if (pairs) {
          pad_image(images, n, w.pad_h, w.pad_w, reinterpret_cast<std::byte*>(staging.data()), DType::BF16);
          for (std::int64_t i = 0; i < w.channels * plane; ++i)
            padded[i] = std::bit_cast<float>(std::uint32_t{staging[static_cast<std::size_t>(i)]} |
                                             std::uint32_t{staging[static_cast<std::size_t>(i + 1)]} << 16);
          for (std::int64_t o = 0; o < out_channels; ++o) {
            const auto* line = reinterpret_cast<const std::uint16_t*>(dy_image) + o * positions;
            for (std::int64_t s = 0; s < steps; ++s)
              gradient[s * row_width + o] = std::bit_cast<float>(std::uint32_t{line[2 * s]} |
                                                                 std::uint32_t{line[2 * s + 1]} << 16);
          }
        } else {
          pad_image(images, n, w.pad_h, w.pad_w, reinterpret_cast<std::byte*>(padded), DType::F32);
          for (std::int64_t o = 0; o < out_channels; ++o) {
            copy_row(dy_image + o * positions * dy_size, dy.dtype(), reinterpret_cast<std::byte*>(row.data()),
                     DType::F32, positions);
            for (std::int64_t p = 0; p < positions; ++p) gradient[p * row_width + o] = row[static_cast<std::size_t>(p)];
          }
        }
        for (std::int64_t panel = cut.begin(part); panel < cut.end(part); ++panel) {
          const float* lines[kMaxMicroRows];
          for (int i = 0; i < mr; ++i)  // rows past the last tap repeat it; their sums are dropped
            lines[i] = padded + taps_at[static_cast<std::size_t>(std::min(panel * mr + i, taps - 1))];
          for (std::int64_t j = 0; j < row_width; j += nr)
            kernel.run_gathered(steps, lines, steps_at.data(), gradient + j, row_width,
                                sums.data() + (panel * mr - first) * row_width + j, row_width, true);
        }
      }
      // dW[o, t] for this part's taps, rounded once from the f32 sums.
      std::vector<float> column(static_cast<std::size_t>(last - first));
      for (std::int64_t o = 0; o < out_channels; ++o) {
        for (std::int64_t t = first; t < last; ++t)
          column[static_cast<std::size_t>(t - first)] = sums[static_cast<std::size_t>((t - first) * row_width + o)];
        convert(column.data(), DType::F32, bytes_at(dw, o * taps + first), dw.dtype(), last - first);
      }
    }
  });
}

}  // namespace mg::kernels::cpu
