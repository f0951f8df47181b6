#include "optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/factory.h"
#include "kernels/amp.h"
#include "kernels/copy.h"

namespace mg::optim {

UpdateRounding parse_update_rounding(std::string_view name) {
  for (UpdateRounding r : {UpdateRounding::Nearest, UpdateRounding::Stochastic, UpdateRounding::Kahan})
    if (name == update_rounding_name(r)) return r;
  throw Error(fmt::format("unknown update rounding '{}'; choose one of nearest, stochastic, kahan", name));
}

const char* update_rounding_name(UpdateRounding rounding) {
  switch (rounding) {
    case UpdateRounding::Nearest:
      return "nearest";
    case UpdateRounding::Stochastic:
      return "stochastic";
    case UpdateRounding::Kahan:
      return "kahan";
  }
  return "?";
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay, const StoreOptions& store,
                     std::string name)
    : name_(std::move(name)),
      master_weights_(store.master_weights),
      rounding_(store.update_rounding),
      rounding_seed_(store.rounding_seed) {
  check_lr(lr, "the learning rate");
  MG_CHECK(std::isfinite(weight_decay) && weight_decay >= 0.0, "{}: weight_decay must be finite and >= 0, got {}",
           name_, weight_decay);
  std::unordered_map<std::uint64_t, std::size_t> group_of;  // parameter id -> its group
  for (std::size_t g = 0; g < groups.size(); ++g) {
    ParamGroup& group = groups[g];
    const std::string where = groups.size() > 1 ? fmt::format("group {}", g) : "the list";
    if (group.lr) check_lr(*group.lr, fmt::format("group {}'s learning rate", g));
    MG_CHECK(!group.weight_decay || (std::isfinite(*group.weight_decay) && *group.weight_decay >= 0.0),
             "{}: group {}'s weight_decay must be finite and >= 0, got {}", name_, g, group.weight_decay.value_or(0));
    Group resolved{.begin = parameters_.size(),
                   .end = parameters_.size() + group.parameters.size(),
                   .lr = group.lr.value_or(lr),
                   .weight_decay = group.weight_decay.value_or(weight_decay)};
    for (Tensor& p : group.parameters) {
      const std::size_t i = parameters_.size();
      MG_CHECK(p.defined(), "{}: parameter {} (in {}) is undefined", name_, i, where);
      MG_CHECK(is_floating(p.dtype()) && p.is_leaf() && p.requires_grad(),
               "{}: parameter {} ({} {}, in {}) must be a floating leaf that requires grad; call "
               "set_requires_grad(true)",
               name_, i, p.shape(), p.dtype(), where);
      auto [seen, inserted] = group_of.emplace(p.id(), g);
      MG_CHECK(inserted || seen->second != g, "{}: parameter {} ({}) appears twice in {}", name_, i, p.shape(), where);
      MG_CHECK(inserted,
               "{}: parameter {} ({}) is in group {} and again in group {}; a parameter may belong to "
               "only one group",
               name_, i, p.shape(), seen->second, g);
      parameters_.push_back(std::move(p));
    }
    groups_.push_back(resolved);
  }
  MG_CHECK(!parameters_.empty(), "{}: got no parameters to optimize", name_);
  if (rounding_ != UpdateRounding::Nearest) {
    const char* rounding = update_rounding_name(rounding_);
    MG_CHECK(!master_weights_,
             "{}: update_rounding {} rounds updates into f16/bf16 parameters, but with master_weights the f32 "
             "masters take them unrounded; choose one (bfloat16_pure, or a recipe with masters)",
             name_, rounding);
    MG_CHECK(std::any_of(parameters_.begin(), parameters_.end(),
                         [](const Tensor& p) { return is_low_precision(p.dtype()); }),
             "{}: update_rounding {} applies to f16/bf16 parameters, and all {} here are {}; store them in bf16 "
             "first (amp::Recipe::cast_parameters with bfloat16_pure)",
             name_, rounding, parameters_.size(), parameters_.front().dtype());
  }
  compensations_.resize(parameters_.size());
  // The masters start as the parameters' values, exactly (f16 and bf16 widen to f32 without rounding).
  masters_.resize(parameters_.size());
  converted_.resize(parameters_.size());
  for (std::size_t i = 0; master_weights_ && i < parameters_.size(); ++i) {
    const Tensor& p = parameters_[i];
    if (!is_low_precision(p.dtype())) continue;
    Tensor master = Tensor::empty(p.shape(), {.dtype = DType::F32, .device = p.device()});
    kernels::cast(p, master);
    masters_[i] = master.set_requires_grad(true);  // a leaf, so that it can hold the f32 gradient
  }
}

void Optimizer::step(const StepScaling& scaling) {
  NoGradGuard no_grad;
  const double factor = schedule_factor();  // before any update: a bad schedule changes nothing
  const Device device = parameters_.front().device();
  // A GPU counts on the device (last_update() reads it, if asked); a skipped step keeps the counts.
  kernels::clear_update_count(device, scaling.found_inf);
  kernels::UpdateCount count;
  // Stochastic words are drawn for (seed, step, parameter, element): the steps taken so far.
  const auto step_number = rounding_ == UpdateRounding::Stochastic ? static_cast<std::uint32_t>(step_count())
                                                                   : std::uint32_t{0};
  for (const Group& group : groups_) {
    const double rate = group.lr * factor;
    for (std::size_t i = group.begin; i < group.end; ++i) {
      Tensor& p = parameters_[i];
      if (!p.grad().defined()) continue;
      const Tensor grad = step_gradient(i);
      Tensor& master = masters_[i];
      Tensor& target = master.defined() ? master : p;  // the f32 master is what the optimizer updates
      kernels::FusedStep fused{.scaling = scaling, .model_copy = master.defined() ? &p : nullptr};
      if (is_low_precision(target.dtype())) {  // a parameter without master: rounded as asked
        fused.rounding = rounding_;
        fused.stream = {.seed = rounding_seed_, .step = step_number, .tensor = static_cast<std::uint32_t>(i)};
        if (rounding_ == UpdateRounding::Kahan) {
          if (!compensations_[i].defined())
            compensations_[i] = zeros(p.shape(), {.dtype = p.dtype(), .device = p.device()});
          fused.compensation = &compensations_[i];
        }
      }
      update(i, target, grad, rate, group.weight_decay, count, fused);
      target.impl().storage->bump_version();
      if (master.defined()) p.impl().storage->bump_version();
    }
  }
  // Whether the step was taken: known now on the CPU; on a GPU read only when step_count() is asked.
  // A skipped step leaves last_update() as the last step taken left it.
  update_counted_ = device.is_cpu();
  if (scaling.found_inf == nullptr) {
    ++step_count_;
    last_update_ = count;
  } else if (device.is_cpu()) {
    if (scaling.found_inf->item() != 0.0) return;
    ++step_count_;
    last_update_ = count;
  } else {  // queued: a skipped step adds 1 (the caller may reuse its flag afterwards)
    const Tensor skipped = clamp(*scaling.found_inf, 0.0, 1.0);
    unread_skips_ = unread_steps_ == 0 ? skipped : add(unread_skips_, skipped);
    ++unread_steps_;
  }
}

void Optimizer::zero_grad() {
  for (Tensor& p : parameters_) p.zero_grad();
  for (Tensor& master : masters_)
    if (master.defined()) master.zero_grad();
}

std::int64_t Optimizer::step_count() const {
  if (unread_steps_ > 0) {  // one read (a wait) covers every step since the last
    step_count_ += unread_steps_ - static_cast<std::int64_t>(unread_skips_.item());
    unread_steps_ = 0;
    unread_skips_ = Tensor();
  }
  return step_count_;
}

kernels::UpdateCount Optimizer::last_update() const {
  if (!update_counted_) {
    last_update_ = {};
    kernels::read_update_count(parameters_.front().device(), last_update_);
    update_counted_ = true;
  }
  return last_update_;
}

double Optimizer::schedule_factor() const {
  if (!schedule_) return 1.0;
  const std::int64_t steps = step_count();
  const double factor = schedule_(steps);
  MG_CHECK(std::isfinite(factor) && factor >= 0.0,
           "{}: the schedule returned {} at step {}; a learning-rate factor "
           "must be finite and >= 0",
           name_, factor, steps);
  return factor;
}

double Optimizer::lr(std::size_t group) const {
  MG_CHECK(group < groups_.size(), "{}::lr: there is no group {}; the optimizer has {}", name_, group, groups_.size());
  return groups_[group].lr * schedule_factor();
}

void Optimizer::check_lr(double lr, const std::string& what) const {
  MG_CHECK(std::isfinite(lr) && lr >= 0.0, "{}: {} must be finite and >= 0, got {}", name_, what, lr);
}

void Optimizer::set_lr(std::size_t group, double lr) {
  MG_CHECK(group < groups_.size(), "{}::set_lr: there is no group {}; the optimizer has {}", name_, group,
           groups_.size());
  check_lr(lr, "the learning rate");
  groups_[group].lr = lr;
}

void Optimizer::set_lr(double lr) {
  check_lr(lr, "the learning rate");  // before any group changes
  for (std::size_t g = 0; g < groups().size(); ++g) set_lr(g, lr);
}

void Optimizer::set_schedule(Schedule factor) { schedule_ = std::move(factor); }

// ---- gradients and master gradients

bool Optimizer::master_grad_up_to_date(std::size_t i) const {
  const auto& grad = parameters_[i].impl().grad;
  return masters_[i].defined() && grad && masters_[i].grad().defined() && converted_[i].first == grad &&
         converted_[i].second == grad->storage->version();
}

Tensor Optimizer::step_gradient(std::size_t i) const {
  return master_grad_up_to_date(i) ? masters_[i].grad() : parameters_[i].grad();
}

void Optimizer::scale_pass(const Tensor& factor, Tensor& found_inf, bool all) {
  NoGradGuard no_grad;
  std::vector<Tensor> from, into;
  std::vector<std::size_t> into_masters;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor grad = parameters_[i].grad();
    if (!grad.defined() || (!all && (!masters_[i].defined() || master_grad_up_to_date(i)))) continue;
    if (!masters_[i].defined()) {  // in place
      from.push_back(grad);
      into.push_back(grad);
      continue;
    }
    Tensor master_grad = masters_[i].grad();
    if (!master_grad.defined()) {
      master_grad = Tensor::empty(grad.shape(), {.dtype = DType::F32, .device = grad.device()});
      masters_[i].set_grad(master_grad);
    }
    from.push_back(master_grad_up_to_date(i) ? master_grad : grad);  // scaled again, or converted from the f16 one
    into.push_back(master_grad);
    into_masters.push_back(i);
  }
  if (from.empty()) return;
  kernels::unscale(from, into, factor, found_inf);
  for (Tensor& g : into) g.impl().storage->bump_version();
  for (std::size_t i : into_masters) {
    const auto& grad = parameters_[i].impl().grad;
    converted_[i] = {grad, grad->storage->version()};
  }
}

void Optimizer::scale_gradients_(const Tensor& factor, Tensor& found_inf) { scale_pass(factor, found_inf, true); }

std::vector<Tensor> Optimizer::gradients() {
  if (master_bytes() > 0) {  // f16 gradients not converted yet go into their masters' f32 .grad
    const Device device = parameters_.front().device();
    Tensor one = full({}, 1.0, {.device = device}), ignored = zeros({}, {.device = device});
    scale_pass(one, ignored, false);  // an inf is converted as it is, as without loss scaling
  }
  return step_gradients();
}

std::vector<Tensor> Optimizer::step_gradients() const {
  std::vector<Tensor> grads;
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    if (parameters_[i].grad().defined()) grads.push_back(step_gradient(i));
  return grads;
}

std::size_t Optimizer::master_bytes() const {
  std::size_t bytes = 0;
  for (const Tensor& master : masters_)
    if (master.defined()) bytes += master.nbytes();
  return bytes;
}

std::size_t Optimizer::state_bytes() const {
  std::size_t bytes = 0;
  for (const Tensor& t : state()) bytes += t.nbytes();
  for (const Tensor& c : compensations_)
    if (c.defined()) bytes += c.nbytes();
  return bytes;
}

}  // namespace mg::optim
