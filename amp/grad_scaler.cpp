#include "amp/grad_scaler.h"

#include <cmath>

#include "autograd/autocast.h"
#include "amp/diagnostics.h"
#include "autograd/ops.h"
#include "core/factory.h"
#include "core/warning.h"

namespace mg::amp {

namespace {

void check_options(const GradScalerOptions& o) {
  const char* op = "amp::GradScaler";
  MG_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0.0, "{}: init_scale must be finite and > 0, got {}", op,
           o.init_scale);
  MG_CHECK(o.growth_factor > 1.0 && std::isfinite(o.growth_factor), "{}: growth_factor must be > 1, got {}", op,
           o.growth_factor);
  MG_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0, "{}: backoff_factor must be in (0, 1), got {}", op,
           o.backoff_factor);
  MG_CHECK(o.growth_interval >= 1, "{}: growth_interval must be >= 1, got {}", op, o.growth_interval);
  MG_CHECK(o.hysteresis >= 1, "{}: hysteresis must be >= 1 (1 backs off at every overflow), got {}", op, o.hysteresis);
  MG_CHECK(o.collapse_patience >= 0, "{}: collapse_patience must be >= 0 (0 turns the alarm off), got {}", op,
           o.collapse_patience);
  MG_CHECK(o.min_scale >= 0.0 && o.max_scale >= o.min_scale && o.max_scale <= FLT_MAX,
           "{}: need 0 <= min_scale ({}) <= max_scale ({}) <= the largest f32", op, o.min_scale, o.max_scale);
  MG_CHECK(o.init_scale >= o.min_scale && o.init_scale <= o.max_scale,
           "{}: init_scale {} lies outside [min_scale, max_scale] = [{}, {}]", op, o.init_scale, o.min_scale,
           o.max_scale);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  check_options(options_);
}

void GradScaler::warn_if_bf16(DType dtype) {
  if (dtype != DType::BF16 || warned_bf16_) return;
  warned_bf16_ = true;
  warn("amp::GradScaler is used with bf16, which has f32's exponent range: its gradients do not underflow "
       "and need no loss scaling. The mixed_bfloat16 recipe uses no scaler; construct it with "
       "{.enabled = false} (or drop it) to skip the extra passes.");
}

Tensor GradScaler::scale(const Tensor& loss) {
  MG_CHECK(loss.defined(), "amp::GradScaler::scale: the loss is undefined");
  if (!options_.enabled) return loss;
  warn_if_bf16(loss.dtype());
  warn_if_bf16(last_autocast_dtype());  // the forward ran in a bf16 region (scale() usually runs after it)
  if (loss.dtype() == DType::F16 && scale_ > 65504.0 && !warned_f16_loss_) {
    warned_f16_loss_ = true;
    warn(fmt::format("amp::GradScaler::scale: the loss is f16 and the scale {} does not fit in f16 (max 65504), so "
                     "the loss's own gradient is inf and steps are skipped until the scale backs off below it. "
                     "Compute the loss inside the autocast region (losses are on the f32 list), or cast it to f32",
                     scale_));
  }
  return mul(loss, scale_);
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  auto existing = per_optimizer_.find(&optimizer);
  const Stage stage = existing == per_optimizer_.end() ? Stage::Ready : existing->second.stage;
  MG_CHECK(stage != Stage::Unscaled, "amp::GradScaler::unscale_: already called for {} since the last "
           "update(); call it at most once per step, between backward and step()", optimizer.name());
  MG_CHECK(stage != Stage::Stepped, "amp::GradScaler::unscale_: called after step() for {}; unscale_ must come "
           "before step() (step unscales by itself when unscale_ was not called)", optimizer.name());
  for (const Tensor& p : optimizer.parameters())
    if (p.grad().defined()) warn_if_bf16(p.grad().dtype());
  // Recorded only once the pass succeeded, so a failed unscale_ leaves the scaler as it was.
  PerOptimizer state{Stage::Unscaled, zeros({}, {.dtype = DType::F32, .device = optimizer.parameters()[0].device()})};
  optimizer.unscale_gradients(1.0 / scale_, state.found_inf);  // 1/S in f64
  per_optimizer_[&optimizer] = std::move(state);
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  auto existing = per_optimizer_.find(&optimizer);
  MG_CHECK(existing == per_optimizer_.end() || existing->second.stage != Stage::Stepped, "amp::GradScaler::step: "
           "already called for {} since the last update(); call update() once per iteration, after step()",
           optimizer.name());
  if (existing == per_optimizer_.end()) unscale_(optimizer);
  PerOptimizer& state = per_optimizer_.at(&optimizer);
  const bool finite = state.found_inf.item() == 0.0;  // the host decides: on a GPU, a wait for the unscale
  if (finite) optimizer.step();
  else nonfinite_parameters_ = nonfinite_gradients(optimizer.parameters());
  state.stage = Stage::Stepped;
  return finite;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  MG_CHECK(!per_optimizer_.empty(), "amp::GradScaler::update: no inf/NaN checks were recorded since the last "
           "update(); call step(optimizer) (or unscale_) before update()");
  bool found_inf = false;
  for (const auto& [optimizer, state] : per_optimizer_) found_inf = found_inf || state.found_inf.item() != 0.0;
  per_optimizer_.clear();
  history_.push_back({scale_, found_inf});

  if (found_inf) {
    ++skipped_steps_;
    ++consecutive_skips_;
    last_overflow_step_ = steps_;
    growth_tracker_ = 0;
    if (options_.dynamic && ++overflow_streak_ >= options_.hysteresis) {
      scale_ = std::max(scale_ * options_.backoff_factor, options_.min_scale);
      overflow_streak_ = 0;
    }
  } else {
    consecutive_skips_ = 0;
    overflow_streak_ = 0;
    warned_collapse_ = false;
    if (options_.dynamic && ++growth_tracker_ == options_.growth_interval) {
      const double grown = scale_ * options_.growth_factor;
      if (grown <= options_.max_scale) scale_ = grown;  // never past the cap, so never inf
      growth_tracker_ = 0;
    }
  }
  ++steps_;

  if (options_.collapse_patience > 0 && consecutive_skips_ >= options_.collapse_patience && !warned_collapse_) {
    warned_collapse_ = true;
    const bool at_floor = options_.min_scale > 0.0 && scale_ == options_.min_scale;
    std::string message = fmt::format(
        "amp::GradScaler: the last {} steps all had inf/NaN gradients and were skipped; the scale is now {}{}. "
        "When overflows persist as the scale shrinks, the inf/NaN comes from the model itself (a NaN in the data "
        "or the forward pass, a learning rate that diverged), not from the scaling: run a step under "
        "amp::OverflowDetector to find the first op that produced it.",
        consecutive_skips_, scale_, at_floor ? " (its floor, min_scale)" : "");
    if (options_.error_on_collapse) throw Error(message);
    warn(message);
  }
}

namespace {

// The scaler's state as plain numbers, the form load_state_dict checks.
using Numbers = std::map<std::string, double>;

}  // namespace

StateDict GradScaler::state_dict() const {
  const Numbers numbers{{"scale", scale_},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", static_cast<double>(options_.growth_interval)},
          {"growth_tracker", static_cast<double>(growth_tracker_)},
          {"hysteresis", static_cast<double>(options_.hysteresis)},
          {"overflow_streak", static_cast<double>(overflow_streak_)},
          {"min_scale", options_.min_scale},
          {"max_scale", options_.max_scale},
          {"dynamic", options_.dynamic ? 1.0 : 0.0},
          {"enabled", options_.enabled ? 1.0 : 0.0},
          {"steps", static_cast<double>(steps_)},
          {"skipped_steps", static_cast<double>(skipped_steps_)},
          {"consecutive_skips", static_cast<double>(consecutive_skips_)},
          {"last_overflow_step", static_cast<double>(last_overflow_step_)}};
  StateDict state;
  for (const auto& [key, value] : numbers) state[key] = state_scalar(value);
  return state;
}

void GradScaler::load_state_dict(const StateDict& tensors) {
  const char* owner = "amp::GradScaler::load_state_dict";
  const StateDict expected = state_dict();
  for (const auto& [key, value] : tensors)
    MG_CHECK(expected.contains(key), "{}: unknown key '{}' (expected the keys of GradScaler::state_dict())", owner, key);
  Numbers state;
  for (const auto& [key, value] : expected) {
    MG_CHECK(tensors.contains(key), "{}: key '{}' is missing", owner, key);
    state[key] = state_value(tensors, key, owner);
  }
  auto count = [&](const char* key) {
    const double value = state.at(key);
    MG_CHECK(value == std::floor(value) && value >= -1.0 && value < 9.0e15,
             "amp::GradScaler::load_state_dict: '{}' must be a whole number, got {}", key, value);
    return static_cast<std::int64_t>(value);
  };
  GradScalerOptions options = options_;
  options.init_scale = state.at("scale");
  options.growth_factor = state.at("growth_factor");
  options.backoff_factor = state.at("backoff_factor");
  options.growth_interval = count("growth_interval");
  options.hysteresis = count("hysteresis");
  options.min_scale = state.at("min_scale");
  options.max_scale = state.at("max_scale");
  options.dynamic = state.at("dynamic") != 0.0;
  options.enabled = state.at("enabled") != 0.0;
  check_options(options);
  const std::int64_t growth_tracker = count("growth_tracker"), overflow_streak = count("overflow_streak");
  const std::int64_t steps = count("steps"), skipped = count("skipped_steps"), consecutive = count("consecutive_skips");
  const std::int64_t last_overflow = count("last_overflow_step");
  MG_CHECK(growth_tracker >= 0 && growth_tracker < options.growth_interval && overflow_streak >= 0 &&
               overflow_streak < options.hysteresis && skipped >= 0 && consecutive >= 0 && skipped <= steps && consecutive <= skipped &&
               last_overflow < steps,
           "amp::GradScaler::load_state_dict: inconsistent counters (growth_tracker {}, overflow_streak {}, steps {}, "
           "skipped_steps {}, consecutive_skips {}, last_overflow_step {})", growth_tracker, overflow_streak, steps,
           skipped, consecutive, last_overflow);
  options_ = options;
  scale_ = options.init_scale;
  growth_tracker_ = growth_tracker;
  overflow_streak_ = overflow_streak;
  steps_ = steps;
  skipped_steps_ = skipped;
  consecutive_skips_ = consecutive;
  last_overflow_step_ = last_overflow;
  per_optimizer_.clear();
}

}  // namespace mg::amp
