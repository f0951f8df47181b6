// CPU max and average pooling (kernels/pool.h). Run their tests: build/tests/test_ops_conv.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/accumulator.h"
#include "kernels/pool.h"

namespace mg::kernels::cpu {

namespace {

// Runs body(plane, position, first_ih, first_iw) for every output position: plane = n * channels + c,
// position = oh * out_w + ow, and (first_ih, first_iw) the window's top-left corner (may be padding).
template <class Body>
void for_each_window(const Window2d& w, Body&& body) {
  const std::int64_t out_h = w.out_h(), out_w = w.out_w();
  for (std::int64_t plane = 0; plane < w.batch * w.channels; ++plane)
    for (std::int64_t oh = 0; oh < out_h; ++oh)
      for (std::int64_t ow = 0; ow < out_w; ++ow)
        body(plane, oh * out_w + ow, oh * w.stride_h - w.pad_h, ow * w.stride_w - w.pad_w);
}

// Runs visit(ih * width + iw) for the input pixels of the window at (ih0, iw0), padding skipped.
template <class Visit>
void for_each_pixel(const Window2d& w, std::int64_t ih0, std::int64_t iw0, Visit&& visit) {
  for (std::int64_t ih = std::max<std::int64_t>(ih0, 0); ih < std::min(ih0 + w.kernel_h, w.height); ++ih)
    for (std::int64_t iw = std::max<std::int64_t>(iw0, 0); iw < std::min(iw0 + w.kernel_w, w.width); ++iw)
      visit(ih * w.width + iw);
}

}  // namespace

void max_pool2d(const Tensor& x, const Window2d& w, Tensor& out, Tensor& argmax) {
  visit_floating(x.dtype(), "max_pool2d", [&](auto zero) {
    using T = decltype(zero);
    using C = compute_t<T>;
    const T* in = x.data<T>();
    T* result = out.data<T>();
    std::int32_t* where = argmax.data<std::int32_t>();
    const std::int64_t plane_size = w.height * w.width, out_plane = w.out_h() * w.out_w();
    for_each_window(w, [&](std::int64_t plane, std::int64_t position, std::int64_t ih0, std::int64_t iw0) {
      const T* values = in + plane * plane_size;
      C best = -std::numeric_limits<C>::infinity();
      std::int64_t best_at = -1;
      for_each_pixel(w, ih0, iw0, [&](std::int64_t at) {
        const C v = static_cast<C>(values[at]);
        if (best_at < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
          best = v;
          best_at = at;
        }
      });
      result[plane * out_plane + position] = static_cast<T>(best);
      where[plane * out_plane + position] = static_cast<std::int32_t>(best_at);
    });
  });
}

void max_pool2d_backward(const Tensor& dout, const Tensor& argmax, const Window2d& w, Tensor& dx) {
  visit_floating(dx.dtype(), "max_pool2d_backward", [&](auto zero) {
    using T = decltype(zero);
    using C = compute_t<T>;
    Accumulator<C> accumulator(dx);  // overlapping windows may pick one pixel several times
    C* sum = accumulator.data();
    const T* grad = dout.data<T>();
    const std::int32_t* where = argmax.data<std::int32_t>();
    const std::int64_t plane_size = w.height * w.width, out_plane = w.out_h() * w.out_w();
    for (std::int64_t i = 0; i < dout.numel(); ++i) sum[(i / out_plane) * plane_size + where[i]] += static_cast<C>(grad[i]);
    accumulator.store();
  });
}

void avg_pool2d(const Tensor& x, const Window2d& w, Tensor& out) {
  visit_floating(x.dtype(), "avg_pool2d", [&](auto zero) {
    using T = decltype(zero);
    using C = compute_t<T>;
    const T* in = x.data<T>();
    T* result = out.data<T>();
    const C divisor = static_cast<C>(w.kernel_h * w.kernel_w);
    const std::int64_t plane_size = w.height * w.width, out_plane = w.out_h() * w.out_w();
    for_each_window(w, [&](std::int64_t plane, std::int64_t position, std::int64_t ih0, std::int64_t iw0) {
      const T* values = in + plane * plane_size;
      C total = 0;
      for_each_pixel(w, ih0, iw0, [&](std::int64_t at) { total += static_cast<C>(values[at]); });
      result[plane * out_plane + position] = static_cast<T>(total / divisor);
    });
  });
}

void avg_pool2d_backward(const Tensor& dout, const Window2d& w, Tensor& dx) {
  visit_floating(dx.dtype(), "avg_pool2d_backward", [&](auto zero) {
    using T = decltype(zero);
    using C = compute_t<T>;
    Accumulator<C> accumulator(dx);
    C* sum = accumulator.data();
    const T* grad = dout.data<T>();
    const C divisor = static_cast<C>(w.kernel_h * w.kernel_w);
    const std::int64_t plane_size = w.height * w.width, out_plane = w.out_h() * w.out_w();
    for_each_window(w, [&](std::int64_t plane, std::int64_t position, std::int64_t ih0, std::int64_t iw0) {
      const C share = static_cast<C>(grad[plane * out_plane + position]) / divisor;
      C* target = sum + plane * plane_size;
      for_each_pixel(w, ih0, iw0, [&](std::int64_t at) { target[at] += share; });
    });
    accumulator.store();
  });
}

}  // namespace mg::kernels::cpu
