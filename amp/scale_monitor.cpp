#include "amp/scale_monitor.h"

#include <algorithm>
#include <cmath>

#include "amp/diagnostics.h"
#include "autograd/ops.h"
#include "core/warning.h"

namespace mg::amp {

namespace {

constexpr const char* kName = "amp::ScaleMonitor";

void check_options(const ScaleMonitorOptions& o) {
  MG_CHECK(o.hysteresis >= 1, "{}: hysteresis must be >= 1 (1 backs off at every overflow), got {}", kName,
           o.hysteresis);
  MG_CHECK(o.collapse_patience >= 0, "{}: collapse_patience must be >= 0 (0 turns the alarm off), got {}", kName,
           o.collapse_patience);
  MG_CHECK(o.min_scale >= 0.0 && o.max_scale >= o.min_scale && o.max_scale <= FLT_MAX,
           "{}: need 0 <= min_scale ({}) <= max_scale ({}) <= the largest f32", kName, o.min_scale, o.max_scale);
}

}  // namespace

ScaleMonitor::ScaleMonitor(GradScaler& scaler, ScaleMonitorOptions options) : scaler_(scaler), options_(options) {
  check_options(options_);
  const double scale = scaler.options().init_scale;
  MG_CHECK(!scaler.is_enabled() || (scale >= options_.min_scale && scale <= options_.max_scale),
           "{}: the scaler's init_scale {} lies outside [min_scale, max_scale] = [{}, {}]", kName, scale,
           options_.min_scale, options_.max_scale);
  scaler_.set_limits(options_.hysteresis, options_.min_scale, options_.max_scale);
}

void ScaleMonitor::update(const optim::Optimizer* optimizer) {
  scaler_.update();
  if (!scaler_.is_enabled()) return;
  NoGradGuard no_grad;
  const std::vector<double> step = stack({scaler_.last_scale(), scaler_.last_found_inf()}, 0).to_vector<double>();
  record(step[0], step[1] != 0.0, optimizer);
}

void ScaleMonitor::record(double scale, bool skipped, const optim::Optimizer* optimizer) {
  if (!scaler_.is_enabled()) return;
  history_.push_back({scale, skipped});
  if (skipped) {
    ++skipped_steps_;
    ++consecutive_skips_;
    last_overflow_step_ = steps_;
    if (optimizer) nonfinite_parameters_ = nonfinite_gradients(optimizer->parameters());
  } else {
    consecutive_skips_ = 0;
    warned_collapse_ = false;
  }
  ++steps_;

  if (options_.collapse_patience == 0 || consecutive_skips_ < options_.collapse_patience || warned_collapse_) return;
  warned_collapse_ = true;
  std::string message = fmt::format(
      "amp::GradScaler: the last {} steps all had inf/NaN gradients and were skipped; the last one used the "
      "scale {}{}. When overflows persist as the scale shrinks, the inf/NaN comes from the model itself (a NaN in "
      "the data or the forward pass, a learning rate that diverged), not from the scaling: run a step under "
      "amp::OverflowDetector to find the first op that produced it.",
      consecutive_skips_, scale,
      options_.min_scale > 0.0 && scale <= options_.min_scale ? " (its floor, min_scale)" : "");
  if (options_.error_on_collapse) throw Error(message);
  warn(message);
}

StateDict ScaleMonitor::state_dict() const {
  return state_scalars({{"steps", static_cast<double>(steps_)},
                        {"skipped_steps", static_cast<double>(skipped_steps_)},
                        {"consecutive_skips", static_cast<double>(consecutive_skips_)},
                        {"last_overflow_step", static_cast<double>(last_overflow_step_)},
                        {"overflow_streak", static_cast<double>(scaler_.overflow_streak())},
                        {"hysteresis", static_cast<double>(options_.hysteresis)},
                        {"min_scale", options_.min_scale},
                        {"max_scale", options_.max_scale}});
}

void ScaleMonitor::load_state_dict(const StateDict& state) {
  const std::string owner = std::string(kName) + "::load_state_dict";
  const std::map<std::string, double> saved = state_numbers(state, state_dict_keys(), owner);
  auto count = [&](const char* key) {  // -1 for last_overflow_step: none yet
    const double value = saved.at(key);
    MG_CHECK(value == std::floor(value) && value >= -1.0 && value < 9.0e15, "{}: '{}' must be a whole number, got {}",
             owner, key, value);
    return static_cast<std::int64_t>(value);
  };
  ScaleMonitorOptions options = options_;
  options.hysteresis = count("hysteresis");
  options.min_scale = saved.at("min_scale");
  options.max_scale = saved.at("max_scale");
  check_options(options);
  const std::int64_t steps = count("steps"), skipped = count("skipped_steps"), consecutive = count("consecutive_skips");
  const std::int64_t last_overflow = count("last_overflow_step"), streak = count("overflow_streak");
  MG_CHECK(streak >= 0 && streak < options.hysteresis && skipped >= 0 && consecutive >= 0 && skipped <= steps &&
               consecutive <= skipped && last_overflow < steps,
           "{}: inconsistent counters (overflow_streak {}, steps {}, skipped_steps {}, consecutive_skips {}, "
           "last_overflow_step {})",
           owner, streak, steps, skipped, consecutive, last_overflow);
  options_ = options;
  scaler_.set_limits(options.hysteresis, options.min_scale, options.max_scale);
  scaler_.set_overflow_streak(streak);
  steps_ = steps;
  skipped_steps_ = skipped;
  consecutive_skips_ = consecutive;
  last_overflow_step_ = last_overflow;
}

const std::set<std::string>& ScaleMonitor::state_dict_keys() {
  static const std::set<std::string> keys{"steps",           "skipped_steps", "consecutive_skips", "last_overflow_step",
                                          "overflow_streak", "hysteresis",    "min_scale",         "max_scale"};
  return keys;
}

}  // namespace mg::amp
