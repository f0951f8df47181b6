#include "core/state_dict.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

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
  MG_CHECK(it != state.end(), "{}: the state has no entry '{}'; was it saved by a different version or object?", owner,
           key);
  MG_CHECK(it->second.defined() && it->second.numel() == 1, "{}: entry '{}' must hold one number, got shape {}", owner,
           key, it->second.defined() ? it->second.shape() : Shape{});
  return it->second.item();
}

std::int64_t state_whole_number(const StateDict& state, const std::string& key, const std::string& owner,
                                std::int64_t low, std::int64_t high) {
  const double value = state_value(state, key, owner);
  const double highest = std::min(static_cast<double>(high), 0x1p53);
  // Written so that NaN fails every comparison and so is refused.
  MG_CHECK(value == std::trunc(value) && value >= static_cast<double>(low) && value <= highest,
           "{}: entry '{}' must be a whole number from {} to {}, got {}; the file is damaged or was edited", owner, key,
           low, static_cast<std::int64_t>(highest), value);
  return static_cast<std::int64_t>(value);
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
