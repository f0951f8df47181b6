// `mixgrad train` under mpirun, as a user runs it: 2 ranks train as one process does, rank 0 alone
// writes, checkpoints resume on any number of ranks, and a failing rank ends the job with its message.
// One process here; each case starts mpirun (MG_MPIRUN, tests/CMakeLists.txt).
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "data/safetensors.h"
#include "tests/checkpoint_files.h"
#include "tests/program_runner.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

Run shell(const std::string& command) {
  // Open MPI refuses root unless told; CI's containers run as root.
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  return run_command(command);
}

Run mixgrad(const std::string& arguments) { return shell(fmt::format("{} {}", MG_CLI_PATH, arguments)); }
Run two_ranks(const std::string& arguments) {
  return shell(fmt::format("{} {} {}", MG_MPIRUN, MG_CLI_PATH, arguments));
}

const std::string kSmallRun = "train --data fashion-mnist --model mlp --subset 512 --batch 64 --threads 1";

int occurrences(const std::string& text, const std::string& needle) {
  int count = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++count;
  return count;
}

std::vector<double> logged_losses(const std::filesystem::path& csv) {
  std::ifstream file(csv);
  std::string line;
  std::getline(file, line);  // the header
  std::vector<double> losses;
  while (std::getline(file, line)) losses.push_back(std::stod(line.substr(line.find(',') + 1)));
  return losses;
}

nlohmann::json summary_of(const std::filesystem::path& path) {
  std::ifstream file(path);
  return nlohmann::json::parse(file);
}

}  // namespace

TEST_CASE("mpirun -n 2 mixgrad train: rank 0 alone writes, and the losses are one process's within f32 rounding") {
  TempDir tmp;
  const std::string flags = kSmallRun + " --steps 8 --precision mixed_float16";
  Run one = mixgrad(flags + fmt::format(" --log {} --summary {}", tmp / "one.csv", tmp / "one.json"));
  REQUIRE(one.status == 0);
  Run two = two_ranks(flags + fmt::format(" --log {} --summary {}", tmp / "two.csv", tmp / "two.json"));
  INFO(two.output);
  REQUIRE(two.status == 0);
  CHECK(occurrences(two.output, "mixgrad train: mlp on fashion-mnist") == 1);
  CHECK(occurrences(two.output, "data-parallel over 2 ranks (mpi), 32 rows of each batch per rank") == 1);
  CHECK(occurrences(two.output, "test accuracy") == 1);
  const nlohmann::json summary = summary_of(tmp / "two.json");
  CHECK(summary["ranks"] == 2);
  CHECK(summary["steps"] == 8);
  CHECK(summary["allreduce_bytes_per_step"] == 269322 * 4);  // every parameter's f32 gradient
  // The same global batches: each loss is the mean over the same 64 images, its sums ordered otherwise.
  const std::vector<double> one_losses = logged_losses(tmp / "one.csv"), two_losses = logged_losses(tmp / "two.csv");
  REQUIRE(two_losses.size() == 8);
  REQUIRE(one_losses.size() == 8);
  for (std::size_t i = 0; i < 8; ++i) CHECK(two_losses[i] == doctest::Approx(one_losses[i]).epsilon(1e-4));
  CHECK(std::fabs(summary["test_accuracy"].get<double>() -
                  summary_of(tmp / "one.json")["test_accuracy"].get<double>()) < 0.02);
}

TEST_CASE("mpirun: resume is exact on 2 ranks, and a 2-rank checkpoint resumes in one process") {
  TempDir tmp;
  const std::string flags = kSmallRun + " --precision float16_master --quiet";
  REQUIRE(two_ranks(flags + fmt::format(" --steps 10 --save {}", tmp / "straight.safetensors")).status == 0);
  REQUIRE(two_ranks(flags + fmt::format(" --steps 5 --save {}", tmp / "half.safetensors")).status == 0);
  REQUIRE(two_ranks(flags + fmt::format(" --steps 10 --resume {} --save {}", tmp / "half.safetensors",
                                        tmp / "resumed.safetensors"))
              .status == 0);
  check_same_checkpoint(tmp / "straight.safetensors", tmp / "resumed.safetensors");
  // The data's position is the global batch's, so any number of ranks continues from it.
  Run alone = mixgrad(flags + fmt::format(" --steps 8 --resume {}", tmp / "half.safetensors"));
  CHECK(alone.status == 0);
  CHECK(alone.output.find("after 8 steps") != std::string::npos);
}

TEST_CASE("mpirun: f16 on the wire halves the bytes; --bucket-kb sets the buckets") {
  TempDir tmp;
  Run run = two_ranks(kSmallRun +
                      fmt::format(" --steps 4 --allreduce-dtype f16 --bucket-kb 1 --summary {}", tmp / "f16.json"));
  INFO(run.output);
  REQUIRE(run.status == 0);
  // Buckets close once they hold 1 KiB: each of the 3 layers (bias, then weight) is one.
  CHECK(run.output.find("gradients averaged in 3 bucket(s) of f16") != std::string::npos);
  CHECK(summary_of(tmp / "f16.json")["allreduce_bytes_per_step"] == 269322 * 2);
}

TEST_CASE("mpirun: a failing rank ends the whole job with its message; ranks started differently are refused") {
  Run poisoned = shell(fmt::format("{} {}", MG_MPIRUN, MG_POISONED_RANK_PATH));
  INFO(poisoned.output);
  CHECK(poisoned.status != 0);
  CHECK(poisoned.output.find("error (rank 1 of 2): poisoned: rank 1 met bad input") != std::string::npos);
  // MPMD: rank 1 gets another batch size. Both stop before training, naming the difference.
  const std::string mpirun_one = std::string(MG_MPIRUN).replace(std::string(MG_MPIRUN).find("-n 2"), 4, "-n 1");
  Run mismatched = shell(fmt::format("{} {} {} --steps 2 --batch 64 : -n 1 {} {} --steps 2 --batch 32", mpirun_one,
                                     MG_CLI_PATH, kSmallRun, MG_CLI_PATH, kSmallRun));
  INFO(mismatched.output);
  CHECK(mismatched.status != 0);
  CHECK(mismatched.output.find("rank 1 has the flags") != std::string::npos);
  CHECK(mismatched.output.find("--batch 32") != std::string::npos);
  // A bad flag on one rank: it exits before MPI starts, and mpirun stops the other.
  Run bad = shell(fmt::format("{} {} {} --steps 2 : -n 1 {} {} --steps 0", mpirun_one, MG_CLI_PATH, kSmallRun,
                              MG_CLI_PATH, kSmallRun));
  INFO(bad.output);
  CHECK(bad.status != 0);
  CHECK(bad.output.find("--steps: 0 is not allowed") != std::string::npos);
}

// The stop contract under mpirun: a signal reaches one rank (a scheduler's SIGTERM to one
// process) or mpirun itself (which forwards SIGUSR1 to every rank at its own moment). The ranks agree
// on the step, rank 0 saves, every rank ends by the signal, and the job resumes to the bits of a job
// never stopped.
TEST_CASE("mpirun: a signal to one rank or to mpirun stops every rank after the same step, and resumes exactly") {
  struct Case {
    const char* pause;  // where one rank waits for the signal
    bool to_mpirun;  // the signal goes to mpirun, else to the paused rank
    int signal;
    const char* name;
    int step;
    const char* flags;
    bool series;  // saves with --save-every 2 into a directory, else with --save
  };
  for (const Case& c : {Case{"step:5@1", false, SIGTERM, "SIGTERM", 5, "--precision fp32", false},
                        Case{"step:3@0", true, SIGUSR1, "SIGUSR1", 3, "--precision mixed_float16", true}}) {
    INFO(c.name << (c.to_mpirun ? " to mpirun" : " to rank 1") << " at step " << c.step << ", " << c.flags);
    TempDir tmp;
    const std::string flags = kSmallRun + " --quiet --steps 8 " + c.flags;
    REQUIRE(two_ranks(flags + " --save " + tmp / "straight.safetensors").status == 0);
    const std::string saving = c.series ? fmt::format("--save-every 2 --checkpoint-dir {}", tmp / "run")
                                        : fmt::format("--save {}", tmp / "stopped.safetensors");
    const std::string at_stop = c.series ? tmp / fmt::format("run/step-{:08}.safetensors", c.step)
                                         : tmp / "stopped.safetensors";
    const std::string at_end = c.series ? tmp / "run/step-00000008.safetensors" : tmp / "stopped.safetensors";
    shell("true");  // sets Open MPI's variables for running as root, which Spawned inherits
    Spawned job(fmt::format("MG_TEST_PAUSE={} exec {} {} {} {}", c.pause, MG_MPIRUN, MG_CLI_PATH, flags, saving));
    const int paused_rank = job.wait_for_pause();
    REQUIRE(paused_rank > 0);
    kill(c.to_mpirun ? job.pid() : paused_rank, c.signal);
    const Finished done = job.finish();
    CHECK(done.exit_status == 128 + c.signal);  // mpirun reports the ranks' end
    const std::string line = fmt::format("mixgrad train: {}: stopped at step {} of 8; resume with: mpirun -n 2 {} ",
                                         c.name, c.step, MG_CLI_PATH);
    REQUIRE(occurrences(done.output, line) == 1);  // rank 0's line alone
    CHECK(checkpoint_step(at_stop) == c.step);
    // The printed command's arguments, run as printed on 2 ranks.
    const std::size_t begin = done.output.find(line) + line.size();
    REQUIRE(two_ranks(done.output.substr(begin, done.output.find('\n', begin) - begin)).status == 0);
    check_same_checkpoint(tmp / "straight.safetensors", at_end);
  }
}
