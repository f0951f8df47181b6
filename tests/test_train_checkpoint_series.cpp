// train/checkpoint_series.h and train/stop_signals.h, in one process: a series' names, what it keeps
// and when it deletes, the fall back past a damaged newest file, the refusals (another run's
// directory, a diverged state); and a signal that asks a loop to stop. The same behaviour through
// the program, with real signals and resumes compared bit for bit: tests/test_cli_stop.cpp.
#include <fmt/format.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "core/warning.h"
#include "nn/linear.h"
#include "optim/sgd.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"
#include "train/checkpoint_series.h"
#include "train/stop_signals.h"

using namespace mg;
using namespace mg::testing;
namespace fs = std::filesystem;

namespace {

struct SmallRun {
  std::shared_ptr<nn::Linear> model = std::make_shared<nn::Linear>(3, 2);
  std::unique_ptr<optim::SGD> optimizer = std::make_unique<optim::SGD>(model->parameters(),
                                                                       optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
  train::TrainingObjects objects() { return {.model = model.get(), .optimizer = optimizer.get()}; }
  // One SGD step on fixed data: the weights and the momentum move.
  void step() {
    optimizer->zero_grad();
    const Tensor x = full({4, 3}, 0.5f);
    backward(sum(mul((*model)(x), (*model)(x))));
    optimizer->step();
  }
};

std::set<std::string> names_in(const std::string& directory) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) names.insert(entry.path().filename().string());
  return names;
}

// Collects mg::warn's messages while alive.
struct Warnings {
  std::vector<std::string> messages;
  Warnings() {
    set_warning_handler([this](const std::string& m) { messages.push_back(m); });
  }
  ~Warnings() { set_warning_handler({}); }
};

}  // namespace

TEST_CASE("a series writes step-<S>.safetensors, keeps the newest K, and skips files that are not its own") {
  TempDir tmp;
  SmallRun run;
  train::CheckpointSeries series(tmp / "run", {.every = 2, .keep = 2});
  series.begin_at(0);
  CHECK_FALSE(series.due(1));
  CHECK(series.due(4));
  std::ofstream(tmp / "run/notes.txt") << "a user's file";
  std::ofstream(tmp / "run/step-00000099.safetensors.tmp.1.0") << "a crashed save's leftover";
  for (std::int64_t step = 2; step <= 6; step += 2) {
    run.step();
    const train::SavedCheckpoint saved = series.save(step, run.objects(), {{"step", state_scalar(step)}});
    CHECK(saved.path == tmp / fmt::format("run/step-{:08}.safetensors", step));
    CHECK(saved.bytes == static_cast<std::int64_t>(fs::file_size(saved.path)));
    CHECK(saved.seconds >= 0);
  }
  // Steps 4 and 6 kept; step 2 went once step 6 was complete; the other files are left alone.
  CHECK(names_in(tmp / "run") == std::set<std::string>{"notes.txt", "step-00000004.safetensors",
                                                       "step-00000006.safetensors",
                                                       "step-00000099.safetensors.tmp.1.0"});
  const auto files = train::CheckpointSeries::list(tmp / "run");
  REQUIRE(files.size() == 2);
  CHECK(files[0].first == 4);
  CHECK(files[1].first == 6);

  // keep = 0 keeps every one.
  train::CheckpointSeries all(tmp / "all", {.every = 1, .keep = 0});
  for (std::int64_t step = 1; step <= 3; ++step) all.save(step, run.objects());
  CHECK(train::CheckpointSeries::list(tmp / "all").size() == 3);
}

TEST_CASE("the newest readable checkpoint is loaded: a damaged newest file falls back to the one before") {
  TempDir tmp;
  SmallRun run;
  train::CheckpointSeries series(tmp / "run", {.every = 1, .keep = 3});
  std::vector<Tensor> weights;  // after each step
  for (std::int64_t step = 1; step <= 3; ++step) {
    run.step();
    weights.push_back(run.model->weight.clone());
    series.save(step, run.objects(), {{"step", state_scalar(step)}});
  }
  SmallRun fresh;
  {
    const train::LoadedCheckpoint loaded = train::load_latest_checkpoint(tmp / "run", fresh.objects());
    CHECK(loaded.path == train::CheckpointSeries::path_of(tmp / "run", 3));
    CHECK(state_value(loaded.extra, "step", "test") == 3);
  }
  // Step 3's file cut short (a disk that filled up mid-copy): step 2's is loaded, with a warning.
  const std::string newest = train::CheckpointSeries::path_of(tmp / "run", 3);
  fs::resize_file(newest, fs::file_size(newest) / 2);
  Warnings warnings;
  const train::LoadedCheckpoint loaded = train::load_latest_checkpoint(tmp / "run", fresh.objects());
  CHECK(state_value(loaded.extra, "step", "test") == 2);
  CHECK(fresh.model->weight.to_vector<float>() == weights[1].to_vector<float>());
  REQUIRE(warnings.messages.size() == 1);
  CHECK(warnings.messages[0].find(newest + " cannot be read") != std::string::npos);

  // A series that resumes here sets the damaged file aside, so that it no longer passes for the newest.
  train::CheckpointSeries resumed(tmp / "run", {.every = 1, .keep = 3});
  resumed.begin_at(2, /*resumed_here=*/true);
  CHECK(fs::exists(newest + ".damaged"));
  CHECK(train::CheckpointSeries::list(tmp / "run").back().first == 2);

  // Every file damaged: one error that names each.
  for (const auto& [step, path] : train::CheckpointSeries::list(tmp / "run")) fs::resize_file(path, 10);
  CHECK_THROWS_WITH_AS(train::load_latest_checkpoint(tmp / "run", fresh.objects()),
                       doctest::Contains("none of the 2 checkpoints"), Error);
  fs::create_directory(tmp / "empty");
  CHECK_THROWS_WITH_AS(train::load_latest_checkpoint(tmp / "empty", fresh.objects()),
                       doctest::Contains("holds no checkpoint"), Error);
}

TEST_CASE("a readable checkpoint of another run is an error, not a reason to fall back") {
  TempDir tmp;
  SmallRun run;
  train::CheckpointSeries series(tmp / "run", {.every = 1, .keep = 2});
  series.save(1, run.objects(), {}, {{"precision", "fp32"}});
  series.save(2, run.objects(), {}, {{"precision", "fp32"}});
  Warnings warnings;
  CHECK_THROWS_WITH_AS(train::load_latest_checkpoint(tmp / "run", run.objects(), {{"precision", "mixed_float16"}}),
                       doctest::Contains("was saved with precision 'fp32', not 'mixed_float16'"), Error);
  CHECK(warnings.messages.empty());
  // A fresh run (or one resumed from elsewhere) refuses a directory holding later steps.
  train::CheckpointSeries again(tmp / "run", {.every = 1, .keep = 2});
  CHECK_THROWS_WITH_AS(again.begin_at(0), doctest::Contains("already holds a checkpoint of step 2"), Error);
  again.begin_at(2);  // where it left off: fine
}

TEST_CASE("a state holding NaN is not written, and the file there stays as it was") {
  TempDir tmp;
  SmallRun run;
  run.step();
  const std::string path = tmp / "run.safetensors";
  train::save_checkpoint(path, run.objects());
  const auto size = fs::file_size(path);
  const std::vector<float> saved = run.model->weight.to_vector<float>();
  {
    NoGradGuard no_grad;
    run.model->weight.copy_(full(run.model->weight.shape(), std::nanf("")));
  }
  CHECK_THROWS_WITH_AS(train::save_checkpoint(path, run.objects()),
                       doctest::Contains("not written, since model.weight (nan at element 0) is not finite"), Error);
  CHECK(fs::file_size(path) == size);
  SmallRun fresh;
  train::load_checkpoint(path, fresh.objects());
  CHECK(fresh.model->weight.to_vector<float>() == saved);
}

TEST_CASE("a stop signal sets a flag the loop reads; the handlers are put back afterwards") {
  CHECK(train::parse_signals("int,SIGTERM,Usr1,TERM") == std::vector<int>{SIGINT, SIGTERM, SIGUSR1});
  CHECK(train::signal_name(SIGUSR1) == "SIGUSR1");
  CHECK_THROWS_WITH_AS(train::parse_signals("TERM,KILL"), doctest::Contains("SIGKILL cannot be caught"), Error);
  CHECK_THROWS_WITH_AS(train::parse_signals("TERM,FOO"), doctest::Contains("unknown signal 'FOO'"), Error);

  struct sigaction before {};
  sigaction(SIGUSR2, nullptr, &before);
  {
    train::StopSignals stop({SIGUSR2});
    CHECK_FALSE(stop.requested());
    CHECK_THROWS_WITH_AS(train::StopSignals({SIGUSR2}), doctest::Contains("another StopSignals is alive"), Error);
    std::raise(SIGUSR2);  // the process goes on: the handler only sets the flag
    CHECK(stop.requested());
    CHECK(stop.signal() == SIGUSR2);
  }
  struct sigaction after {};
  sigaction(SIGUSR2, nullptr, &after);
  CHECK(reinterpret_cast<void*>(after.sa_handler) == reinterpret_cast<void*>(before.sa_handler));
  // Another rank's signal, agreed on: this rank stops by the same signal.
  train::StopSignals stop({SIGUSR2});
  CHECK_FALSE(stop.requested());
  stop.request(SIGTERM);
  CHECK(stop.requested());
  CHECK(stop.signal() == SIGTERM);
}
