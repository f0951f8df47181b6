#include "amp/precision_stats.h"

#include <algorithm>
#include <cmath>

#include "core/convert.h"
#include "core/fp8.h"

namespace mg::amp {

namespace {

// The outcome of rounding a finite non-zero v: what it becomes, and that format's smallest normal.
struct Rounded {
  double value;
  double min_normal;
};

Rounded round_to(double v, DType format, double fp8_scale) {
  double value;
  if (format == DType::F16)
    value = static_cast<double>(scalar_cast<half>(v));
  else if (format == DType::BF16)
    value = static_cast<double>(scalar_cast<bfloat16>(v));
  else  // E4M3 or E5M2, by the format's own overflow rule (NaN, inf): a value past max is not finite
    value = static_cast<double>(
        fp8::decode(fp8::encode(static_cast<float>(v * fp8_scale), format, fp8::Overflow::NonFinite), format));
  return {value, dtype_info(format).min_normal};
}

// Each format's smallest normal and largest finite magnitude (kAllFormats' order). A value between
// them (after the FP8 scale) rounds to a normal value in between, both ends being representable: no
// rounding needs to be done to know that it is neither flushed, nor subnormal, nor overflowing.
constexpr std::array<std::array<double, 2>, kFormats> kNormalRange = [] {
  std::array<std::array<double, 2>, kFormats> range{};
  for (int i = 0; i < kFormats; ++i) {
    const DTypeInfo d = dtype_info(kAllFormats[static_cast<std::size_t>(i)]);
    range[static_cast<std::size_t>(i)] = {d.min_normal, d.max};
  }
  return range;
}();

double fp8_scale_for(double amax, DType format, const Fp8Judging& judging) {
  if (!(amax > 0.0)) return 1.0;
  const double max = dtype_info(format).max;
  double scale = max / amax / std::ldexp(1.0, judging.margin);
  if (judging.power_of_two) scale = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(scale))));
  return scale;
}

}  // namespace

std::size_t format_index(DType format) {
  for (std::size_t i = 0; i < kAllFormats.size(); ++i)
    if (kAllFormats[i] == format) return i;
  throw Error(fmt::format("amp::PrecisionStats: {} is not a format it judges (f16, bf16, e4m3, e5m2)", format));
}

void PrecisionStats::merge(const PrecisionStats& other) {
  values.merge(other.values);
  amax = std::max(amax, other.amax);
  for (int f = 0; f < kFormats; ++f)
    for (int o = 0; o < 3; ++o) counts[f][o] += other.counts[f][o];
  for (int k = 0; k < 2; ++k) fp8_scale[k] = std::min(fp8_scale[k], other.fp8_scale[k]);
}

PrecisionStats precision_stats(const Tensor& tensor, const Fp8Judging& fp8) {
  MG_CHECK(tensor.defined() && is_floating(tensor.dtype()), "amp::precision_stats: needs a floating tensor, got {}",
           tensor.defined() ? fmt::format("{} {}", tensor.dtype(), tensor.shape()) : std::string("an undefined one"));
  PrecisionStats stats;
  stats.values = gradient_stats(tensor);
  const std::vector<double> values = tensor.to_vector<double>();
  for (double v : values)
    if (std::isfinite(v)) stats.amax = std::max(stats.amax, std::fabs(v));
  stats.fp8_scale = {fp8_scale_for(stats.amax, DType::E4M3, fp8), fp8_scale_for(stats.amax, DType::E5M2, fp8)};
  for (double v : values) {
    if (!std::isfinite(v) || v == 0.0) continue;
    for (DType format : kAllFormats) {
      const double scale = format == DType::E4M3 ? stats.fp8_scale[0] : format == DType::E5M2 ? stats.fp8_scale[1] : 1;
      const std::array<double, 2>& range = kNormalRange[format_index(format)];
      const double magnitude = std::fabs(v) * scale;
      if (magnitude >= range[0] && magnitude <= range[1]) continue;  // the common case: normal
      const Rounded r = round_to(v, format, scale);
      auto& counts = stats.counts[format_index(format)];
      if (!std::isfinite(r.value))
        ++counts[static_cast<std::size_t>(Outcome::Overflow)];
      else if (r.value == 0.0)
        ++counts[static_cast<std::size_t>(Outcome::Flushed)];
      else if (std::fabs(r.value) < r.min_normal)
        ++counts[static_cast<std::size_t>(Outcome::Subnormal)];
    }
  }
  return stats;
}

LostUpdates lost_updates(const std::vector<double>& before, const std::vector<double>& after,
                         const std::vector<double>& gradient) {
  MG_CHECK(before.size() == after.size() && before.size() == gradient.size(),
           "amp::lost_updates: before, after and the gradient must have one value per element each, got {}, {} and {}",
           before.size(), after.size(), gradient.size());
  LostUpdates lost;
  for (std::size_t i = 0; i < before.size(); ++i) {
    if (gradient[i] == 0.0 || !std::isfinite(gradient[i])) continue;
    ++lost.meant;
    lost.lost += after[i] == before[i];
  }
  return lost;
}

}  // namespace mg::amp
