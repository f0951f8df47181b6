// GradScaler: dynamic loss scaling (the paper's section 3.2), with PyTorch's semantics.
//
// f16 gradients below 2^-24 become zero. Multiplying the loss by a scale S shifts every gradient
// up by S (the chain rule is linear), so small gradients survive backward in f16; before the
// optimizer sees them they are divided by S again, in f32. S is chosen dynamically: start high
// (2^16), halve it and skip the step whenever a gradient overflows to inf or NaN, double it after
// 2000 steps without overflow.
//
//   amp::GradScaler scaler;                      // PyTorch's defaults
//   for (...) {
//     optimizer.zero_grad();
//     Tensor loss = ...forward under Autocast...;
//     mg::backward(scaler.scale(loss));          // loss * S
//     scaler.unscale_(optimizer);                // optional: true gradients, e.g. for clipping
//     scaler.step(optimizer);                    // unscale if not done; skip if any inf/NaN
//     scaler.update();                           // back off or grow S
//   }
//
// Guarantees:
// - A skipped step does not call optimizer.step(): weights, moments, step counters and the
//   learning-rate schedule (a function of the step count) stay bit-identical.
// - Unscaling and the inf/NaN check are one fused pass over all gradients (kernels/amp.h); the
//   inverse scale 1/S is computed in f64. The scale only grows while it stays <= max_scale
//   (default: the largest f32), so it never becomes inf.
// - A disabled scaler (enabled = false) is transparent: scale() returns the loss, step() is a plain
//   optimizer.step(), update() does nothing.
// Beyond PyTorch: a floor and a cap (min_scale, max_scale); hysteresis (back off only after N
// consecutive overflowing steps; every one of them is still skipped); an alarm when steps keep
// being skipped (the "loss scale collapses to 0" failure, whose cause is almost always a NaN made
// by the model itself, not by the scaling); counters and the scale history for logging; a static
// mode with the paper's constant S; the list of parameters whose gradients were not finite.
// bf16 has f32's range and needs no scaling: using a scaler with bf16 warns once.
#pragma once

#include <cfloat>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/state_dict.h"
#include "core/tensor.h"
#include "optim/optimizer.h"

namespace mg::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;  // consecutive clean steps before the scale grows
  bool enabled = true;
  bool dynamic = true;  // false: the scale stays init_scale (the paper's constant S); steps with inf/NaN are still skipped
  double min_scale = 0.0;      // the backoff stops here; 0 means no floor (PyTorch)
  double max_scale = FLT_MAX;  // growth stops before passing this
  std::int64_t hysteresis = 1;            // consecutive overflowing steps before one backoff
  std::int64_t collapse_patience = 100;   // consecutive skipped steps that raise the alarm; 0: never
  bool error_on_collapse = false;         // the alarm throws mg::Error instead of warning
};

// One update(): the scale the step used and whether it was skipped.
struct ScaleRecord {
  double scale;
  bool skipped;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale, in the loss's dtype (under autocast the loss is f32). Unchanged when disabled.
  Tensor scale(const Tensor& loss);
  // Divides the optimizer's gradients by the scale, in place (or into its f32 master gradients),
  // and records whether any is inf or NaN. At most once per optimizer between update()s, and not
  // after step().
  void unscale_(optim::Optimizer& optimizer);
  // Unscales (unless unscale_ ran) and calls optimizer.step() if every gradient was finite.
  // Returns whether it stepped. At most once per optimizer between update()s.
  bool step(optim::Optimizer& optimizer);
  // Adjusts the scale from this step's checks (all optimizers together) and advances the counters.
  void update();

  // The current scale; 1.0 when the scaler is disabled (as PyTorch's get_scale).
  double get_scale() const { return options_.enabled ? scale_ : 1.0; }
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // ---- counters and history, for logging
  std::int64_t steps() const { return steps_; }                  // update() calls
  std::int64_t skipped_steps() const { return skipped_steps_; }
  std::int64_t last_overflow_step() const { return last_overflow_step_; }  // index of the last skip; -1: none
  std::int64_t growth_tracker() const { return growth_tracker_; }  // clean steps since the last change
  const std::vector<ScaleRecord>& history() const { return history_; }  // one record per step (16 bytes)
  // Indices (into optimizer.parameters()) of the gradients that were not finite, for the last
  // optimizer whose step was skipped.
  const std::vector<std::size_t>& nonfinite_parameters() const { return nonfinite_parameters_; }

  // Everything needed to resume, as 0-d f64 tensors like every other state (core/state_dict.h): the
  // scale, the trackers, the counters and the scaling options (factors, interval, hysteresis, floor,
  // cap, dynamic, enabled). The collapse alarm's settings are the constructor's, not the checkpoint's.
  StateDict state_dict() const;
  // Validates every key and value before changing anything.
  void load_state_dict(const StateDict& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    Tensor found_inf;  // one f32 element: 1 if a gradient was inf or NaN
  };
  void warn_if_bf16(DType dtype);

  GradScalerOptions options_;
  double scale_;
  std::int64_t growth_tracker_ = 0;
  std::int64_t overflow_streak_ = 0;     // consecutive overflows not yet answered by a backoff
  std::int64_t consecutive_skips_ = 0;
  std::int64_t steps_ = 0;
  std::int64_t skipped_steps_ = 0;
  std::int64_t last_overflow_step_ = -1;
  bool warned_bf16_ = false;
  bool warned_f16_loss_ = false;
  bool warned_collapse_ = false;
  std::vector<ScaleRecord> history_;
  std::vector<std::size_t> nonfinite_parameters_;
  std::unordered_map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace mg::amp
