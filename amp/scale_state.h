// The state of loss scaling as one record and one state dict: the GradScaler's scale, counters and
// rule, and, when a ScaleMonitor watches it, the monitor's counters. A checkpoint stores it under
// "scaler." (train/checkpoint.h); GradScaler::state_dict() writes it without the monitor's counters,
// ScaleMonitor::state_dict() with them.
//
//   key                  from                                  checked on reading
//   scale                the scale now (options.init_scale)    finite, > 0, within [min_scale, max_scale]
//   growth_tracker       clean steps since the scale changed   whole, below growth_interval
//   overflow_streak      overflows since the last backoff      whole, below hysteresis
//   growth_factor, backoff_factor, growth_interval, hysteresis, min_scale, max_scale
//                        the rule (kernels::ScaleRule)         kernels::check_rule
//   dynamic, enabled     the options                           0 or not 0
//   steps, skipped_steps, consecutive_skips, last_overflow_step
//                        the monitor's counters                whole, consistent with each other
//
// Every number is a 0-d f64 tensor. A state without the rule's limits (hysteresis, min_scale,
// max_scale, overflow_streak: a file from before the scaler held them) reads as PyTorch's rule, none.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "amp/grad_scaler.h"
#include "core/state_dict.h"

namespace mg::amp {

// What a ScaleMonitor (amp/scale_monitor.h) counts.
struct ScaleCounters {
  std::int64_t steps = 0;  // steps recorded with the scaler enabled
  std::int64_t skipped_steps = 0;
  std::int64_t consecutive_skips = 0;
  std::int64_t last_overflow_step = -1;  // index of the last skipped step; -1: none
};

struct ScaleState {
  GradScalerOptions options;  // options.init_scale is the scale now
  std::int64_t growth_tracker = 0;
  std::int64_t overflow_streak = 0;
  std::optional<ScaleCounters> counters;  // the monitor's; none for a scaler alone
};

// An mg::Error naming `owner` unless the options are usable: the rule passes kernels::check_rule,
// and init_scale is a finite f32 > 0 within [min_scale, max_scale] (when enabled).
void check_scaler_options(const GradScalerOptions& options, std::string_view owner);
// The same for a whole state, counters included.
void check_scale_state(const ScaleState& state, std::string_view owner);

StateDict scale_state_dict(const ScaleState& state);
// The record back from a state dict whose keys are exactly those above (the monitor's counters
// only when `with_counters`), every value checked: an mg::Error naming `owner` and the entry.
ScaleState read_scale_state(const StateDict& state, bool with_counters, const std::string& owner);
const std::set<std::string>& scale_counter_keys();  // the monitor's four keys

}  // namespace mg::amp
