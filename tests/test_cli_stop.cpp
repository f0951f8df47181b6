// `mixgrad train` stopped by a signal, crashed mid-save, and saving while it trains: a real program,
// real signals, sent at a step the program announces (MG_TEST_PAUSE, core/test_pause.h), never after
// a sleep. Every stopped run is resumed and must end on the bits of a run never stopped.
// The library parts alone: tests/test_train_checkpoint_series.cpp. Under mpirun: tests/test_dist_cli.cpp.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "tests/checkpoint_files.h"
#include "tests/cli_runner.h"
#include "tests/program_runner.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;
namespace fs = std::filesystem;

namespace {

// `mixgrad train` started with MG_TEST_PAUSE=pauses (nothing when empty).
std::unique_ptr<Spawned> spawn_mixgrad(const std::string& pauses, const std::string& arguments) {
  return std::make_unique<Spawned>(fmt::format("MG_TEST_PAUSE='{}' exec {} {}", pauses, MG_CLI_PATH, arguments));
}

// The command a stopped run printed after "resume with: ", up to the end of its line.
std::string resume_command(const std::string& output) {
  const std::string marker = "resume with: ";
  const std::size_t at = output.find(marker);
  REQUIRE(at != std::string::npos);
  return output.substr(at + marker.size(), output.find('\n', at) - at - marker.size());
}

}  // namespace

TEST_CASE("a run stopped by SIGTERM, SIGINT or SIGUSR1 saves its step, says how to resume, and resumes exactly") {
  struct Case {
    int signal;
    const char* name;
    int step;
    const char* flags;
  };
  for (const Case& c :
       {Case{SIGTERM, "SIGTERM", 3, "--seed 0"}, Case{SIGINT, "SIGINT", 6, "--seed 1 --precision mixed_float16"},
        Case{SIGUSR1, "SIGUSR1", 1, "--seed 2 --precision float16_master --optimizer adam"}}) {
    INFO(c.name << " at step " << c.step << ", " << c.flags);
    TempDir tmp;
    const std::string run = fmt::format("{} {} --steps 8", kSmallRun, c.flags);
    REQUIRE(mixgrad(run + " --save " + tmp / "straight.safetensors").status == 0);

    auto stopped = spawn_mixgrad(fmt::format("step:{}", c.step), run + " --save " + tmp / "stopped.safetensors");
    const int pid = stopped->wait_for_pause();
    REQUIRE(pid > 0);
    kill(pid, c.signal);
    const Finished done = stopped->finish();
    CHECK(done.signal == c.signal);  // ended by the signal itself: the shell sees 128 + signal
    CHECK(done.output.find(fmt::format("mixgrad train: {}: stopped at step {} of 8; resume with: {} ", c.name, c.step,
                                       MG_CLI_PATH)) != std::string::npos);
    CHECK(checkpoint_step(tmp / "stopped.safetensors") == c.step);
    fs::copy_file(tmp / "stopped.safetensors", tmp / "at_stop.safetensors");

    // The printed command, run as printed, ends where the run that was never stopped ended.
    const std::string again = resume_command(done.output);
    CHECK(again.find("--resume " + tmp / "stopped.safetensors") != std::string::npos);
    REQUIRE(run_command(again).status == 0);
    check_same_checkpoint(tmp / "straight.safetensors", tmp / "stopped.safetensors");
    Run differs = run_command(fmt::format("cmp -s {} {}", tmp / "at_stop.safetensors", tmp / "stopped.safetensors"));
    CHECK(differs.status != 0);  // the comparison can fail: the weights moved after the stop
  }
}

TEST_CASE("a stopped run with no checkpoint asked for says so and how to ask, and still ends by the signal") {
  auto stopped = spawn_mixgrad("step:2", kSmallRun + " --steps 8");
  const int pid = stopped->wait_for_pause();
  REQUIRE(pid > 0);
  kill(pid, SIGTERM);
  const Finished done = stopped->finish();
  CHECK(done.signal == SIGTERM);
  CHECK(done.output.find("mixgrad train: SIGTERM: stopped at step 2 of 8; nothing saved: add --save FILE or "
                         "--save-every N to keep a stopped run") != std::string::npos);
}

TEST_CASE("--save-every keeps the newest K checkpoints, and a run resumed from any of them ends on the same bits") {
  for (const char* precision : {"fp32", "mixed_float16"}) {
    INFO(precision);
    TempDir tmp;
    const std::string run = fmt::format("{} --precision {} --steps 12", kSmallRun, precision);
    REQUIRE(mixgrad(run + " --save " + tmp / "straight.safetensors").status == 0);
    REQUIRE(mixgrad(run + fmt::format(" --save-every 3 --keep 0 --checkpoint-dir {} --summary {}", tmp / "all",
                                      tmp / "summary.json"))
                .status == 0);
    CHECK(tmp.names().count("all") == 1);
    std::set<std::string> every;
    for (const auto& entry : fs::directory_iterator(tmp / "all")) every.insert(entry.path().filename().string());
    CHECK(every == std::set<std::string>{"step-00000003.safetensors", "step-00000006.safetensors",
                                         "step-00000009.safetensors", "step-00000012.safetensors"});
    // The summary says what the saves cost, so that a user can choose N.
    std::ifstream summary_file(tmp / "summary.json");
    const nlohmann::json summary = nlohmann::json::parse(summary_file);
    CHECK(summary["checkpoints"]["written"] == 4);
    CHECK(summary["checkpoints"]["max_seconds"].get<double>() > 0);
    CHECK(summary["checkpoints"]["bytes"].get<std::int64_t>() == fs::file_size(tmp / "all/step-00000012.safetensors"));
    check_same_checkpoint(tmp / "straight.safetensors", tmp / "all/step-00000012.safetensors");
    for (int step : {3, 6, 9}) {
      INFO("resumed from step " << step);
      CHECK(checkpoint_step(tmp / fmt::format("all/step-{:08}.safetensors", step)) == step);
      REQUIRE(mixgrad(run + fmt::format(" --resume {} --save {}", tmp / fmt::format("all/step-{:08}.safetensors", step),
                                        tmp / "resumed.safetensors"))
                  .status == 0);
      check_same_checkpoint(tmp / "straight.safetensors", tmp / "resumed.safetensors");
    }
    // --keep 2: the two newest.
    REQUIRE(mixgrad(run + fmt::format(" --save-every 3 --keep 2 --checkpoint-dir {}", tmp / "two")).status == 0);
    std::set<std::string> kept;
    for (const auto& entry : fs::directory_iterator(tmp / "two")) kept.insert(entry.path().filename().string());
    CHECK(kept == std::set<std::string>{"step-00000009.safetensors", "step-00000012.safetensors"});
  }
}

TEST_CASE("--resume DIR takes the newest checkpoint, falls back past a damaged one, and the series goes on") {
  TempDir tmp;
  const std::string run = kSmallRun + " --steps 12";
  const std::string series = fmt::format(" --save-every 3 --keep 3 --checkpoint-dir {}", tmp / "run");
  REQUIRE(mixgrad(run + " --save " + tmp / "straight.safetensors").status == 0);
  REQUIRE(mixgrad(kSmallRun + " --steps 9" + series).status == 0);  // steps 3, 6, 9
  // Step 9's file cut in half, as a full disk or a bad copy leaves it.
  const std::string step9 = tmp / "run/step-00000009.safetensors";
  fs::copy_file(step9, tmp / "step9_whole.safetensors");
  fs::resize_file(step9, fs::file_size(step9) / 2);
  Run resumed = mixgrad(run + series + " --resume " + tmp / "run");
  REQUIRE(resumed.status == 0);
  CHECK(resumed.output.find(step9 + " cannot be read, so the checkpoint before it") != std::string::npos);
  CHECK(fs::exists(step9 + ".damaged"));  // set aside, out of the series
  check_same_checkpoint(tmp / "straight.safetensors", tmp / "run/step-00000012.safetensors");
  check_same_checkpoint(tmp / "step9_whole.safetensors", step9);  // written again on the way, whole

  // A fresh run into that directory would mix two runs' checkpoints: refused before it starts.
  Run fresh = mixgrad(run + series);
  CHECK(fresh.status == 1);
  CHECK(fresh.output.find("already holds a checkpoint of step 12") != std::string::npos);
}

TEST_CASE("a run resumed from an earlier checkpoint drops the log rows of the steps it takes again") {
  TempDir tmp;
  const std::string run = kSmallRun + fmt::format(" --steps 9 --log {}", tmp / "steps.csv");
  // A run that went on past its checkpoint of step 3 (as a crash after it does) logged steps 4..9.
  REQUIRE(mixgrad(run + fmt::format(" --save-every 3 --keep 0 --checkpoint-dir {}", tmp / "run")).status == 0);
  REQUIRE(mixgrad(run + " --resume " + tmp / "run/step-00000003.safetensors").status == 0);
  std::ifstream log(tmp / "steps.csv");
  std::string line;
  std::vector<std::string> steps;
  while (std::getline(log, line)) steps.push_back(line.substr(0, line.find(',')));
  CHECK(steps == std::vector<std::string>{"step", "1", "2", "3", "4", "5", "6", "7", "8", "9"});
}

TEST_CASE("SIGKILL in the middle of a periodic save leaves the previous checkpoint whole") {
  TempDir tmp;
  const std::string run = kSmallRun + " --steps 9";
  const std::string series = fmt::format(" --save-every 3 --checkpoint-dir {}", tmp / "run");
  REQUIRE(mixgrad(run + " --save " + tmp / "straight.safetensors").status == 0);
  // The second save (step 6) stops halfway through its file; then the process is killed outright.
  auto killed = spawn_mixgrad("safetensors-write:2", run + series);
  const int pid = killed->wait_for_pause();
  REQUIRE(pid > 0);
  kill(pid, SIGKILL);
  CHECK(killed->finish().signal == SIGKILL);
  const auto files = fs::directory_iterator(tmp / "run");
  std::set<std::string> names;
  for (const auto& entry : files) names.insert(entry.path().filename().string());
  REQUIRE(names.count("step-00000003.safetensors") == 1);
  CHECK(names.count("step-00000006.safetensors") == 0);  // never a partial file under a checkpoint's name
  CHECK(checkpoint_step(tmp / "run/step-00000003.safetensors") == 3);
  REQUIRE(mixgrad(run + series + " --resume " + tmp / "run").status == 0);
  check_same_checkpoint(tmp / "straight.safetensors", tmp / "run/step-00000009.safetensors");
}

TEST_CASE("a second signal ends the run at once, in the middle of its save, leaving the last checkpoint whole") {
  TempDir tmp;
  // Saves: step 2 (the 1st write), step 4 (the 2nd), then the stop's --save (the 3rd), paused halfway.
  auto stopped = spawn_mixgrad("step:4,safetensors-write:3",
                               kSmallRun + fmt::format(" --steps 8 --save-every 2 --checkpoint-dir {} --save {}",
                                                       tmp / "run", tmp / "stopped.safetensors"));
  const int pid = stopped->wait_for_pause();
  REQUIRE(pid > 0);
  kill(pid, SIGTERM);
  REQUIRE(stopped->wait_for_pause() == pid);
  kill(pid, SIGTERM);
  const Finished done = stopped->finish();
  CHECK(done.signal == SIGTERM);
  CHECK(done.output.find("a second signal: stopping at once") != std::string::npos);
  CHECK(done.output.find("resume with") == std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "stopped.safetensors"));
  CHECK(checkpoint_step(tmp / "run/step-00000004.safetensors") == 4);
}

// On a GPU (or the CUDA emulator, which runs this in CI): the checkpoint is written from the device's
// tensors, copied to the host, and a resumed run puts them back on the device.
TEST_CASE("--device cuda: a stopped run saves the device's state and resumes to the same bits") {
  if (!have_gpu()) return;
  TempDir tmp;
  const std::string run = kSmallRun + " --device cuda --precision mixed_float16 --steps 4 --test-subset 1000";
  REQUIRE(mixgrad(run + " --save " + tmp / "straight.safetensors").status == 0);
  auto stopped = spawn_mixgrad("step:2", run + " --save " + tmp / "stopped.safetensors");
  const int pid = stopped->wait_for_pause();
  REQUIRE(pid > 0);
  kill(pid, SIGTERM);
  const Finished done = stopped->finish();
  CHECK(done.signal == SIGTERM);
  CHECK(checkpoint_step(tmp / "stopped.safetensors") == 2);
  REQUIRE(run_command(resume_command(done.output)).status == 0);
  check_same_checkpoint(tmp / "straight.safetensors", tmp / "stopped.safetensors");
}
