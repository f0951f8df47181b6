// GradScaler: dynamic loss scaling (the paper's section 3.2), with PyTorch's semantics.
//
// f16 gradients below 2^-24 become zero. Multiplying the loss by a scale S shifts every gradient
// up by S (the chain rule is linear), so small gradients survive backward in f16; before the
// optimizer uses them they are divided by S again, in f32. S is chosen dynamically: start high
// (2^16), halve it and skip the step whenever a gradient overflows to inf or NaN, double it after
// 2000 steps without overflow.
//
//   amp::GradScaler scaler;                      // PyTorch's defaults
//   for (...) {
//     optimizer.zero_grad();
//     Tensor loss = ...forward under Autocast...;
//     mg::backward(scaler.scale(loss));          // loss * S
//     scaler.unscale_(optimizer);                // optional: true gradients, e.g. for clipping
//     scaler.step(optimizer);                    // skipped if any gradient is inf/NaN
//     scaler.update();                           // back off or grow S
//   }
//
// Where the numbers live: the scale S, the growth tracker and each step's found_inf flag are
// one-element tensors on the gradients' device, and the step decision is made there too: step()
// runs the inf/NaN check (kernels/amp.h) and hands 1/S and found_inf to optimizer.step(), whose
// fused kernels read the scaled gradients times 1/S and skip the update when found_inf is set
// (kernels/optim.h); update() is kernels::update_scale. So on a GPU a training step never waits for
// the scaler. Reading a number back (get_scale(), step()'s answer, state_dict()) is a wait, made
// only when asked.
//
// Guarantees:
// - A skipped step changes nothing: weights, masters, moments, step counters and the learning-rate
//   schedule (a function of the step count) stay bit-identical.
// - The check and the unscaling read every gradient once, in one fused pass; 1/S is 1.0f / S
//   (the f64 reciprocal rounded to f32). The scale only grows while the result is finite.
// - A disabled scaler (enabled = false) is transparent: scale() returns the loss, step() is a plain
//   optimizer.step(), update() does nothing.
// - bf16 has f32's range and needs no scaling: using a scaler with bf16 warns once.
// - In data-parallel training (set_process_group), found_inf is the max over the ranks before any
//   update reads it: one rank's inf skips the step on every rank, and the scales stay identical.
// - An error inside step() or update() (a failed allocation, a collective that failed) ends the
//   iteration for the scaler: every optimizer's check of this iteration is dropped and the scale
//   stays as it was; the next iteration (zero_grad, backward, step, update) starts clean.
// Hysteresis, a floor and a cap for the scale (the rule's limits) are applied by update() on the
// device too. amp::ScaleMonitor (amp/scale_monitor.h) keeps the alarm when the scale collapses and
// the history of scales and skipped steps, read back every few steps.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>

#include "core/state_dict.h"
#include "core/tensor.h"
#include "dist/process_group.h"
#include "kernels/amp.h"
#include "optim/optimizer.h"

namespace mg::amp {

struct ScaleState;  // amp/scale_state.h

// The rule update() applies (kernels/amp.h): PyTorch's growth, backoff and interval, and the
// hysteresis, floor and cap mixgrad adds; its defaults are PyTorch's.
using ScaleRule = kernels::ScaleRule;

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16; within [rule.min_scale, rule.max_scale]
  ScaleRule rule = {};  // x2 after 2000 clean steps, x0.5 at an overflow; no hysteresis, floor or cap
  bool enabled = true;
  bool dynamic =
      true;  // false: the scale stays init_scale (the paper's constant S); steps with inf/NaN are still skipped
};

// What step() returns: whether the optimizer's update was applied. Reading it (the conversion to
// bool) is what reads found_inf: on a GPU a wait, made only if somebody asks.
struct Stepped {
  Tensor found_inf;  // this step's flag; undefined: stepped without a check (a disabled scaler)
  operator bool() const { return !found_inf.defined() || found_inf.item() == 0.0; }
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale, in the loss's dtype (under autocast the loss is f32). Unchanged when disabled.
  Tensor scale(const Tensor& loss);
  // Divides the gradients the optimizer will read by the scale (in place, or into the f32 masters'
  // gradients) and records whether any is inf or NaN. At most once per optimizer between update()s,
  // and not after step().
  void unscale_(optim::Optimizer& optimizer);
  // Checks the gradients for inf/NaN (unless unscale_ did) and calls optimizer.step() with 1/S and
  // the flag, so that the update reads the gradients unscaled and is skipped, on the device, when a
  // gradient was not finite. At most once per optimizer between update()s.
  Stepped step(optim::Optimizer& optimizer);
  // Backs off or grows the scale from this step's flags (all optimizers together), on the device.
  void update();

  // The current scale, read from its device (a wait on a GPU); 1.0 when the scaler is disabled.
  double get_scale() const;
  // Replaces the scale; > 0 and finite.
  void set_scale(double scale);
  std::int64_t growth_tracker() const;  // clean steps since the scale last changed (a read)
  std::int64_t overflow_streak() const;  // overflows since the last backoff, short of rule.hysteresis (a read)
  // The scale the last update()'s step used (before that update): one f32 element on the device,
  // for a record of the step read later; undefined before the first update().
  const Tensor& last_scale() const { return last_scale_; }
  // The inf/NaN flag the last update() used (all optimizers together): 0 or 1, one f32 element on
  // the gradients' device; undefined before the first update().
  const Tensor& last_found_inf() const { return last_found_inf_; }
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }
  // Data-parallel training: from now on each found_inf is reduced (max) across `group`, on the
  // gradients' device, before the update reads it. Every rank must then call unscale_ and step
  // alike (they are collectives). Null: one process.
  void set_process_group(std::shared_ptr<dist::ProcessGroup> group) { group_ = std::move(group); }

  // Everything needed to resume (amp/scale_state.h): the scale, the growth tracker, the overflow
  // streak and the options, read from the device (a wait on a GPU). ScaleMonitor adds its counters.
  ScaleState state() const;
  // Resumes from a state, checked first (check_scale_state): a bad one changes nothing. Its monitor
  // counters, if any, are the monitor's.
  void load_state(const ScaleState& state);
  // The same as 0-d f64 tensors, like every other state (core/state_dict.h), without the monitor's
  // counters; every key and value is checked before anything changes.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    Tensor found_inf;  // one f32 element: 1 if a gradient was inf or NaN
  };
  // The optimizer's stage this iteration, after checking that `next` may follow it.
  Stage stage_of(const optim::Optimizer& optimizer, Stage next) const;
  void place_on(Device device);  // moves the scale and the tracker to the gradients' device
  Tensor inverse_scale() const;  // 1/S, one f32 element beside the scale
  void warn_if_bf16(DType dtype);
  void agree_across_ranks(Tensor& found_inf);  // the max over the process group's ranks

  std::shared_ptr<dist::ProcessGroup> group_;
  GradScalerOptions options_;
  Tensor scale_;  // f32 [], on the device of the loss it last scaled
  Tensor growth_tracker_;  // i32 [], beside it
  Tensor overflow_streak_;  // i32 [], beside it
  Tensor last_scale_;
  Tensor last_found_inf_;
  bool warned_bf16_ = false;
  bool warned_f16_loss_ = false;
  std::unordered_map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace mg::amp
