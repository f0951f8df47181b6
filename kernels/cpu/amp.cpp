// CPU loss-scaling kernels (kernels/amp.h): unscale widens chunks of each gradient to f32 (F16C
// for f16), multiplies them by the factor, checks them, and rounds them into the destination (or,
// for find_non_finite, only checks them); update_scale runs the shared update_scale_step on the
// three one-element tensors. Each gradient is cut into chunks for the thread pool.
// Tests: build/tests/test_amp_scaler, build/tests/test_cuda_amp.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "kernels/amp.h"
#include "kernels/cpu/parallel.h"

namespace mg::kernels::cpu {

namespace {

constexpr std::int64_t kChunk = 1024;
constexpr std::int64_t kGrain = 32 * 1024;  // elements per chunk of the thread pool (parallel.h)

// Unscales elements [begin, end) of src into dst (dst undefined: checks only); returns whether a
// result was inf or NaN.
template <class C>
bool unscale_range(const Tensor& src, const Tensor* dst, C factor, std::int64_t begin, std::int64_t end) {
  C values[kChunk];
  C stored[kChunk];
  std::int64_t non_finite = 0;
  const auto* in = static_cast<const char*>(src.data_ptr());
  auto* out = dst ? static_cast<char*>(dst->data_ptr()) : nullptr;
  const std::size_t in_size = dtype_size(src.dtype()), out_size = dst ? dtype_size(dst->dtype()) : 0;
  const bool in_place = dst && src.dtype() == dtype_of<C>() && dst->dtype() == dtype_of<C>();
  for (std::int64_t start = begin; start < end; start += kChunk) {
    const std::int64_t n = std::min(kChunk, end - start);
    void* destination = dst ? out + static_cast<std::size_t>(start) * out_size : nullptr;
    const C* check = values;
    if (!dst) {  // find_non_finite: the products are checked and dropped
      convert(in + static_cast<std::size_t>(start) * in_size, src.dtype(), values, dtype_of<C>(), n);
      for (std::int64_t i = 0; i < n; ++i) values[i] *= factor;
    } else if (in_place) {  // f32 (or f64) both sides: no widening, no copies
      const C* from = reinterpret_cast<const C*>(in) + start;
      C* to = static_cast<C*>(destination);
      for (std::int64_t i = 0; i < n; ++i) to[i] = from[i] * factor;
      check = to;
    } else {
      convert(in + static_cast<std::size_t>(start) * in_size, src.dtype(), values, dtype_of<C>(), n);
      for (std::int64_t i = 0; i < n; ++i) values[i] *= factor;
      convert(values, dtype_of<C>(), destination, dst->dtype(), n);
      // Check what was stored: an f16 destination overflows at 65520, not at f32's limit.
      if (dst->dtype() != dtype_of<C>()) {
        convert(destination, dst->dtype(), stored, dtype_of<C>(), n);
        check = stored;
      }
    }
    // !(|x| <= max) is true exactly for inf and NaN; unlike std::isfinite it vectorizes.
    for (std::int64_t i = 0; i < n; ++i) non_finite += !(std::abs(check[i]) <= std::numeric_limits<C>::max());
  }
  return non_finite > 0;
}

// The same over all of src, in chunks for the thread pool: any chunk's inf sets the flag.
template <class C>
bool unscale_one(const Tensor& src, const Tensor* dst, C factor) {
  std::atomic<bool> non_finite{false};
  parallel_for(src.numel(), kGrain, [&](std::int64_t begin, std::int64_t end) {
    if (unscale_range(src, dst, factor, begin, end)) non_finite = true;
  });
  return non_finite.load();
}

}  // namespace

void unscale(const std::vector<Tensor>& src, const std::vector<Tensor>& dst, const Tensor& factor, Tensor& found_inf) {
  const double f = factor.dtype() == DType::F64 ? *factor.data<double>() : *factor.data<float>();
  bool non_finite = false;
  for (std::size_t i = 0; i < src.size(); ++i) {
    const Tensor* to = dst.empty() ? nullptr : &dst[i];
    const bool f64 = (to ? to->dtype() : src[i].dtype()) == DType::F64;  // f64 is computed in f64
    non_finite |= f64 ? unscale_one<double>(src[i], to, f) : unscale_one<float>(src[i], to, static_cast<float>(f));
  }
  if (non_finite) *found_inf.data<float>() = 1.0f;
}

void update_scale(Tensor& scale, Tensor& growth_tracker, Tensor& overflow_streak, const Tensor& found_inf,
                  const ScaleRule& rule) {
  std::int32_t no_streak = 0;  // hysteresis 1 needs no count
  update_scale_step(*scale.data<float>(), *growth_tracker.data<std::int32_t>(),
                    overflow_streak.defined() ? *overflow_streak.data<std::int32_t>() : no_streak,
                    *found_inf.data<float>() != 0.0f, rule);
}

}  // namespace mg::kernels::cpu
