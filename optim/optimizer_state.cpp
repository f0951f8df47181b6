// Optimizer::state_dict and load_state_dict: the optimizer's state as named tensors, and loading it
// back with every key and value checked before anything changes (optim/optimizer.h has the format).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "autograd/tape.h"
#include "kernels/copy.h"
#include "optim/optimizer.h"

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
    if (compensations_[i].defined()) state[fmt::format("state.{}.compensation", i)] = compensations_[i].clone();
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
    compensations_[i] = loaded[i].compensation.defined() ? copy_state(compensations_[i], loaded[i].compensation)
                                                         : Tensor();
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
      if (parameter->field == "compensation") {
        MG_CHECK(rounding_ == UpdateRounding::Kahan && is_low_precision(parameters_[parameter->index].dtype()),
                 "{}: entry '{}' is Kahan's compensation, but parameter {} ({}) keeps none here (update_rounding "
                 "{}{}); build {} with UpdateRounding::Kahan (mixgrad train: --update-rounding kahan) to continue "
                 "that run",
                 owner, key, parameter->index, parameters_[parameter->index].dtype(), update_rounding_name(rounding_),
                 masters_[parameter->index].defined() ? ", with an f32 master" : "", name_);
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
  if (auto it = saved.find("compensation"); it != saved.end()) {  // check_keys: only under Kahan
    MG_CHECK(it->second.shape() == p.shape() && it->second.dtype() == p.dtype(),
             "{}: entry 'state.{}.compensation' must be {} {} (parameter {}'s dtype and shape), got {} {}", owner, i,
             p.dtype(), p.shape(), i, it->second.dtype(), it->second.shape());
    loaded.compensation = it->second.to(p.device());
    saved.erase(it);
  }
  if (saved.empty()) return loaded;
  const DType dtype = state_dtype(i);
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
             dtype != p.dtype() ? " (the dtype of its state here)" : "");
    it->second = value.to(p.device());  // a checkpoint's state is read to the CPU; it lives with its parameter
  }
  loaded.state = std::move(saved);
  return loaded;
}

DType Optimizer::state_dtype(std::size_t index) const {
  return masters_[index].defined() ? DType::F32 : parameters_[index].dtype();
}

Tensor Optimizer::copy_state(const Tensor& existing, const Tensor& saved) {
  NoGradGuard no_grad;
  if (!existing.defined()) return saved.detach().clone();
  Tensor target = existing;
  target.copy_(saved);
  return target;
}

}  // namespace mg::optim
