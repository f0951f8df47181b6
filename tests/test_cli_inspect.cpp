// `mixgrad train --inspect FILE` (train/precision_inspector.h), run as a user runs it: the CSV's rows
// and plots, the first inf/NaN op and layer named for a skipped step and for a diverged run, and the
// inspector's bad flags refused before training starts.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tests/cli_runner.h"
#include "tests/program_runner.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"

using mg::testing::kSmallRun;
using mg::testing::mixgrad;
using mg::testing::Run;
using mg::testing::TempDir;
namespace fs = std::filesystem;

TEST_CASE("--inspect writes one CSV row per layer, kind and inspected step, and its plots") {
  TempDir tmp;
  Run run = mixgrad(kSmallRun + fmt::format(" --steps 5 --precision float16_pure --inspect {} --inspect-every 2 "
                                            "--summary {}",
                                            tmp / "inspect.csv", tmp / "summary.json"));
  INFO(run.output);
  REQUIRE(run.status == 0);
  std::ifstream csv(tmp / "inspect.csv");
  std::string line;
  std::getline(csv, line);
  CHECK(line.rfind("step,layer,kind,dtype,values,amax,zero,nonfinite,f16_flushed,f16_subnormal,f16_overflow,", 0) == 0);
  std::set<std::string> seen;  // "step kind" of every row
  while (std::getline(csv, line)) {
    std::stringstream cells(line);
    std::string step, layer, kind;
    std::getline(cells, step, ',');
    std::getline(cells, layer, ',');
    std::getline(cells, kind, ',');
    seen.insert(step + " " + kind);
  }
  // Steps 1, 3 and 5 of 5, each with its five kinds (the last update's rows come at the end).
  for (const char* step : {"1", "3", "5"})
    for (const char* kind : {"activation", "activation_grad", "weight", "weight_grad", "update"})
      CHECK_MESSAGE(seen.contains(fmt::format("{} {}", step, kind)), step << " " << kind);
  CHECK_FALSE(seen.contains("2 activation"));
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0)
    for (const char* plot :
         {"inspect_flushed.png", "inspect_underflow.png", "inspect_lost.png", "inspect_worst_f16.png",
          "inspect_worst_bf16.png", "inspect_worst_e4m3.png", "inspect_worst_e5m2.png"})
      CHECK_MESSAGE(fs::exists(tmp / plot), plot);
}

TEST_CASE("--inspect names the first op and layer of a skipped step in the closing line and the summary") {
  // A rate of 1000 makes the f32 weights huge after the first step: the next forward overflows f16.
  TempDir tmp;
  Run run = mixgrad(kSmallRun + fmt::format(" --steps 4 --precision mixed_float16 --lr 1000 --inspect {} --summary {}",
                                            tmp / "inspect.csv", tmp / "summary.json"));
  INFO(run.output);
  REQUIRE(run.status == 0);
  CHECK(run.output.find("first inf/NaN at step 2: the output (forward) of op") != std::string::npos);
  CHECK(run.output.find("in layer '") != std::string::npos);
  std::ifstream file(tmp / "summary.json");
  const auto summary = nlohmann::json::parse(file);
  CHECK(summary["skipped_steps"].get<int>() >= 1);
  CHECK(summary["first_nonfinite"].get<std::string>().rfind("step 2: ", 0) == 0);
}

TEST_CASE("--inspect's bad flags are refused before any work starts; a CSV that cannot be written is an error") {
  TempDir tmp;
  const std::vector<std::pair<std::string, std::string>> cases{
      {" --steps 1 --inspect-every 0 --inspect x.csv", "--inspect-every: 0 is not allowed: give a whole number >= 1"},
      {" --steps 1 --inspect-every 5", "--inspect-every needs --inspect FILE"},
      {" --steps 1 --inspect /nonexistent-dir/inspect.csv",
       "cannot write /nonexistent-dir/inspect.csv: the directory /nonexistent-dir does not exist"},
      {" --steps 1 --inspect /dev/full", "writing the inspection CSV /dev/full failed"}};
  for (const auto& [flags, message] : cases) {
    Run run = mixgrad(kSmallRun + flags);
    INFO(flags << ": " << run.output);
    CHECK(run.status == 1);
    CHECK(run.output.find(message) != std::string::npos);
  }
}

TEST_CASE("--inspect names the first inf/NaN op in the error that stops a diverged run without a scaler") {
  TempDir tmp;
  Run run = mixgrad(kSmallRun +
                    fmt::format(" --steps 4 --precision float16_pure --lr 1000 --inspect {}", tmp / "inspect.csv"));
  INFO(run.output);
  CHECK(run.status == 1);
  CHECK(run.output.find("the run diverged") != std::string::npos);
  CHECK(run.output.find("; first inf/NaN at step ") != std::string::npos);
}
