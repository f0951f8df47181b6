#include "amp/scale_monitor.h"

#include <algorithm>
#include <cmath>

#include "amp/diagnostics.h"
#include "autograd/ops.h"
#include "core/warning.h"

namespace mg::amp {

namespace {

constexpr const char* kMonitorName = "amp::ScaleMonitor";

void check_options(const ScaleMonitorOptions& o) {
  MG_CHECK(o.collapse_patience >= 0, "{}: collapse_patience must be >= 0 (0 turns the alarm off), got {}", kMonitorName,
           o.collapse_patience);
}

}  // namespace

ScaleMonitor::ScaleMonitor(GradScaler& scaler, ScaleMonitorOptions options) : scaler_(scaler), options_(options) {
  check_options(options_);
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
    ++counters_.skipped_steps;
    ++counters_.consecutive_skips;
    counters_.last_overflow_step = counters_.steps;
    if (optimizer) nonfinite_parameters_ = nonfinite_gradients(optimizer->parameters());
  } else {
    counters_.consecutive_skips = 0;
    warned_collapse_ = false;
  }
  ++counters_.steps;

  if (options_.collapse_patience == 0 || counters_.consecutive_skips < options_.collapse_patience || warned_collapse_)
    return;
  warned_collapse_ = true;
  std::string message = fmt::format(
      "amp::GradScaler: the last {} steps all had inf/NaN gradients and were skipped; the last one used the "
      "scale {}{}. When overflows persist as the scale shrinks, the inf/NaN comes from the model itself (a NaN in "
      "the data or the forward pass, a learning rate that diverged), not from the scaling: run a step under "
      "amp::OverflowDetector to find the first op that produced it.",
      counters_.consecutive_skips, scale,
      scale <= static_cast<float>(scaler_.options().rule.min_scale) ? " (its floor, min_scale)" : "");
  if (options_.error_on_collapse) throw Error(message);
  warn(message);
}

StateDict ScaleMonitor::state_dict() const {
  ScaleState state = scaler_.state();
  state.counters = counters_;
  return scale_state_dict(state);
}

void ScaleMonitor::load_state_dict(const StateDict& state) {
  const ScaleState read = read_scale_state(state, true, std::string(kMonitorName) + "::load_state_dict");
  scaler_.load_state(read);
  counters_ = *read.counters;
}

}  // namespace mg::amp
