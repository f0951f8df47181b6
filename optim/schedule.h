// Learning-rate schedules: factors as functions of the optimizer's step count.
//
// A schedule maps step_count() (0 before the first step) to a factor; the step an optimizer takes
// at step count s uses lr * factor(s) for every parameter group. Because the step count only
// advances when a step is taken, a step the GradScaler skips advances no schedule. The factor
// functions here match PyTorch's schedulers stepped once per optimizer step:
//
//   step_decay(step_size, gamma)        gamma^floor(s / step_size)                          StepLR
//   cosine_decay(total_steps, min)      min + (1 - min) * (1 + cos(pi * s / total)) / 2,    CosineAnnealingLR
//                                       held at min once s >= total_steps                   (T_max = total_steps)
//   linear_warmup(warmup_steps, then)   (s + 1) / warmup_steps for s < warmup_steps,        LinearLR(1/W, 1, W-1)
//                                       then then(s - warmup_steps)                         + SequentialLR
//
// The warm-up's first step uses 1/W of the rate (not 0, which would waste a step), its last one
// (s = W - 1) the full rate, and `then` starts from its own step 0 at s = W. So warm-up and cosine
// decay over 1000 steps in all is linear_warmup(100, cosine_decay(900)).
//
//   optimizer.set_schedule(optim::linear_warmup(100, optim::cosine_decay(900, 0.1)));
//
// Bad arguments (a step size of 0, a negative gamma, min_factor outside [0, 1]) are an mg::Error
// when the schedule is made, not when it is first used. A schedule is not saved by state_dict():
// set the same one on the optimizer that loads the state, and it continues from the saved step count.
#pragma once

#include <cstdint>
#include <functional>

namespace mg::optim {

// factor(step): finite and >= 0 for every step >= 0.
using Schedule = std::function<double(std::int64_t step)>;

// Multiplies the rate by gamma (> 0) every step_size (>= 1) steps.
Schedule step_decay(std::int64_t step_size, double gamma);

// Half a cosine from 1 down to min_factor (in [0, 1]) over total_steps (>= 1), then min_factor.
// min_factor is relative to each group's lr (PyTorch's eta_min is absolute: eta_min = min_factor * lr).
Schedule cosine_decay(std::int64_t total_steps, double min_factor = 0.0);

// A linear ramp (s + 1) / warmup_steps over the first warmup_steps (>= 1) steps, then `then`
// shifted by warmup_steps. An empty `then` holds the factor at 1.
Schedule linear_warmup(std::int64_t warmup_steps, Schedule then = {});

}  // namespace mg::optim
