#include "core/state_dict.h"

#include <fmt/ranges.h>

#include "core/factory.h"

namespace mg {

Tensor state_scalar(double value) { return full({}, value, {.dtype = DType::F64}); }

StateDict state_scalars(const std::map<std::string, double>& values) {
  StateDict state;
  for (const auto& [key, value] : values) state[key] = state_scalar(value);
  return state;
}

std::map<std::string, double> state_numbers(const StateDict& state, const std::set<std::string>& keys,
                                            const std::string& owner) {
  for (const auto& [key, value] : state)
    MG_CHECK(keys.contains(key), "{}: unknown key '{}' (expected [{}])", owner, key, fmt::join(keys, ", "));
  std::map<std::string, double> numbers;
  for (const std::string& key : keys) {
    MG_CHECK(state.contains(key), "{}: key '{}' is missing", owner, key);
    numbers[key] = state_value(state, key, owner);
  }
  return numbers;
}

double state_value(const StateDict& state, const std::string& key, const std::string& owner) {
  auto it = state.find(key);
  MG_CHECK(it != state.end(), "{}: the state has no entry '{}'; was it saved by a different version or object?",
           owner, key);
  MG_CHECK(it->second.defined() && it->second.numel() == 1,
           "{}: entry '{}' must hold one number, got shape {}", owner, key,
           it->second.defined() ? it->second.shape() : Shape{});
  return it->second.item();
}

StateDict state_subset(const StateDict& state, const std::string& prefix) {
  StateDict part;
  for (auto it = state.lower_bound(prefix); it != state.end() && it->first.starts_with(prefix); ++it)
    part.emplace(it->first.substr(prefix.size()), it->second);
  return part;
}

void state_insert(StateDict& into, const std::string& prefix, const StateDict& part) {
  for (const auto& [key, value] : part) into[prefix + key] = value;
}

}  // namespace mg
