#include "amp/scale_state.h"

#include <cfloat>
#include <cmath>
#include <map>

namespace mg::amp {

void check_scaler_options(const GradScalerOptions& o, std::string_view owner) {
  kernels::check_rule(o.rule, owner);
  MG_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0.0 && o.init_scale <= FLT_MAX,
           "{}: init_scale must be finite and > 0 (an f32), got {}", owner, o.init_scale);
  // A floored scale is min_scale rounded to f32, which may lie just below it.
  MG_CHECK(!o.enabled || (o.init_scale >= static_cast<float>(o.rule.min_scale) && o.init_scale <= o.rule.max_scale),
           "{}: init_scale {} lies outside [min_scale, max_scale] = [{}, {}]", owner, o.init_scale, o.rule.min_scale,
           o.rule.max_scale);
}

void check_scale_state(const ScaleState& s, std::string_view owner) {
  check_scaler_options(s.options, owner);
  MG_CHECK(s.growth_tracker >= 0 && s.growth_tracker < s.options.rule.growth_interval && s.overflow_streak >= 0 &&
               s.overflow_streak < s.options.rule.hysteresis,
           "{}: inconsistent counters (growth_tracker {} must be below growth_interval {}, overflow_streak {} below "
           "hysteresis {})",
           owner, s.growth_tracker, s.options.rule.growth_interval, s.overflow_streak, s.options.rule.hysteresis);
  if (!s.counters) return;
  const ScaleCounters& c = *s.counters;
  MG_CHECK(c.skipped_steps >= 0 && c.consecutive_skips >= 0 && c.skipped_steps <= c.steps &&
               c.consecutive_skips <= c.skipped_steps && c.last_overflow_step >= -1 && c.last_overflow_step < c.steps,
           "{}: inconsistent counters (steps {}, skipped_steps {}, consecutive_skips {}, last_overflow_step {})", owner,
           c.steps, c.skipped_steps, c.consecutive_skips, c.last_overflow_step);
}

StateDict scale_state_dict(const ScaleState& s) {
  const ScaleRule& rule = s.options.rule;
  std::map<std::string, double> numbers{{"scale", s.options.init_scale},
                                        {"growth_tracker", static_cast<double>(s.growth_tracker)},
                                        {"overflow_streak", static_cast<double>(s.overflow_streak)},
                                        {"growth_factor", rule.growth_factor},
                                        {"backoff_factor", rule.backoff_factor},
                                        {"growth_interval", static_cast<double>(rule.growth_interval)},
                                        {"hysteresis", static_cast<double>(rule.hysteresis)},
                                        {"min_scale", rule.min_scale},
                                        {"max_scale", rule.max_scale},
                                        {"dynamic", s.options.dynamic ? 1.0 : 0.0},
                                        {"enabled", s.options.enabled ? 1.0 : 0.0}};
  if (s.counters)
    numbers.merge(
        std::map<std::string, double>{{"steps", static_cast<double>(s.counters->steps)},
                                      {"skipped_steps", static_cast<double>(s.counters->skipped_steps)},
                                      {"consecutive_skips", static_cast<double>(s.counters->consecutive_skips)},
                                      {"last_overflow_step", static_cast<double>(s.counters->last_overflow_step)}});
  return state_scalars(numbers);
}

ScaleState read_scale_state(const StateDict& state, bool with_counters, const std::string& owner) {
  StateDict complete = state;  // a state without the limits (an older file): PyTorch's rule, none
  if (!state.contains("hysteresis"))
    complete.merge(
        state_scalars({{"hysteresis", 1}, {"min_scale", 0}, {"max_scale", FLT_MAX}, {"overflow_streak", 0}}));
  std::set<std::string> keys{"scale",          "growth_tracker",  "overflow_streak", "growth_factor",
                             "backoff_factor", "growth_interval", "hysteresis",      "min_scale",
                             "max_scale",      "dynamic",         "enabled"};
  if (with_counters) keys.insert(scale_counter_keys().begin(), scale_counter_keys().end());
  const std::map<std::string, double> saved = state_numbers(complete, keys, owner);
  auto whole = [&](const char* key) { return state_whole_number(complete, key, owner, 0, INT32_MAX); };
  ScaleState s{.options = {.init_scale = saved.at("scale"),
                           .rule = {.growth_factor = saved.at("growth_factor"),
                                    .backoff_factor = saved.at("backoff_factor"),
                                    .growth_interval = whole("growth_interval"),
                                    .hysteresis = whole("hysteresis"),
                                    .min_scale = saved.at("min_scale"),
                                    .max_scale = saved.at("max_scale")},
                           .enabled = saved.at("enabled") != 0.0,
                           .dynamic = saved.at("dynamic") != 0.0},
               .growth_tracker = whole("growth_tracker"),
               .overflow_streak = whole("overflow_streak"),
               .counters = std::nullopt};
  if (with_counters) {
    const std::int64_t most = (std::int64_t{1} << 53);  // the last whole number an f64 holds exactly
    auto count = [&](const char* key) { return state_whole_number(complete, key, owner, -1, most); };
    s.counters = ScaleCounters{count("steps"), count("skipped_steps"), count("consecutive_skips"),
                               count("last_overflow_step")};
  }
  check_scale_state(s, owner);
  return s;
}

const std::set<std::string>& scale_counter_keys() {
  static const std::set<std::string> keys{"steps", "skipped_steps", "consecutive_skips", "last_overflow_step"};
  return keys;
}

}  // namespace mg::amp
