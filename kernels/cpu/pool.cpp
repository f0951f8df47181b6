// CPU max and average pooling (kernels/pool.h). Run their tests: build/tests/test_ops_conv.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/convert.h"
#include "kernels/pool.h"

namespace mg::kernels::cpu {

namespace {

// Runs body(n * channels + c, oh, ow, first_ih, first_iw) for every output position.
template <class Body>
void for_each_window(const Window2d& w, Body&& body) {
  const std::int64_t out_h = w.out_h(), out_w = w.out_w();
  for (std::int64_t plane = 0; plane < w.batch * w.channels; ++plane)
    for (std::int64_t oh = 0; oh < out_h; ++oh)
      for (std::int64_t ow = 0; ow < out_w; ++ow)
        body(plane, oh * out_w + ow, oh * w.stride_h - w.pad_h, ow * w.stride_w - w.pad_w);
}

// A dx-shaped accumulator in the compute type C (dx itself when it already has that type), zeroed.
template <class C>
Tensor accumulator_for(Tensor& dx) {
  Tensor acc = dx.dtype() == dtype_of<C>() ? dx : Tensor::empty(dx.shape(), {.dtype = dtype_of<C>()});
  std::memset(acc.data_ptr(), 0, acc.nbytes());
  return acc;
}

template <class C>
void store_accumulator(const Tensor& acc, Tensor& dx) {
  if (!acc.shares_storage_with(dx)) convert(acc.data_ptr(), dtype_of<C>(), dx.data_ptr(), dx.dtype(), dx.numel());
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
      for (std::int64_t ih = std::max<std::int64_t>(ih0, 0); ih < std::min(ih0 + w.kernel_h, w.height); ++ih)
        for (std::int64_t iw = std::max<std::int64_t>(iw0, 0); iw < std::min(iw0 + w.kernel_w, w.width); ++iw) {
          const C v = static_cast<C>(values[ih * w.width + iw]);
          if (best_at < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
            best = v;
            best_at = ih * w.width + iw;
          }
        }
      result[plane * out_plane + position] = static_cast<T>(best);
      where[plane * out_plane + position] = static_cast<std::int32_t>(best_at);
    });
  });
}

void max_pool2d_backward(const Tensor& dout, const Tensor& argmax, const Window2d& w, Tensor& dx) {
  visit_floating(dx.dtype(), "max_pool2d_backward", [&](auto zero) {
    using T = decltype(zero);
    using C = compute_t<T>;
    Tensor acc = accumulator_for<C>(dx);
    C* sum = acc.data<C>();
    const T* grad = dout.data<T>();
    const std::int32_t* where = argmax.data<std::int32_t>();
    const std::int64_t plane_size = w.height * w.width, out_plane = w.out_h() * w.out_w();
    for (std::int64_t i = 0; i < dout.numel(); ++i) sum[(i / out_plane) * plane_size + where[i]] += static_cast<C>(grad[i]);
    store_accumulator<C>(acc, dx);
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
      for (std::int64_t ih = std::max<std::int64_t>(ih0, 0); ih < std::min(ih0 + w.kernel_h, w.height); ++ih)
        for (std::int64_t iw = std::max<std::int64_t>(iw0, 0); iw < std::min(iw0 + w.kernel_w, w.width); ++iw)
          total += static_cast<C>(values[ih * w.width + iw]);
      result[plane * out_plane + position] = static_cast<T>(total / divisor);
    });
  });
}

void avg_pool2d_backward(const Tensor& dout, const Window2d& w, Tensor& dx) {
  visit_floating(dx.dtype(), "avg_pool2d_backward", [&](auto zero) {
    using T = decltype(zero);
    using C = compute_t<T>;
    Tensor acc = accumulator_for<C>(dx);
    C* sum = acc.data<C>();
    const T* grad = dout.data<T>();
    const C divisor = static_cast<C>(w.kernel_h * w.kernel_w);
    const std::int64_t plane_size = w.height * w.width, out_plane = w.out_h() * w.out_w();
    for_each_window(w, [&](std::int64_t plane, std::int64_t position, std::int64_t ih0, std::int64_t iw0) {
      const C share = static_cast<C>(grad[plane * out_plane + position]) / divisor;
      C* target = sum + plane * plane_size;
      for (std::int64_t ih = std::max<std::int64_t>(ih0, 0); ih < std::min(ih0 + w.kernel_h, w.height); ++ih)
        for (std::int64_t iw = std::max<std::int64_t>(iw0, 0); iw < std::min(iw0 + w.kernel_w, w.width); ++iw)
          target[ih * w.width + iw] += share;
    });
    store_accumulator<C>(acc, dx);
  });
}

}  // namespace mg::kernels::cpu
