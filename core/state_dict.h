// StateDict: named tensors, the one shape every saveable state takes (a Module's parameters and
// buffers, an optimizer's moments and step counts, the GradScaler, the RNG), so that a checkpoint
// is one safetensors file of name -> tensor.
//
// A scalar (a step count, a loss scale) is a 0-d f64 tensor: exact for integers up to 2^53 and for
// every double, and stored as such in the file. Keys are dotted paths ("0.weight",
// "optimizer.state.3.exp_avg"), as in PyTorch.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "core/tensor.h"

namespace mg {

using StateDict = std::map<std::string, Tensor>;

// A 0-d f64 tensor holding `value`.
Tensor state_scalar(double value);
// Numbers as a StateDict of such scalars: the state of an object made of counters and options.
StateDict state_scalars(const std::map<std::string, double>& values);
// The numbers of a StateDict whose keys must be exactly `keys`: an unknown key or a missing one is an
// mg::Error naming `owner` and the key, as is an entry that is not one number.
std::map<std::string, double> state_numbers(const StateDict& state, const std::set<std::string>& keys,
                                            const std::string& owner);
// The value of the 0-d (or one-element) tensor under `key`; an mg::Error naming `owner` (for example
// "optim::SGD::load_state_dict") and the key when it is missing or holds more than one element.
double state_value(const StateDict& state, const std::string& key, const std::string& owner);
// The same number, required to be a whole number in [low, high] (and at most 2^53, the last integer
// an f64 holds exactly): every count, position, size and seed read from a file goes through here,
// since NaN, 1e300, -3 or 2.5 turned into an integer unchecked would run a loop for ever, run it
// backwards or silently drop the fraction. An mg::Error names `owner`, the key, the range and the value.
std::int64_t state_whole_number(const StateDict& state, const std::string& key, const std::string& owner,
                                std::int64_t low, std::int64_t high);
// The entries whose keys start with `prefix`, with the prefix removed ("model." -> "0.weight").
StateDict state_subset(const StateDict& state, const std::string& prefix);
// Adds every entry of `part` to `into` under `prefix` + key.
void state_insert(StateDict& into, const std::string& prefix, const StateDict& part);

}  // namespace mg
