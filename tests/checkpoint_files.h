// Checkpoint files as the program tests compare them: every entry equal byte for byte, and the step
// a `mixgrad train` checkpoint stands at.
//   check_same_checkpoint(tmp / "straight.safetensors", tmp / "resumed.safetensors");
#pragma once

#include <cstring>
#include <string>

#include "data/safetensors.h"
#include "tests/testing.h"

namespace mg::testing {

inline void check_same_checkpoint(const std::string& expected_path, const std::string& actual_path) {
  INFO("expected " << expected_path << ", got " << actual_path);
  const StateDict expected = data::load_safetensors(expected_path).tensors;
  const StateDict actual = data::load_safetensors(actual_path).tensors;
  REQUIRE(expected.size() == actual.size());
  for (const auto& [name, value] : expected) {
    INFO(name);
    REQUIRE(actual.count(name) == 1);
    REQUIRE(value.nbytes() == actual.at(name).nbytes());
    CHECK(std::memcmp(value.data_ptr(), actual.at(name).data_ptr(), value.nbytes()) == 0);
  }
}

inline std::int64_t checkpoint_step(const std::string& path) {
  return static_cast<std::int64_t>(data::load_safetensors(path).tensors.at("extra.step").item<double>());
}

}  // namespace mg::testing
