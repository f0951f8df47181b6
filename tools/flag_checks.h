// The value checks of the command-line flags (train and repro). Each message names the value and what
// is allowed; CLI11 puts the flag in front ("--lr: -1 is not allowed: ..."), and main() prints it as
// one `error:` line and exits 1.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

namespace CLI {
class Validator;
}

namespace mg::tools {

// A whole number in [least, most].
CLI::Validator whole_number_in(std::int64_t least, std::int64_t most = std::numeric_limits<std::int64_t>::max());
// A finite number in [low, high]; `allowed` says so in words ("a finite learning rate >= 0").
CLI::Validator finite_number_in(double low, double high, const std::string& allowed);
// A seed: a whole number from 0 to 2^64 - 1. "-1" is refused rather than wrapped.
CLI::Validator seed_value();

}  // namespace mg::tools
