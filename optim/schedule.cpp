#include "optim/schedule.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace mg::optim {

namespace {

// Step counts come from Optimizer::step_count(), which starts at 0; a negative one is a caller's bug.
void check_step(std::int64_t step, const char* schedule) {
  MG_CHECK(step >= 0, "optim::{}: the step count must be >= 0, got {}", schedule, step);
}

}  // namespace

Schedule step_decay(std::int64_t step_size, double gamma) {
  MG_CHECK(step_size >= 1, "optim::step_decay: step_size must be >= 1 (steps between decays), got {}", step_size);
  MG_CHECK(std::isfinite(gamma) && gamma > 0.0,
           "optim::step_decay: gamma must be finite and > 0 (0.1 divides "
           "the rate by 10 every step_size steps), got {}",
           gamma);
  return [step_size, gamma](std::int64_t step) {
    check_step(step, "step_decay");
    return std::pow(gamma, static_cast<double>(step / step_size));
  };
}

Schedule cosine_decay(std::int64_t total_steps, double min_factor) {
  MG_CHECK(total_steps >= 1, "optim::cosine_decay: total_steps must be >= 1, got {}", total_steps);
  MG_CHECK(min_factor >= 0.0 && min_factor <= 1.0,
           "optim::cosine_decay: min_factor must be in [0, 1] (a fraction "
           "of each group's lr), got {}",
           min_factor);
  return [total_steps, min_factor](std::int64_t step) {
    check_step(step, "cosine_decay");
    if (step >= total_steps) return min_factor;
    const double progress = static_cast<double>(step) / static_cast<double>(total_steps);
    return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  };
}

Schedule linear_warmup(std::int64_t warmup_steps, Schedule then) {
  MG_CHECK(warmup_steps >= 1, "optim::linear_warmup: warmup_steps must be >= 1, got {}", warmup_steps);
  return [warmup_steps, then = std::move(then)](std::int64_t step) {
    check_step(step, "linear_warmup");
    if (step < warmup_steps) return static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
    return then ? then(step - warmup_steps) : 1.0;
  };
}

}  // namespace mg::optim
