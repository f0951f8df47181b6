// ScaleMonitor: what a training run wants to know about its GradScaler, and the policies beyond
// PyTorch's, kept off the path of a step.
//
// amp::GradScaler keeps its scale and each step's inf/NaN flag on the gradients' device, so that a
// GPU step never waits for it. A monitor reads them back around every update(): three reads of
// one-element tensors (the scale before and after the update, and the step's found_inf), each a
// host wait on a GPU, the first of which waits for the step itself (a run that prints its loss every
// step waits there anyway); the other two find the stream idle. It adds:
// - counters and the history of scales and skipped steps, for logs and plots;
// - which parameters had inf/NaN gradients at the last skipped step;
// - hysteresis (back off only after N consecutive overflowing steps, each one still skipped), a
//   floor and a cap for the scale: the scaler's own update backs off or grows, and the monitor puts
//   the scale back (GradScaler::set_scale) where the policy says it should not have moved;
// - the alarm when steps keep being skipped (the "loss scale collapses to 0" failure, whose cause
//   is almost always a NaN made by the model itself, not by the scaling).
//
//   amp::GradScaler scaler;
//   amp::ScaleMonitor monitor(scaler, {.collapse_patience = 100, .error_on_collapse = true});
//   ...  mg::backward(scaler.scale(loss));  scaler.step(optimizer);
//   monitor.update(&optimizer);   // scaler.update(), then read, police and record the step
//   fmt::print("scale {} skipped {}\n", monitor.history().back().scale, monitor.skipped_steps());
//
// With a disabled scaler the monitor records nothing (its update() is the scaler's, a no-op).
#pragma once

#include <cfloat>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"

namespace mg::amp {

struct ScaleMonitorOptions {
  double min_scale = 0.0;      // the backoff stops here; 0 means no floor (PyTorch)
  double max_scale = FLT_MAX;  // growth stops before passing this
  std::int64_t hysteresis = 1;           // consecutive overflowing steps before one backoff
  std::int64_t collapse_patience = 100;  // consecutive skipped steps that raise the alarm; 0: never
  bool error_on_collapse = false;        // the alarm throws mg::Error instead of warning
};

// One step: the scale it used and whether it was skipped.
struct ScaleRecord {
  double scale;
  bool skipped;
};

class ScaleMonitor {
 public:
  // Watches `scaler`, which must outlive the monitor.
  explicit ScaleMonitor(GradScaler& scaler, ScaleMonitorOptions options = {});

  // In place of scaler.update(): reads the scale the step used, calls scaler.update(), reads whether
  // the step was skipped, applies hysteresis, floor and cap, and records the step. On a skipped step
  // it lists which of `optimizer`'s gradients were not finite (none without an optimizer). Throws
  // the alarm's mg::Error (error_on_collapse) after the step is recorded.
  void update(const optim::Optimizer* optimizer = nullptr);

  std::int64_t steps() const { return steps_; }  // update() calls with the scaler enabled
  std::int64_t skipped_steps() const { return skipped_steps_; }
  std::int64_t consecutive_skips() const { return consecutive_skips_; }
  std::int64_t last_overflow_step() const { return last_overflow_step_; }  // index of the last skip; -1: none
  const std::vector<ScaleRecord>& history() const { return history_; }  // one record per step (16 bytes)
  // Indices (into optimizer.parameters()) of the gradients that were not finite at the last skipped step.
  const std::vector<std::size_t>& nonfinite_parameters() const { return nonfinite_parameters_; }
  const ScaleMonitorOptions& options() const { return options_; }

  // The counters and the policy (hysteresis with its streak, floor, cap) as 0-d f64 tensors, keys
  // disjoint from GradScaler's: a checkpoint stores both under "scaler." (train/checkpoint.h), as
  // the GradScaler alone did before issue 17. The alarm's settings are the constructor's. The
  // history is not state: a resumed run's history starts at the resume.
  StateDict state_dict() const;
  // Validates every key and value before changing anything.
  void load_state_dict(const StateDict& state);
  static const std::set<std::string>& state_dict_keys();

 private:
  GradScaler& scaler_;
  ScaleMonitorOptions options_;
  std::int64_t steps_ = 0;
  std::int64_t skipped_steps_ = 0;
  std::int64_t consecutive_skips_ = 0;
  std::int64_t last_overflow_step_ = -1;
  std::int64_t overflow_streak_ = 0;  // consecutive overflows not yet answered by a backoff
  bool warned_collapse_ = false;
  std::vector<ScaleRecord> history_;
  std::vector<std::size_t> nonfinite_parameters_;
};

}  // namespace mg::amp
