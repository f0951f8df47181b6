// `mixgrad train --profile FILE` (train/op_profile.h), run as a user runs it: the table at the end
// with every phase, the Chrome trace in FILE, a run too short to profile saying so, and bad paths
// refused before training starts.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "tests/cli_runner.h"
#include "tests/program_runner.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"

using mg::testing::mixgrad;
using mg::testing::Run;
using mg::testing::TempDir;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const char* kRun = "train --model mlp --subset 64 --batch 16 --precision mixed_bfloat16 --quiet";

}  // namespace

TEST_CASE("--profile prints the table of every phase and writes the trace of the first profiled steps") {
  TempDir tmp;
  const Run run = mixgrad(fmt::format("{} --steps 4 --profile {}", kRun, tmp / "profile.json"));
  INFO(run.output);
  REQUIRE(run.status == 0);
  CHECK(contains(run.output, "op profile: 3 step(s) counted after 1 warm-up"));
  for (const char* row :
       {"forward   linear", "backward  linear", "forward   cast", "update    optimizer step", "backward  outside ops"})
    CHECK(contains(run.output, row));
  CHECK(contains(run.output, fmt::format("profile trace of 3 step(s) in {}", tmp / "profile.json")));
  const nlohmann::json trace = nlohmann::json::parse(std::ifstream(tmp / "profile.json"));
  std::set<std::string> phases;
  int linear = 0;
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    if (event.at("ph") != "X") continue;
    if (event.at("tid") == 0) phases.insert(event.at("name").get<std::string>());
    if (event.at("name") == "linear") ++linear;
  }
  CHECK(phases == std::set<std::string>{"forward", "backward", "update"});
  CHECK(linear == 3 * 2 * 3);  // three layers, forward and backward, three steps
}

TEST_CASE("--profile on a run of one step says that nothing was profiled") {
  TempDir tmp;
  const Run run = mixgrad(fmt::format("{} --steps 1 --profile {}", kRun, tmp / "profile.json"));
  INFO(run.output);
  CHECK(run.status == 0);
  CHECK(contains(run.output, "no step profiled (the first is warm-up); run 2 steps or more"));
  CHECK_FALSE(std::filesystem::exists(tmp / "profile.json"));
}

TEST_CASE("--profile refuses a path it cannot write before training starts") {
  TempDir tmp;
  const Run missing = mixgrad(fmt::format("{} --steps 2 --profile {}", kRun, tmp / "no-such-dir/profile.json"));
  CHECK(missing.status == 1);
  CHECK(contains(missing.output, "the directory"));
  CHECK(contains(missing.output, "does not exist"));
  CHECK_FALSE(contains(missing.output, "op profile"));
  const Run directory = mixgrad(fmt::format("{} --steps 2 --profile {}", kRun, tmp.path.string()));
  CHECK(directory.status == 1);
  CHECK(contains(directory.output, "is a directory; name the trace file to write"));
}
