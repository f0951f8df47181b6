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

namespace {

// "state.12.exp_avg" with prefix "state." -> {12, "exp_avg"}; nothing if the key has another form.
struct IndexedKey {
  std::size_t index;
  std::string field;
};
std::optional<IndexedKey> parse_indexed(const std::string& key, std::string_view prefix) {
  if (!key.starts_with(prefix)) return std::nullopt;
  const char* begin = key.data() + prefix.size();
  const char* end = key.data() + key.size();
  std::size_t index = 0;
  auto [dot, error] = std::from_chars(begin, end, index);
  if (error != std::errc() || dot == end || *dot != '.') return std::nullopt;
  return IndexedKey{index, std::string(dot + 1, end)};
}

}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay, bool master_weights,
                     std::string name)
    : name_(std::move(name)), master_weights_(master_weights) {
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
  for (const Group& group : groups_) {
    const double rate = group.lr * factor;
    for (std::size_t i = group.begin; i < group.end; ++i) {
      Tensor& p = parameters_[i];
      if (!p.grad().defined()) continue;
      const Tensor grad = step_gradient(i);
      Tensor& master = masters_[i];
      Tensor& target = master.defined() ? master : p;  // the f32 master is what the optimizer updates
      const kernels::FusedStep fused{.scaling = scaling, .model_copy = master.defined() ? &p : nullptr};
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
  return bytes;
}

// ---- state_dict

StateDict Optimizer::state_dict() const {
  NoGradGuard no_grad;
  StateDict state{{"step_count", state_scalar(static_cast<double>(step_count()))}};
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    state[fmt::format("group.{}.lr", g)] = state_scalar(groups_[g].lr);
    state[fmt::format("group.{}.weight_decay", g)] = state_scalar(groups_[g].weight_decay);
    state[fmt::format("group.{}.parameter_count", g)] = state_scalar(static_cast<double>(groups_[g].size()));
  }
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (masters_[i].defined()) state[fmt::format("state.{}.master", i)] = masters_[i].detach().clone();
    for (const auto& [field, value] : parameter_state(i))
      state[fmt::format("state.{}.{}", i, field)] = value.detach().clone();  // a snapshot, not the live buffer
  }
  return state;
}

namespace {

// amp::MasterWeights (before issue 17) saved the masters as "master.<index>" beside the inner
// optimizer's state, which was this state over the masters: the same entries, under new names.
StateDict renamed_legacy_keys(const StateDict& state_in) {
  StateDict state;
  for (const auto& [key, value] : state_in) {
    const auto legacy = key.starts_with("master.") ? parse_indexed(key + ".", "master.") : std::nullopt;
    const bool renamed = legacy && legacy->field.empty();  // "master.3", and nothing after the index
    state[renamed ? fmt::format("state.{}.master", legacy->index) : key] = value;
  }
  return state;
}

}  // namespace

// Loading checks everything first, in this order, and changes the optimizer only when all is well:
//   0. old key names are renamed (renamed_legacy_keys);
//   1. every key is one this optimizer writes (check_keys: another optimizer's state is refused, not ignored);
//   2. the step count and the groups (loaded_groups);
//   3. each parameter's master and state (loaded_parameter);
//   4. nothing can fail from here on: the new state is put in place.
void Optimizer::load_state_dict(const StateDict& state_in) {
  const std::string owner = name_ + "::load_state_dict";
  const StateDict state = renamed_legacy_keys(state_in);
  check_keys(state, owner);
  const std::int64_t steps = state_whole_number(state, "step_count", owner, 0, std::int64_t{1} << 53);
  std::vector<Group> groups = loaded_groups(state, owner);
  std::vector<LoadedParameter> loaded;
  for (std::size_t i = 0; i < parameters_.size(); ++i) loaded.push_back(loaded_parameter(state, i, owner));

  // Each parameter with a master becomes round(master).
  NoGradGuard no_grad;
  step_count_ = steps;
  unread_steps_ = 0;
  unread_skips_ = Tensor();
  groups_ = std::move(groups);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    load_parameter_state(i, loaded[i].state);
    if (!masters_[i].defined()) continue;
    masters_[i].copy_(loaded[i].master);
    kernels::cast(masters_[i], parameters_[i]);
    parameters_[i].impl().storage->bump_version();
    converted_[i] = {};
  }
}

void Optimizer::check_keys(const StateDict& state, const std::string& owner) const {
  std::vector<std::string> entry_names;
  for (const StateEntry& entry : state_entries()) entry_names.push_back(entry.name);
  for (const auto& [key, value] : state) {
    MG_CHECK(value.defined(), "{}: entry '{}' is an undefined tensor", owner, key);
    if (key == "step_count") continue;
    if (auto group = parse_indexed(key, "group.")) {
      MG_CHECK(group->index < groups_.size(),
               "{}: entry '{}' is for group {}, but {} has {} group(s); load it into "
               "an optimizer built with the same parameter groups",
               owner, key, group->index, name_, groups_.size());
      MG_CHECK(group->field == "lr" || group->field == "weight_decay" || group->field == "parameter_count",
               "{}: unknown entry '{}'; a group saves lr, weight_decay and parameter_count", owner, key);
      continue;
    }
    if (auto parameter = parse_indexed(key, "state.")) {
      MG_CHECK(parameter->index < parameters_.size(), "{}: entry '{}' is for parameter {}, but {} has {} parameters",
               owner, key, parameter->index, name_, parameters_.size());
      if (parameter->field == "master") {
        MG_CHECK(masters_[parameter->index].defined(),
                 "{}: entry '{}' is an f32 master, but parameter {} ({}) has "
                 "none here; build the optimizer with master_weights = true over the same f16/bf16 parameters",
                 owner, key, parameter->index, parameters_[parameter->index].dtype());
        continue;
      }
      MG_CHECK(std::find(entry_names.begin(), entry_names.end(), parameter->field) != entry_names.end(),
               "{}: entry '{}' is not state of {} with these options (its parameters' state is [{}]); was it saved "
               "by another optimizer?",
               owner, key, name_, fmt::join(entry_names, ", "));
      continue;
    }
    throw Error(fmt::format("{}: unknown entry '{}'; {} saves step_count, group.<g>.lr, group.<g>.weight_decay, "
                            "group.<g>.parameter_count and state.<index>.<name>",
                            owner, key, name_));
  }
}

std::vector<Group> Optimizer::loaded_groups(const StateDict& state, const std::string& owner) const {
  std::vector<Group> groups = groups_;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::string prefix = fmt::format("group.{}.", g);
    const double count = state_value(state, prefix + "parameter_count", owner);
    MG_CHECK(count == static_cast<double>(groups[g].size()),
             "{}: group {} was saved with {} parameters but has {} "
             "here; build the optimizer with the same parameter groups",
             owner, g, count, groups[g].size());
    groups[g].lr = state_value(state, prefix + "lr", owner);
    groups[g].weight_decay = state_value(state, prefix + "weight_decay", owner);
    MG_CHECK(std::isfinite(groups[g].lr) && groups[g].lr >= 0.0 && std::isfinite(groups[g].weight_decay) &&
                 groups[g].weight_decay >= 0.0,
             "{}: group {} has lr {} and weight_decay {}; both must be finite and "
             ">= 0",
             owner, g, groups[g].lr, groups[g].weight_decay);
  }
  return groups;
}

// Parameter i's master, and its state: every entry or none, each of the parameter's shape, in the
// dtype of what step() updates (the master's f32, or the parameter's own), moved to its device.
Optimizer::LoadedParameter Optimizer::loaded_parameter(const StateDict& state, std::size_t i,
                                                       const std::string& owner) const {
  LoadedParameter loaded;
  StateDict saved = state_subset(state, fmt::format("state.{}.", i));
  const Tensor& p = parameters_[i];
  if (masters_[i].defined()) {
    auto it = saved.find("master");
    MG_CHECK(it != saved.end(),
             "{}: parameter {} ({} {}) keeps an f32 master, but the state has no entry "
             "'state.{}.master'; was it saved without master_weights?",
             owner, i, p.shape(), p.dtype(), i);
    MG_CHECK(it->second.shape() == p.shape() && it->second.dtype() == DType::F32,
             "{}: entry 'state.{}.master' "
             "must be f32 {} (the master of parameter {}), got {} {}",
             owner, i, p.shape(), i, it->second.shape(), it->second.dtype());
    loaded.master = it->second.to(p.device());
    saved.erase(it);
  }
  if (saved.empty()) return loaded;
  const DType dtype = masters_[i].defined() ? DType::F32 : p.dtype();
  for (const StateEntry& entry : state_entries()) {
    auto it = saved.find(entry.name);
    MG_CHECK(it != saved.end(), "{}: parameter {} has state but no entry 'state.{}.{}'", owner, i, i, entry.name);
    const Tensor& value = it->second;
    if (entry.kind == StateKind::Count) {
      // A per-parameter count lives in an i32 tensor (the fused kernels read it on the device).
      MG_CHECK(value.numel() == 1, "{}: entry 'state.{}.{}' must hold one number, got shape {}", owner, i, entry.name,
               value.shape());
      state_whole_number(state, fmt::format("state.{}.{}", i, entry.name), owner, 0,
                         std::numeric_limits<std::int32_t>::max());
      continue;
    }
    MG_CHECK(value.shape() == p.shape() && value.dtype() == dtype,
             "{}: entry 'state.{}.{}' is {} {}, but parameter {} is {} {}{}; load the state into a model of the "
             "same shapes and dtypes",
             owner, i, entry.name, value.shape(), value.dtype(), i, p.shape(), dtype,
             masters_[i].defined() ? " (its f32 master's state)" : "");
    it->second = value.to(p.device());  // a checkpoint's state is read to the CPU; it lives with its parameter
  }
  loaded.state = std::move(saved);
  return loaded;
}

Tensor Optimizer::copy_state(const Tensor& existing, const Tensor& saved) {
  NoGradGuard no_grad;
  if (!existing.defined()) return saved.detach().clone();
  Tensor target = existing;
  target.copy_(saved);
  return target;
}

}  // namespace mg::optim
