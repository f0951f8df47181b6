// Shared by the suites that run the mixgrad program as a user does (test_cli, test_cli_stop,
// test_cli_graph, test_cli_inspect; MG_CLI_PATH is the program, tests/CMakeLists.txt): one call of
// it, and the small run most of their cases start from.
#pragma once

#include <fmt/format.h>

#include <string>

#include "tests/program_runner.h"

namespace mg::testing {

// `mixgrad ARGUMENTS`, run to its end: its exit status and what it printed.
inline Run mixgrad(const std::string& arguments) { return run_command(fmt::format("{} {}", MG_CLI_PATH, arguments)); }

// A small, quick run of the MLP on the first 512 training images.
inline const std::string kSmallRun = "train --data fashion-mnist --model mlp --subset 512 --batch 64 --quiet";

}  // namespace mg::testing
