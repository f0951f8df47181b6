#include "optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "autograd/tape.h"
#include "kernels/amp.h"

namespace mg::optim {

namespace {

// Step counts are saved as f64, exact for integers up to 2^53.
bool is_count(double value) { return value >= 0.0 && value <= 0x1p53 && value == std::floor(value); }

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

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay, std::string name)
    : name_(std::move(name)) {
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
    Group resolved{.begin = parameters_.size(), .end = parameters_.size() + group.parameters.size(),
                   .lr = group.lr.value_or(lr), .weight_decay = group.weight_decay.value_or(weight_decay)};
    for (Tensor& p : group.parameters) {
      const std::size_t i = parameters_.size();
      MG_CHECK(p.defined(), "{}: parameter {} (in {}) is undefined", name_, i, where);
      MG_CHECK(is_floating(p.dtype()) && p.is_leaf() && p.requires_grad(),
               "{}: parameter {} ({} {}, in {}) must be a floating leaf that requires grad; call "
               "set_requires_grad(true)", name_, i, p.shape(), p.dtype(), where);
      auto [seen, inserted] = group_of.emplace(p.id(), g);
      MG_CHECK(inserted || seen->second != g, "{}: parameter {} ({}) appears twice in {}", name_, i, p.shape(), where);
      MG_CHECK(inserted, "{}: parameter {} ({}) is in group {} and again in group {}; a parameter may belong to "
               "only one group", name_, i, p.shape(), seen->second, g);
      parameters_.push_back(std::move(p));
    }
    groups_.push_back(resolved);
  }
  MG_CHECK(!parameters_.empty(), "{}: got no parameters to optimize", name_);
}

void Optimizer::step() {
  NoGradGuard no_grad;
  const double factor = schedule_factor();  // before any update: a bad schedule changes nothing
  kernels::UpdateCount count;
  for (const Group& group : groups_) {
    const double rate = group.lr * factor;
    for (std::size_t i = group.begin; i < group.end; ++i) {
      Tensor& p = parameters_[i];
      Tensor g = p.grad();
      if (!g.defined()) continue;
      update(i, p, g, rate, group.weight_decay, count);
      p.impl().storage->bump_version();
    }
  }
  // GPU kernels count on the device, so that none of them waits; the counts reach the host here.
  if (const Device device = parameters_.front().device(); device.is_cuda())
    kernels::collect_update_count(device, count);
  last_update_ = count;
  ++step_count_;
}

void Optimizer::zero_grad() {
  for (Tensor& p : parameters_) p.zero_grad();
}

double Optimizer::schedule_factor() const {
  if (!schedule_) return 1.0;
  const double factor = schedule_(step_count());
  MG_CHECK(std::isfinite(factor) && factor >= 0.0, "{}: the schedule returned {} at step {}; a learning-rate factor "
           "must be finite and >= 0", name_, factor, step_count());
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

std::vector<Tensor> Optimizer::gradients() {
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters_)
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

void Optimizer::unscale_gradients(double factor, Tensor& found_inf) {
  std::vector<Tensor> grads = gradients();
  for (const Tensor& g : grads)
    MG_CHECK(g.dtype() != DType::F16, "{}: cannot unscale f16 gradients in place: dividing them by the loss scale "
             "in f16 flushes the small ones to zero again. Keep f32 parameters (mixed_float16), or wrap the "
             "optimizer in amp::MasterWeights (float16_master) to unscale into f32 master gradients", name_);
  kernels::unscale(grads, grads, factor, found_inf);
  for (Tensor& g : grads) g.impl().storage->bump_version();
}

std::size_t Optimizer::state_bytes() const {
  std::size_t bytes = 0;
  for (const Tensor& t : state()) bytes += t.nbytes();
  return bytes;
}

// ---- state_dict

StateDict Optimizer::state_dict() const {
  NoGradGuard no_grad;
  StateDict state{{"step_count", state_scalar(static_cast<double>(step_count_))}};
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    state[fmt::format("group.{}.lr", g)] = state_scalar(groups_[g].lr);
    state[fmt::format("group.{}.weight_decay", g)] = state_scalar(groups_[g].weight_decay);
    state[fmt::format("group.{}.parameter_count", g)] = state_scalar(static_cast<double>(groups_[g].size()));
  }
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    for (const auto& [field, value] : parameter_state(i))
      state[fmt::format("state.{}.{}", i, field)] = value.detach().clone();  // a snapshot, not the live buffer
  return state;
}

void Optimizer::load_state_dict(const StateDict& state) {
  const std::string owner = name_ + "::load_state_dict";
  const std::vector<StateEntry> entries = state_entries();
  std::vector<std::string> entry_names;
  for (const StateEntry& entry : entries) entry_names.push_back(entry.name);

  // 1. Every key is one this optimizer writes (another optimizer's state is refused, not ignored).
  for (const auto& [key, value] : state) {
    MG_CHECK(value.defined(), "{}: entry '{}' is an undefined tensor", owner, key);
    if (key == "step_count") continue;
    if (auto group = parse_indexed(key, "group.")) {
      MG_CHECK(group->index < groups_.size(), "{}: entry '{}' is for group {}, but {} has {} group(s); load it into "
               "an optimizer built with the same parameter groups", owner, key, group->index, name_, groups_.size());
      MG_CHECK(group->field == "lr" || group->field == "weight_decay" || group->field == "parameter_count",
               "{}: unknown entry '{}'; a group saves lr, weight_decay and parameter_count", owner, key);
      continue;
    }
    if (auto parameter = parse_indexed(key, "state.")) {
      MG_CHECK(parameter->index < parameters_.size(), "{}: entry '{}' is for parameter {}, but {} has {} parameters",
               owner, key, parameter->index, name_, parameters_.size());
      MG_CHECK(std::find(entry_names.begin(), entry_names.end(), parameter->field) != entry_names.end(),
               "{}: entry '{}' is not state of {} with these options (its parameters' state is [{}]); was it saved "
               "by another optimizer?", owner, key, name_, fmt::join(entry_names, ", "));
      continue;
    }
    throw Error(fmt::format("{}: unknown entry '{}'; {} saves step_count, group.<g>.lr, group.<g>.weight_decay, "
                            "group.<g>.parameter_count and state.<index>.<name>", owner, key, name_));
  }

  // 2. The step count and the groups.
  const double steps = state_value(state, "step_count", owner);
  MG_CHECK(is_count(steps), "{}: step_count must be a whole number >= 0, got {}", owner, steps);
  std::vector<Group> groups = groups_;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::string prefix = fmt::format("group.{}.", g);
    const double count = state_value(state, prefix + "parameter_count", owner);
    MG_CHECK(count == static_cast<double>(groups[g].size()), "{}: group {} was saved with {} parameters but has {} "
             "here; build the optimizer with the same parameter groups", owner, g, count, groups[g].size());
    groups[g].lr = state_value(state, prefix + "lr", owner);
    groups[g].weight_decay = state_value(state, prefix + "weight_decay", owner);
    MG_CHECK(std::isfinite(groups[g].lr) && groups[g].lr >= 0.0 && std::isfinite(groups[g].weight_decay) &&
             groups[g].weight_decay >= 0.0, "{}: group {} has lr {} and weight_decay {}; both must be finite and "
             ">= 0", owner, g, groups[g].lr, groups[g].weight_decay);
  }

  // 3. Each parameter's state: every entry or none, each of the parameter's shape and dtype.
  std::vector<StateDict> parameter_states(parameters_.size());
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    StateDict saved = state_subset(state, fmt::format("state.{}.", i));
    if (saved.empty()) continue;
    const Tensor& p = parameters_[i];
    for (const StateEntry& entry : entries) {
      auto it = saved.find(entry.name);
      MG_CHECK(it != saved.end(), "{}: parameter {} has state but no entry 'state.{}.{}'", owner, i, i, entry.name);
      const Tensor& value = it->second;
      if (entry.kind == StateKind::Count) {
        MG_CHECK(value.numel() == 1 && is_count(value.item()), "{}: entry 'state.{}.{}' must hold one whole number "
                 ">= 0, got shape {}", owner, i, entry.name, value.shape());
        continue;
      }
      MG_CHECK(value.shape() == p.shape() && value.dtype() == p.dtype(),
               "{}: entry 'state.{}.{}' is {} {}, but parameter {} is {} {}; load the state into a model of the same "
               "shapes and dtypes", owner, i, entry.name, value.shape(), value.dtype(), i, p.shape(), p.dtype());
      it->second = value.to(p.device());  // a checkpoint's state is read to the CPU; it lives with its parameter
    }
    parameter_states[i] = std::move(saved);
  }

  // 4. Nothing can fail from here on.
  step_count_ = static_cast<std::int64_t>(steps);
  groups_ = std::move(groups);
  for (std::size_t i = 0; i < parameters_.size(); ++i) load_parameter_state(i, parameter_states[i]);
}

Tensor Optimizer::copy_state(const Tensor& existing, const Tensor& saved) {
  NoGradGuard no_grad;
  if (!existing.defined()) return saved.detach().clone();
  Tensor target = existing;
  target.copy_(saved);
  return target;
}

}  // namespace mg::optim
