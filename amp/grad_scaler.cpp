#include "amp/grad_scaler.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <utility>

#include "amp/scale_state.h"
#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "core/factory.h"
#include "core/warning.h"
#include "kernels/amp.h"

namespace mg::amp {

namespace {

constexpr const char* kName = "amp::GradScaler";

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options),
      scale_(full({}, options.init_scale)),  // on the CPU until the first loss says where the gradients are
      growth_tracker_(zeros({}, {.dtype = DType::I32})),
      overflow_streak_(zeros({}, {.dtype = DType::I32})) {
  check_scaler_options(options_, kName);
}

Tensor GradScaler::scale(const Tensor& loss) {
  MG_CHECK(loss.defined(), "{}::scale: the loss is undefined", kName);
  if (!options_.enabled) return loss;
  warn_if_bf16(loss.dtype());
  warn_if_bf16(last_autocast_dtype());  // the forward ran in a bf16 region (scale() usually runs after it)
  if (loss.dtype() == DType::F16 && !warned_f16_loss_) {
    warned_f16_loss_ = true;
    warn(fmt::format("{}::scale: the loss is f16, which cannot carry a scale above 65504 (this one starts at {}): "
                     "the loss's own gradient is inf and steps are skipped until the scale backs off below it. "
                     "Compute the loss inside the autocast region (losses are on the f32 list), or cast it to f32",
                     kName, options_.init_scale));
  }
  place_on(loss.device());
  return mul(loss, loss.dtype() == DType::F32 ? scale_ : scale_.to(loss.dtype()));
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  stage_of(optimizer, Stage::Unscaled);
  const std::vector<Tensor>& parameters = optimizer.parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const Tensor& grad = parameters[i].grad();
    if (!grad.defined()) continue;
    warn_if_bf16(grad.dtype());
    MG_CHECK(grad.dtype() != DType::F16 || optimizer.master(i).defined(),
             "{}::unscale_: cannot unscale f16 gradients in place (parameter {} of {}): dividing them by the loss "
             "scale in f16 flushes the small ones to zero again. Keep f32 parameters (mixed_float16), or f32 masters "
             "({{.master_weights = true}}, float16_master) to unscale into",
             kName, i, optimizer.name());
  }
  try {
    place_on(parameters.front().device());
    Tensor found_inf = zeros({}, {.device = scale_.device()});
    optimizer.scale_gradients_(inverse_scale(), found_inf);
    agree_across_ranks(found_inf);
    per_optimizer_[&optimizer] = {Stage::Unscaled, found_inf};
  } catch (...) {
    per_optimizer_.clear();  // some gradients may be unscaled: the iteration ends here (see the header)
    throw;
  }
}

Stepped GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return {};
  }
  const Stage stage = stage_of(optimizer, Stage::Stepped);
  try {
    Tensor found_inf;
    if (stage == Stage::Unscaled) {
      found_inf = per_optimizer_.at(&optimizer).found_inf;
      optimizer.step({.found_inf = &found_inf});  // the gradients are unscaled already
    } else {
      // The check reads every gradient once; the update reads them again, times 1/S, in its own pass.
      place_on(optimizer.parameters().front().device());
      const Tensor inv_scale = inverse_scale();
      found_inf = zeros({}, {.device = scale_.device()});
      kernels::find_non_finite(optimizer.step_gradients(), inv_scale, found_inf);
      agree_across_ranks(found_inf);
      optimizer.step({.inv_scale = &inv_scale, .found_inf = &found_inf});
    }
    per_optimizer_[&optimizer] = {Stage::Stepped, found_inf};
    return {found_inf};
  } catch (...) {
    per_optimizer_.clear();  // some parameters may be updated: the iteration ends here (see the header)
    throw;
  }
}

void GradScaler::update() {
  if (!options_.enabled) return;
  MG_CHECK(!per_optimizer_.empty(),
           "{}::update: no inf/NaN checks were recorded since the last update(); call "
           "step(optimizer) (or unscale_) before update()",
           kName);
  NoGradGuard no_grad;
  // This iteration's checks are taken first, so that the next iteration starts clean whatever happens.
  const auto checks = std::exchange(per_optimizer_, {});
  Tensor found_inf;  // any optimizer's flag: their sum, on the device
  for (const auto& [optimizer, state] : checks)
    found_inf = found_inf.defined() ? add(found_inf, state.found_inf) : state.found_inf;
  Tensor used = clone(scale_);  // a copy on the device: the update below changes scale_ in place
  if (options_.dynamic) kernels::update_scale(scale_, growth_tracker_, overflow_streak_, found_inf, options_.rule);
  last_scale_ = std::move(used);
  last_found_inf_ = found_inf;
}

GradScaler::Stage GradScaler::stage_of(const optim::Optimizer& optimizer, Stage next) const {
  auto it = per_optimizer_.find(&optimizer);
  const Stage stage = it == per_optimizer_.end() ? Stage::Ready : it->second.stage;
  if (next == Stage::Unscaled) {
    MG_CHECK(stage != Stage::Unscaled,
             "{}::unscale_: already called for {} since the last update(); call it at "
             "most once per step, between backward and step()",
             kName, optimizer.name());
    MG_CHECK(stage != Stage::Stepped,
             "{}::unscale_: called after step() for {}; unscale_ must come before step() "
             "(step checks the gradients by itself when unscale_ was not called)",
             kName, optimizer.name());
  }
  MG_CHECK(stage != Stage::Stepped,
           "{}::step: already called for {} since the last update(); call update() once "
           "per iteration, after step()",
           kName, optimizer.name());
  return stage;
}

void GradScaler::place_on(Device device) {
  for (Tensor* number : {&scale_, &growth_tracker_, &overflow_streak_})
    if (number->device() != device) *number = number->to(device);
}

Tensor GradScaler::inverse_scale() const {
  NoGradGuard no_grad;
  return rdiv(1.0, scale_);  // 1.0f / S in f32: the f64 reciprocal rounded once (division is exact-rounded)
}

double GradScaler::get_scale() const { return options_.enabled ? scale_.item() : 1.0; }

void GradScaler::set_scale(double scale) {
  MG_CHECK(std::isfinite(scale) && scale > 0.0 && scale <= FLT_MAX,
           "{}::set_scale: the scale must be finite and > 0 (an f32), got {}", kName, scale);
  scale_ = full({}, scale, {.device = scale_.device()});
}

std::int64_t GradScaler::growth_tracker() const { return static_cast<std::int64_t>(growth_tracker_.item()); }

std::int64_t GradScaler::overflow_streak() const { return static_cast<std::int64_t>(overflow_streak_.item()); }

void GradScaler::agree_across_ranks(Tensor& found_inf) {
  // Each rank checked its own gradients. Usually they are equal (the all-reduce of the gradients
  // spreads an inf), but not always (a gradient left out of the all-reduce, a rank whose own
  // arithmetic overflowed before it): the max makes the decision one for all.
  if (group_ && group_->size() > 1) group_->all_reduce(found_inf, dist::ReduceOp::Max);
}

void GradScaler::warn_if_bf16(DType dtype) {
  if (dtype != DType::BF16 || warned_bf16_) return;
  warned_bf16_ = true;
  warn("amp::GradScaler is used with bf16, which has f32's exponent range: its gradients do not underflow "
       "and need no loss scaling. The mixed_bfloat16 recipe uses no scaler; construct it with "
       "{.enabled = false} (or drop it) to skip the extra passes.");
}

ScaleState GradScaler::state() const {
  return {.options = {.init_scale = scale_.item(),
                      .rule = options_.rule,
                      .enabled = options_.enabled,
                      .dynamic = options_.dynamic},
          .growth_tracker = growth_tracker(),
          .overflow_streak = overflow_streak(),
          .counters = std::nullopt};
}

void GradScaler::load_state(const ScaleState& state) {
  check_scale_state(state, std::string(kName) + "::load_state");
  options_ = state.options;
  const Device device = scale_.device();
  scale_ = full({}, state.options.init_scale, {.device = device});
  growth_tracker_ = full({}, static_cast<double>(state.growth_tracker), {.dtype = DType::I32, .device = device});
  overflow_streak_ = full({}, static_cast<double>(state.overflow_streak), {.dtype = DType::I32, .device = device});
  per_optimizer_.clear();
}

StateDict GradScaler::state_dict() const { return scale_state_dict(state()); }

void GradScaler::load_state_dict(const StateDict& state) {
  load_state(read_scale_state(state, false, std::string(kName) + "::load_state_dict"));
}

}  // namespace mg::amp
