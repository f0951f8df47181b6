// CPU im2col / col2im (kernels/conv.h). Run their tests: build/tests/test_ops_conv.
#include <cstring>
#include <vector>

#include "core/convert.h"
#include "kernels/conv.h"
#include "kernels/cpu/accumulator.h"

namespace mg::kernels::cpu {

namespace {

// im2col moves elements without reading them as numbers: one template per element size.
template <class Bits>
void im2col_bits(const Bits* x, const Window2d& w, Bits* cols) {
  const std::int64_t out_h = w.out_h(), out_w = w.out_w();
  for (std::int64_t n = 0; n < w.batch; ++n)
    for (std::int64_t oh = 0; oh < out_h; ++oh)
      for (std::int64_t ow = 0; ow < out_w; ++ow)
        for (std::int64_t c = 0; c < w.channels; ++c) {
          const Bits* plane = x + (n * w.channels + c) * w.height * w.width;
          for (std::int64_t kh = 0; kh < w.kernel_h; ++kh) {
            const std::int64_t ih = oh * w.stride_h - w.pad_h + kh;
            for (std::int64_t kw = 0; kw < w.kernel_w; ++kw) {
              const std::int64_t iw = ow * w.stride_w - w.pad_w + kw;
              const bool inside = ih >= 0 && ih < w.height && iw >= 0 && iw < w.width;
              *cols++ = inside ? plane[ih * w.width + iw] : Bits{0};  // all-zero bits are 0.0 in every dtype
            }
          }
        }
}

}  // namespace

void im2col(const Tensor& x, const Window2d& window, Tensor& cols) {
  if (cols.numel() == 0) return;
  switch (dtype_size(x.dtype())) {
    case 2: return im2col_bits(static_cast<const std::uint16_t*>(x.data_ptr()), window,
                               static_cast<std::uint16_t*>(cols.data_ptr()));
    case 4: return im2col_bits(static_cast<const std::uint32_t*>(x.data_ptr()), window,
                               static_cast<std::uint32_t*>(cols.data_ptr()));
    default: return im2col_bits(static_cast<const std::uint64_t*>(x.data_ptr()), window,
                                static_cast<std::uint64_t*>(cols.data_ptr()));
  }
}

void col2im(const Tensor& cols, const Window2d& w, Tensor& dx) {
  visit_floating(dx.dtype(), "col2im", [&](auto zero) {
    using C = compute_t<decltype(zero)>;
    if (dx.numel() == 0) return;
    Accumulator<C> accumulator(dx);  // a pixel read by several windows adds up in f32
    C* sum = accumulator.data();
    const std::int64_t width = w.channels * w.kernel_h * w.kernel_w;
    std::vector<C> row(static_cast<std::size_t>(width));
    const auto* src = static_cast<const char*>(cols.data_ptr());
    const std::size_t row_bytes = static_cast<std::size_t>(width) * dtype_size(cols.dtype());
    const std::int64_t out_h = w.out_h(), out_w = w.out_w();
    for (std::int64_t n = 0; n < w.batch; ++n)
      for (std::int64_t oh = 0; oh < out_h; ++oh)
        for (std::int64_t ow = 0; ow < out_w; ++ow) {
          convert(src, cols.dtype(), row.data(), dtype_of<C>(), width);
          src += row_bytes;
          const C* value = row.data();
          for (std::int64_t c = 0; c < w.channels; ++c) {
            C* plane = sum + (n * w.channels + c) * w.height * w.width;
            for (std::int64_t kh = 0; kh < w.kernel_h; ++kh) {
              const std::int64_t ih = oh * w.stride_h - w.pad_h + kh;
              for (std::int64_t kw = 0; kw < w.kernel_w; ++kw, ++value) {
                const std::int64_t iw = ow * w.stride_w - w.pad_w + kw;
                if (ih >= 0 && ih < w.height && iw >= 0 && iw < w.width) plane[ih * w.width + iw] += *value;
              }
            }
          }
        }
    accumulator.store();
  });
}

}  // namespace mg::kernels::cpu
