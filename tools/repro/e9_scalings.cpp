// E9's ways of scaling and its synthetic activations: e9_scalings(), the outlier channels, and the
// effects of every way of scaling on one tensor (tools/repro/e9_granularity.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <span>

#include "tools/repro/e9_granularity.h"
#include "tools/repro/run_tables.h"

namespace mg::tools::repro {

namespace {

Fp8Options forward_options(Fp8Scaling scaling, MxScaleRule rule = MxScaleRule::Floor) {
  return Fp8Options{.scaling = scaling, .backward_format = DType::E4M3, .mx_rule = rule};
}

}  // namespace

const std::vector<E9Scaling>& e9_scalings() {
  static const std::vector<E9Scaling> all{
      {"per tensor", "V8, V9", forward_options(Fp8Scaling::Current), variant_style(variant("V8"))},
      {"1x128 tiles", "V10", forward_options(Fp8Scaling::Block), variant_style(variant("V10"))},
      {"MX, floor (spec)", "V11", forward_options(Fp8Scaling::Mx, MxScaleRule::Floor), variant_style(variant("V11"))},
      {"MX, round up (TE)", "V15", forward_options(Fp8Scaling::Mx, MxScaleRule::RoundUp),
       variant_style(variant("V15"))},
  };
  return all;
}

Tensor outlier_activations(std::int64_t rows, std::int64_t channels, double share, double factor, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor x = Tensor::empty({rows, channels});
  std::span<float> values(x.data<float>(), static_cast<std::size_t>(x.numel()));
  for (float& v : values) v = normal(random);
  std::vector<std::int64_t> order(static_cast<std::size_t>(channels));
  for (std::int64_t c = 0; c < channels; ++c) order[static_cast<std::size_t>(c)] = c;
  std::shuffle(order.begin(), order.end(), random);
  const auto outliers = static_cast<std::size_t>(
      share > 0 ? std::max<double>(1, std::round(share * static_cast<double>(channels))) : 0);
  for (std::size_t i = 0; i < outliers; ++i)
    for (std::int64_t r = 0; r < rows; ++r) values[static_cast<std::size_t>(r * channels + order[i])] *= factor;
  return x;
}

double channel_outlier_ratio(const Tensor& x) {
  const Tensor values = x.to(DType::F32);
  const std::int64_t rows = values.size(0), channels = values.size(1);
  std::vector<float> amax(static_cast<std::size_t>(channels), 0.0f);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < channels; ++c)
      amax[static_cast<std::size_t>(c)] = std::max(amax[static_cast<std::size_t>(c)],
                                                   std::fabs(values.data<float>()[r * channels + c]));
  const float largest = *std::max_element(amax.begin(), amax.end());
  std::nth_element(amax.begin(), amax.begin() + channels / 2, amax.end());
  const float median = amax[static_cast<std::size_t>(channels / 2)];
  return median > 0 ? largest / median : std::numeric_limits<double>::infinity();
}

E9Measure measure_scalings(const std::string& source, const Tensor& x) {
  E9Measure m{.source = source, .outlier_factor = channel_outlier_ratio(x)};
  for (const E9Scaling& scaling : e9_scalings()) m.effects.push_back(fp8_effect_of(x, Fp8Role::Input, scaling.options));
  return m;
}

}  // namespace mg::tools::repro
