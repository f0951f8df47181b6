// CPU max and average pooling (kernels/pool.h). f16/bf16 inputs are widened to f32, pooled in f32
// and rounded once on store (a max is exact either way; an average is not). Planes (one image's
// channel) are independent and spread over the thread pool, and each is widened, pooled and stored on
// its own: an f16 tensor never has a whole f32 copy (after a first convolution of the CNN that copy
// was 12 MiB, the largest transient of a mixed-precision step), and a backward pass's f32 sums are
// one plane long.
// Run their tests: build/tests/test_ops_conv.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/cpu/compute_type.h"
#include "kernels/pool.h"

namespace mg::kernels::cpu {

namespace {

// Runs body(plane) for every plane = n * channels + c, the planes spread over the thread pool: a
// plane's windows read and write only that plane, so the planes are independent.
template <class Body>
void for_each_plane(const Window2d& w, const Body& body) {
  const std::int64_t plane_work = std::max<std::int64_t>(1, w.height * w.width);
  parallel_for(w.batch * w.channels, std::max<std::int64_t>(1, kConvertGrain / plane_work),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t plane = begin; plane < end; ++plane) body(plane);
               });
}

// Runs body(position, first_ih, first_iw) for every output position of a plane: position = oh * out_w
// + ow, and (first_ih, first_iw) the window's top-left corner (may be padding).
template <class Body>
void for_each_window(const Window2d& w, const Body& body) {
  const std::int64_t out_h = w.out_h(), out_w = w.out_w();
  for (std::int64_t oh = 0; oh < out_h; ++oh)
    for (std::int64_t ow = 0; ow < out_w; ++ow)
      body(oh * out_w + ow, oh * w.stride_h - w.pad_h, ow * w.stride_w - w.pad_w);
}

// One plane of a tensor as C: its own memory when it holds C, else widened into this thread's buffer.
template <class C>
const C* plane_values(const Tensor& t, std::int64_t plane, std::int64_t plane_size) {
  thread_local std::vector<C> buffer;
  if (buffer.size() < static_cast<std::size_t>(plane_size)) buffer.resize(static_cast<std::size_t>(plane_size));
  return values_at<C>(t, plane * plane_size, plane_size, buffer.data());
}

// Where one plane of `out` is computed in C: out's own memory when it holds C, else this thread's
// buffer, which store() rounds into out once.
template <class C>
class PlaneResult {
 public:
  PlaneResult(Tensor& out, std::int64_t plane, std::int64_t plane_size) : out_(out), plane_(plane), size_(plane_size) {
    thread_local std::vector<C> buffer;
    if (out.dtype() == dtype_of<C>()) {
      values_ = out.data<C>() + plane * plane_size;
    } else {
      if (buffer.size() < static_cast<std::size_t>(plane_size)) buffer.resize(static_cast<std::size_t>(plane_size));
      values_ = buffer.data();
    }
  }
  C* data() { return values_; }
  void store() {
    if (out_.dtype() != dtype_of<C>())
      convert(values_, dtype_of<C>(), bytes_at(out_, plane_ * size_), out_.dtype(), size_);
  }

 private:
  Tensor& out_;
  std::int64_t plane_, size_;
  C* values_;
};

// Runs visit(ih * width + iw) for the input pixels of the window at (ih0, iw0), padding skipped.
template <class Visit>
void for_each_pixel(const Window2d& w, std::int64_t ih0, std::int64_t iw0, Visit&& visit) {
  for (std::int64_t ih = std::max<std::int64_t>(ih0, 0); ih < std::min(ih0 + w.kernel_h, w.height); ++ih)
    for (std::int64_t iw = std::max<std::int64_t>(iw0, 0); iw < std::min(iw0 + w.kernel_w, w.width); ++iw)
      visit(ih * w.width + iw);
}

// best[i], offset[i] = candidate[i], candidate_offset where the candidate is larger, or is NaN while
// best[i] is not (the first NaN wins and stays, as in PyTorch); a tie keeps the earlier pixel.
template <class C>
void take_larger(const C* candidate, C* best, std::int32_t* offset, std::int64_t n, std::int32_t candidate_offset) {
  for (std::int64_t i = 0; i < n; ++i) {
    const C b = best[i];
    const bool take = !(candidate[i] <= b) & (b == b);
    best[i] = take ? candidate[i] : b;
    offset[i] = take ? candidate_offset : offset[i];
  }
}

}  // namespace

void max_pool2d(const Tensor& x, const Window2d& w, Tensor& out, Tensor& argmax) {
  visit_floating(x.dtype(), "max_pool2d", [&](auto zero) {
    using C = compute_t<decltype(zero)>;
    std::int32_t* where = argmax.data<std::int32_t>();
    const std::int64_t plane_size = w.height * w.width, out_plane = w.out_h() * w.out_w();
    const bool two_by_two = w.kernel_h == 2 && w.kernel_w == 2 && w.stride_h == 2 && w.stride_w == 2 && w.pad_h == 0 &&
                            w.pad_w == 0;
    // Keeps the first pixel, then any larger one or a NaN (which then stays: NaN propagates, as in
    // PyTorch). Selects, not branches: which pixel wins is data, so branches would mispredict.
    auto consider = [](C v, std::int64_t at, C& best, std::int64_t& best_at) {
      const bool take = (best_at < 0) | ((best == best) & !(v <= best));
      best = take ? v : best;
      best_at = take ? at : best_at;
    };
    for_each_plane(w, [&](std::int64_t plane) {
      const C* pixels = plane_values<C>(x, plane, plane_size);
      PlaneResult<C> result(out, plane, out_plane);
      C* best = result.data();
      std::int32_t* offset = where + plane * out_plane;
      if (two_by_two) {
        // The CNN's 2x2 pooling: every window inside the image, four pixels, no bounds to check. In
        // passes over contiguous arrays: the best starts as each window's top-left pixel, then each of
        // the other three corners (gathered into a contiguous array first) replaces it where larger.
        // Each pass is a plain loop of selects over the whole plane, which the compiler vectorises;
        // one loop over the four pixels of a window compiles to data-dependent branches instead,
        // which mispredict about half the time.
        const std::int64_t out_h = w.out_h(), out_w = w.out_w();
        thread_local std::vector<C> corner;
        corner.resize(static_cast<std::size_t>(out_plane));
        const auto width = static_cast<std::int32_t>(w.width);
        const std::pair<std::int64_t, std::int32_t> corners[4] = {{0, 0},
                                                                  {1, 1},
                                                                  {w.width, width},
                                                                  {w.width + 1, width + 1}};
        for (const auto& [start, corner_offset] : corners) {
          C* gathered = start == 0 ? best : corner.data();
          for (std::int64_t oh = 0; oh < out_h; ++oh)
            for (std::int64_t ow = 0; ow < out_w; ++ow)
              gathered[oh * out_w + ow] = pixels[start + 2 * (oh * w.width + ow)];
          if (start == 0)
            std::fill(offset, offset + out_plane, 0);
          else
            take_larger(corner.data(), best, offset, out_plane, corner_offset);
        }
        for (std::int64_t oh = 0; oh < out_h; ++oh)
          for (std::int64_t ow = 0; ow < out_w; ++ow)
            offset[oh * out_w + ow] += static_cast<std::int32_t>(2 * (oh * w.width + ow));
      } else {
        for_each_window(w, [&](std::int64_t position, std::int64_t ih0, std::int64_t iw0) {
          C value = 0;
          std::int64_t at = -1;
          for_each_pixel(w, ih0, iw0, [&](std::int64_t pixel) { consider(pixels[pixel], pixel, value, at); });
          best[position] = value;
          offset[position] = static_cast<std::int32_t>(at);
        });
      }
      result.store();
    });
  });
}

void max_pool2d_backward(const Tensor& dout, const Tensor& argmax, const Window2d& w, Tensor& dx) {
  visit_floating(dx.dtype(), "max_pool2d_backward", [&](auto zero) {
    using C = compute_t<decltype(zero)>;
    const std::int32_t* where = argmax.data<std::int32_t>();
    const std::int64_t plane_size = w.height * w.width, out_plane = w.out_h() * w.out_w();
    for_each_plane(w, [&](std::int64_t plane) {
      const C* grad = plane_values<C>(dout, plane, out_plane);
      PlaneResult<C> sum(dx, plane, plane_size);  // overlapping windows may pick one pixel several times
      std::fill(sum.data(), sum.data() + plane_size, C(0));
      for (std::int64_t i = 0; i < out_plane; ++i) sum.data()[where[plane * out_plane + i]] += grad[i];
      sum.store();
    });
  });
}

void avg_pool2d(const Tensor& x, const Window2d& w, Tensor& out) {
  visit_floating(x.dtype(), "avg_pool2d", [&](auto zero) {
    using C = compute_t<decltype(zero)>;
    const C divisor = static_cast<C>(w.kernel_h * w.kernel_w);
    const std::int64_t plane_size = w.height * w.width, out_plane = w.out_h() * w.out_w();
    for_each_plane(w, [&](std::int64_t plane) {
      const C* pixels = plane_values<C>(x, plane, plane_size);
      PlaneResult<C> result(out, plane, out_plane);
      for_each_window(w, [&](std::int64_t position, std::int64_t ih0, std::int64_t iw0) {
        result.data()[position] = window_sum<C>(pixels, w, ih0, iw0, [](C v) { return v; }) / divisor;
      });
      result.store();
    });
  });
}

void avg_pool2d_backward(const Tensor& dout, const Window2d& w, Tensor& dx) {
  visit_floating(dx.dtype(), "avg_pool2d_backward", [&](auto zero) {
    using C = compute_t<decltype(zero)>;
    const C divisor = static_cast<C>(w.kernel_h * w.kernel_w);
    const std::int64_t plane_size = w.height * w.width, out_plane = w.out_h() * w.out_w();
    for_each_plane(w, [&](std::int64_t plane) {
      const C* grad = plane_values<C>(dout, plane, out_plane);
      PlaneResult<C> sum(dx, plane, plane_size);
      std::fill(sum.data(), sum.data() + plane_size, C(0));
      for_each_window(w, [&](std::int64_t position, std::int64_t ih0, std::int64_t iw0) {
        const C share = grad[position] / divisor;
        for_each_pixel(w, ih0, iw0, [&](std::int64_t at) { sum.data()[at] += share; });
      });
      sum.store();
    });
  });
}

}  // namespace mg::kernels::cpu
