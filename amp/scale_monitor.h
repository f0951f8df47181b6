// ScaleMonitor: what a training run wants to know about its GradScaler, kept off the path of a step.
//
// amp::GradScaler keeps its scale and each step's inf/NaN flag on the gradients' device, and applies
// its rule there (hysteresis, floor and cap included), so that a GPU step never waits for it. The
// monitor adds:
// - counters and the history of scales and skipped steps, for logs and plots, from the steps' numbers
//   once they are read back (record());
// - which parameters had inf/NaN gradients at the last skipped step;
// - the alarm when steps keep being skipped (the "loss scale collapses to 0" failure, whose cause
//   is almost always a NaN made by the model itself, not by the scaling).
//
// Two ways to feed it. A hand-written loop calls update() in place of scaler.update(): the update,
// then one read of the step's scale and flag (a wait on a GPU):
//
//   amp::GradScaler scaler({.rule = {.hysteresis = 2, .min_scale = 1}});
//   amp::ScaleMonitor monitor(scaler, {.collapse_patience = 100, .error_on_collapse = true});
//   ...  mg::backward(scaler.scale(loss));  scaler.step(optimizer);
//   monitor.update(&optimizer);   // scaler.update(), then read and record the step
//   fmt::print("scale {} skipped {}\n", monitor.history().back().scale, monitor.skipped_steps());
//
// train::Trainer, which must not wait, calls scaler.update() itself, keeps each step's
// scaler.last_scale() and last_found_inf() on the device, reads many steps at once, and hands each
// one to record().
//
// With a disabled scaler the monitor records nothing (its update() is the scaler's, a no-op).
#pragma once

#include <cstdint>
#include <vector>

#include "amp/grad_scaler.h"
#include "amp/scale_state.h"

namespace mg::amp {

struct ScaleMonitorOptions {
  std::int64_t collapse_patience = 100;  // consecutive skipped steps that raise the alarm; 0: never
  bool error_on_collapse = false;  // the alarm throws mg::Error instead of warning
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

  // In place of scaler.update(): calls it, then reads the scale the step used and whether it was
  // skipped (one transfer) and records them.
  void update(const optim::Optimizer* optimizer = nullptr);
  // Records one step of an enabled scaler: the scale it used and whether it was skipped. On a
  // skipped step it lists which of `optimizer`'s gradients are not finite (none without an
  // optimizer; they must still be that step's). Throws the alarm's mg::Error (error_on_collapse)
  // after the step is recorded.
  void record(double scale, bool skipped, const optim::Optimizer* optimizer = nullptr);

  std::int64_t steps() const { return counters_.steps; }  // update() calls with the scaler enabled
  std::int64_t skipped_steps() const { return counters_.skipped_steps; }
  std::int64_t consecutive_skips() const { return counters_.consecutive_skips; }
  std::int64_t last_overflow_step() const { return counters_.last_overflow_step; }  // the last skip; -1: none
  const std::vector<ScaleRecord>& history() const { return history_; }  // one record per step (16 bytes)
  // Indices (into optimizer.parameters()) of the gradients that were not finite at the last skipped step.
  const std::vector<std::size_t>& nonfinite_parameters() const { return nonfinite_parameters_; }
  const ScaleMonitorOptions& options() const { return options_; }

  GradScaler& scaler() const { return scaler_; }

  // One state dict for the scaler and its monitor (amp/scale_state.h): the scaler's state and the
  // counters; a checkpoint stores it under "scaler." (train/checkpoint.h). The alarm's settings are
  // the constructor's. The history is not state: a resumed run's history starts at the resume.
  StateDict state_dict() const;
  // Restores the scaler and the counters; validates every key and value before changing anything.
  void load_state_dict(const StateDict& state);

 private:
  GradScaler& scaler_;
  ScaleMonitorOptions options_;
  ScaleCounters counters_;
  bool warned_collapse_ = false;
  std::vector<ScaleRecord> history_;
  std::vector<std::size_t> nonfinite_parameters_;
};

}  // namespace mg::amp
