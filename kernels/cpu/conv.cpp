// CPU im2col / col2im (kernels/conv.h), the images of a batch spread over the thread pool.
// Run their tests: build/tests/test_ops_conv.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/convert.h"
#include "kernels/conv.h"
#include "kernels/cpu/compute_type.h"

namespace mg::kernels::cpu {

namespace {

// The kernel columns kw in [first, last) of a window starting at input column iw0 land inside the
// image (the others read padding). Computed once per window, so the copy loops need no checks.
struct Columns {
  std::int64_t first, last;
};
Columns inside_columns(const Window2d& w, std::int64_t iw0) {
  return {std::clamp<std::int64_t>(-iw0, 0, w.kernel_w), std::clamp<std::int64_t>(w.width - iw0, 0, w.kernel_w)};
}

// Images per chunk of the thread pool: about kConvertGrain elements of cols each.
std::int64_t images_per_chunk(const Window2d& w) {
  const std::int64_t image_cols = std::max<std::int64_t>(1,
                                                         w.out_h() * w.out_w() * w.channels * w.kernel_h * w.kernel_w);
  return std::max<std::int64_t>(1, kConvertGrain / image_cols);
}

// im2col moves elements without reading them as numbers: one template per element size. KernelW is
// the kernel's width when known at compile time (3, the usual), so the copy of a window's row is a
// fixed three moves; 0 reads it from the window.
template <class Bits, std::int64_t KernelW>
void im2col_image(const Bits* x, const Window2d& w, std::int64_t n, Bits* cols) {
  const std::int64_t kernel_w = KernelW > 0 ? KernelW : w.kernel_w;
  const std::int64_t out_h = w.out_h(), out_w = w.out_w();
  cols += n * out_h * out_w * w.channels * w.kernel_h * w.kernel_w;  // image n's first row
  for (std::int64_t oh = 0; oh < out_h; ++oh)
    for (std::int64_t ow = 0; ow < out_w; ++ow) {
      const std::int64_t iw0 = ow * w.stride_w - w.pad_w;
      const Columns inside = inside_columns(w, iw0);
      for (std::int64_t c = 0; c < w.channels; ++c) {
        const Bits* plane = x + (n * w.channels + c) * w.height * w.width;
        for (std::int64_t kh = 0; kh < w.kernel_h; ++kh, cols += kernel_w) {
          const std::int64_t ih = oh * w.stride_h - w.pad_h + kh;
          const bool row_inside = ih >= 0 && ih < w.height;
          const std::int64_t start = ih * w.width + iw0;  // index of kernel column 0 (may be padding)
          if (row_inside && inside.first == 0 && inside.last == kernel_w) {
            // Most windows: a plain copy (a loop: a few elements, cheaper than a call to memcpy).
            for (std::int64_t kw = 0; kw < kernel_w; ++kw) cols[kw] = plane[start + kw];
            continue;
          }
          for (std::int64_t kw = 0; kw < kernel_w; ++kw)  // all-zero bits are 0.0 in every dtype
            cols[kw] = row_inside && kw >= inside.first && kw < inside.last ? plane[start + kw] : Bits{0};
        }
      }
    }
}

// The images of a batch, spread over the thread pool (each writes its own rows of cols).
template <class Bits>
void im2col_bits(const Bits* x, const Window2d& w, Bits* cols) {
  parallel_for(w.batch, images_per_chunk(w), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t n = begin; n < end; ++n) {
      if (w.kernel_w == 3)
        im2col_image<Bits, 3>(x, w, n, cols);
      else
        im2col_image<Bits, 0>(x, w, n, cols);
    }
  });
}

}  // namespace

void im2col(const Tensor& x, const Window2d& window, Tensor& cols) {
  if (cols.numel() == 0) return;
  switch (dtype_size(x.dtype())) {
    case 2:
      return im2col_bits(static_cast<const std::uint16_t*>(x.data_ptr()), window,
                         static_cast<std::uint16_t*>(cols.data_ptr()));
    case 4:
      return im2col_bits(static_cast<const std::uint32_t*>(x.data_ptr()), window,
                         static_cast<std::uint32_t*>(cols.data_ptr()));
    default:
      return im2col_bits(static_cast<const std::uint64_t*>(x.data_ptr()), window,
                         static_cast<std::uint64_t*>(cols.data_ptr()));
  }
}

// Image n's share of col2im: every window of image n adds its row of dcols into image n's pixels.
// KernelW as in im2col_image.
template <class C, std::int64_t KernelW>
void col2im_image(const Tensor& cols, const Window2d& w, std::int64_t n, C* sum, C* row) {
  const std::int64_t kernel_w = KernelW > 0 ? KernelW : w.kernel_w;
  const std::int64_t width = w.channels * w.kernel_h * kernel_w;
  const std::int64_t out_h = w.out_h(), out_w = w.out_w();
  for (std::int64_t oh = 0; oh < out_h; ++oh)
    for (std::int64_t ow = 0; ow < out_w; ++ow) {
      // The window's row of dcols as C: read in place, or widened into `row`.
      const C* value = values_at(cols, (n * out_h * out_w + oh * out_w + ow) * width, width, row);
      const std::int64_t iw0 = ow * w.stride_w - w.pad_w;
      const Columns inside = inside_columns(w, iw0);
      const bool whole_row = inside.first == 0 && inside.last == kernel_w;
      for (std::int64_t c = 0; c < w.channels; ++c) {
        C* plane = sum + (n * w.channels + c) * w.height * w.width;
        for (std::int64_t kh = 0; kh < w.kernel_h; ++kh, value += kernel_w) {
          const std::int64_t ih = oh * w.stride_h - w.pad_h + kh;
          if (ih < 0 || ih >= w.height) continue;
          C* target = plane + ih * w.width + iw0;  // kernel column 0
          if (whole_row) {
            for (std::int64_t kw = 0; kw < kernel_w; ++kw) target[kw] += value[kw];
          } else {
            for (std::int64_t kw = inside.first; kw < inside.last; ++kw) target[kw] += value[kw];
          }
        }
      }
    }
}

void col2im(const Tensor& cols, const Window2d& w, Tensor& dx) {
  visit_floating(dx.dtype(), "col2im", [&](auto zero) {
    using C = compute_t<decltype(zero)>;
    if (dx.numel() == 0) return;
    Accumulator<C> accumulator(dx);  // a pixel read by several windows adds up in f32
    C* sum = accumulator.data();
    const std::int64_t width = w.channels * w.kernel_h * w.kernel_w;
    // Image n's windows add into image n's pixels only: the images are independent chunks.
    parallel_for(w.batch, images_per_chunk(w), [&](std::int64_t begin, std::int64_t end) {
      std::vector<C> row(static_cast<std::size_t>(width));
      for (std::int64_t n = begin; n < end; ++n) {
        if (w.kernel_w == 3)
          col2im_image<C, 3>(cols, w, n, sum, row.data());
        else
          col2im_image<C, 0>(cols, w, n, sum, row.data());
      }
    });
    accumulator.store();
  });
}

}  // namespace mg::kernels::cpu
