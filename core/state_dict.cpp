#include "core/state_dict.h"

#include "core/factory.h"

namespace mg {

Tensor state_scalar(double value) { return full({}, value, {.dtype = DType::F64}); }

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
