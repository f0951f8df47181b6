// The `mixgrad` program, run as a user runs it (a new process per run): flags, outputs, and exact resume.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "data/safetensors.h"
#include "tests/checkpoint_files.h"
#include "tests/cli_runner.h"
#include "tests/program_runner.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"

using namespace mg;
using mg::testing::check_same_checkpoint;
using mg::testing::kSmallRun;
using mg::testing::mixgrad;
using mg::testing::Run;
using mg::testing::TempDir;
namespace fs = std::filesystem;

TEST_CASE("--help documents every flag of train") {
  Run run = mixgrad("train --help");
  CHECK(run.status == 0);
  for (const char* flag :
       {"--data", "--model", "--precision", "--device", "--epochs", "--steps", "--batch", "--optimizer", "--lr",
        "--momentum", "--seed", "--subset", "--log", "--save", "--resume", "--summary", "--tf32"})
    CHECK_MESSAGE(run.output.find(flag) != std::string::npos, flag);
}

TEST_CASE("bad flags are refused with one error line and status 1 before any work starts") {
  std::vector<std::pair<std::string, std::string>> cases{
      {"train --precision float8 --steps 1", "--precision: float8 not in"},
      {"train --model resnet --steps 1", "--model"},
      {"train --batch 0 --steps 1", "--batch: 0 is not allowed: give a whole number >= 1"},
      {"train --steps 2.5", "--steps: 2.5 is not allowed"},
      {"train --steps many", "--steps: many is not allowed"},
      {"train --context 5000 --data text --model lstm",
       "--context: 5000 is not allowed: give a whole number from 2 to 4096"},
      {"train --threads 0 --steps 1", "--threads: 0 is not allowed: give a whole number from 1 to 1024"},
      {"train --lr -1 --steps 1", "--lr: -1 is not allowed: give a finite learning rate >= 0"},
      {"train --lr inf --steps 1", "--lr: inf is not allowed"},
      {"train --lr nan --steps 1", "--lr: nan is not allowed"},
      {"train --momentum 1 --steps 1", "--momentum: 1 is not allowed: give a momentum in [0, 0.999]"},
      {"train --steps 5 --epochs 1", "excludes"},
      {"train --model lstm --data fashion-mnist --steps 1", "does not fit"},
      {"train --data text --model lstm --epochs 1", "--epochs needs fashion-mnist"},
      {"train --steps 1 --resume /nonexistent.safetensors", "--resume"},
      {"train --steps 1 --save /nonexistent-dir/x.safetensors", "does not exist"},
      {"train --steps 1 --tf32", "--tf32 changes only the f32 GEMMs of a GPU"},
      {"train --steps 1 --update-rounding kahan",
       "--update-rounding kahan rounds updates into 16-bit weights, which only float16_pure and bfloat16_pure"},
      {"train --steps 1 --precision float16_master --update-rounding stochastic", "updates f32 master weights"},
      {"train --steps 1 --update-rounding up", "--update-rounding: up not in"},
      {"train --steps 1 --precision fp8_current --fp4-hadamard off", "--fp4-hadamard off changes an ingredient"},
      {"train --steps 1 --precision mxfp4 --fp4-weight-blocks 1d", "MXFP4's weights always have 1x32 blocks"},
      {"train --steps 1 --fp4-gradient-rounding up", "--fp4-gradient-rounding: up not in"},
      {"train --steps 1 --bf16-last-layers 1", "--bf16-last-layers keeps Linear layers out of FP8 or FP4"},
      {"train --steps 1 --precision nvfp4 --bf16-last-layers 3", "none would run in FP4"},
      {"train --steps 1 --data text --model lstm --precision nvfp4", "the char LSTM's only Linear is its head"},
      {"train --steps 1 --state-dtype f32", "--state-dtype f32 sets the dtype of Adam's moments"},
      {"train --steps 1 --stop-signals TERM,KILL", "SIGKILL cannot be caught"},
      {"train --steps 1 --stop-signals TERM,PWR", "unknown signal 'PWR'"},
      {"train --steps 1 --keep 3", "--keep requires --save-every"},
      {"train --steps 1 --save-every 0", "--save-every: 0 is not allowed"},
      {"train --steps 1 --save-every 5 --checkpoint-dir /nonexistent-dir/run", "does not exist"},
      {"train --steps 1 --test-subset 1", "--test-subset: 1 is not allowed: give a whole number >= 2"},
      {"train --steps 1 --data text --model lstm --test-subset 64",
       "--test-subset 64: text is scored in windows of --context + 1 = 65 characters; give at least 65"},
  };
  if (cuda_device_count() == 0)  // without a GPU, asking for one is refused before any data is read
    cases.push_back({"train --steps 1 --device cuda", "mixgrad train --device cuda: cuda:0 is not available"});
  for (const auto& [arguments, needle] : cases) {
    Run run = mixgrad(arguments);
    INFO(arguments << "\n" << run.output);
    CHECK(run.status == 1);
    CHECK(run.output.find(needle) != std::string::npos);
    CHECK(run.output.starts_with("error: "));
    CHECK(std::count(run.output.begin(), run.output.end(), '\n') == 1);  // one line
    CHECK(run.output.find("step 1/") == std::string::npos);  // no training happened
  }
}

TEST_CASE("--test-subset N scores the first N test images: an accuracy in steps of 1 / N, the same model's") {
  TempDir tmp;
  const auto accuracy = [&](const std::string& flags) {
    const auto summary = tmp / "summary.json";
    REQUIRE(mixgrad(kSmallRun + " --steps 3" + flags + fmt::format(" --summary {}", summary)).status == 0);
    std::ifstream file(summary);
    return nlohmann::json::parse(file)["test_accuracy"].get<double>();
  };
  const double all = accuracy(""), part = accuracy(" --test-subset 200");
  CHECK(part * 200 == doctest::Approx(std::round(part * 200)).epsilon(1e-9));
  CHECK(all * 10000 == doctest::Approx(std::round(all * 10000)).epsilon(1e-9));
  CHECK(part > 0.3);  // the same trained model: far above chance (0.1) on either set
  CHECK(all > 0.3);
}

TEST_CASE("a flag given twice takes its last value, so scripts can pass defaults the user overrides") {
  TempDir tmp;
  Run run = mixgrad(kSmallRun + fmt::format(" --steps 9 --steps 2 --optimizer adam --optimizer sgd --summary {}",
                                            tmp / "summary.json"));
  REQUIRE(run.status == 0);
  std::ifstream file(tmp / "summary.json");
  CHECK(nlohmann::json::parse(file)["steps"] == 2);
}

TEST_CASE("with no length a run trains one epoch of images, and says what it runs and when it ends") {
  TempDir tmp;
  Run run = mixgrad(
      fmt::format("train --model mlp --subset 256 --batch 64 --threads 1 --summary {}", tmp / "summary.json"));
  REQUIRE(run.status == 0);
  CHECK(run.output.find("mixgrad train: on cpu; 1 thread(s), f32 GEMM by ") != std::string::npos);
  CHECK(run.output.find("step 1/4  smoothed loss ") != std::string::npos);  // a pipe: plain lines
  CHECK(run.output.find("  eta ") != std::string::npos);
  std::ifstream file(tmp / "summary.json");
  CHECK(nlohmann::json::parse(file)["steps"] == 4);  // 256 images in batches of 64
}

TEST_CASE("--lr 0 runs forward and backward and leaves the weights as they were") {
  TempDir tmp;
  for (const char* optimizer : {"sgd", "adam", "adagrad"}) {
    INFO(optimizer);
    const std::string base = kSmallRun + " --lr 0 --optimizer " + optimizer;
    REQUIRE(mixgrad(base + fmt::format(" --steps 1 --save {}", tmp / "one.safetensors")).status == 0);
    REQUIRE(mixgrad(base + fmt::format(" --steps 3 --save {}", tmp / "three.safetensors")).status == 0);
    const Tensor one = data::load_safetensors(tmp / "one.safetensors").tensors.at("model.1.weight");
    const Tensor three = data::load_safetensors(tmp / "three.safetensors").tensors.at("model.1.weight");
    CHECK(std::memcmp(one.data_ptr(), three.data_ptr(), one.nbytes()) == 0);
  }
}

TEST_CASE("a diverging run stops with an error and status 1, keeping its log") {
  TempDir tmp;
  // Without a loss scaler: the first non-finite loss stops the run before its step.
  Run fp32 = mixgrad(kSmallRun + fmt::format(" --lr 1e30 --steps 50 --log {}", tmp / "fp32.csv"));
  CHECK(fp32.status == 1);
  CHECK(fp32.output.find("error: mixgrad train: the loss is") != std::string::npos);
  CHECK(fp32.output.find("the run diverged") != std::string::npos);
  std::ifstream log(tmp / "fp32.csv");
  std::string line, last;
  int rows = -1;  // the header
  while (std::getline(log, line)) ++rows, last = line;
  CHECK(rows >= 2);
  CHECK(rows < 50);
  CHECK((last.find(",nan,") != std::string::npos || last.find(",inf,") != std::string::npos));
  // With the GradScaler: every step is skipped as the scale backs off; 100 in a row end the run.
  Run scaled = mixgrad(kSmallRun + " --lr 1e30 --steps 300 --precision mixed_float16");
  CHECK(scaled.status == 1);
  CHECK(scaled.output.find("error: amp::GradScaler: the last 100 steps all had inf/NaN gradients") !=
        std::string::npos);
}

TEST_CASE("a run writes its CSV log, its JSON summary and the closing line") {
  TempDir tmp;
  Run run = mixgrad(kSmallRun + fmt::format(" --steps 6 --precision mixed_float16 --log {} --summary {}",
                                            tmp / "log.csv", tmp / "summary.json"));
  REQUIRE(run.status == 0);
  CHECK(run.output.find("mixed_float16 mlp on fashion-mnist: test accuracy") != std::string::npos);
  CHECK(run.output.find("mean loss of the last 6 steps") != std::string::npos);

  std::ifstream log(tmp / "log.csv");
  std::string line;
  std::getline(log, line);
  CHECK(line == "step,loss,lr,scale,skipped,seconds");
  int rows = 0;
  while (std::getline(log, line)) {
    ++rows;
    CHECK(line.starts_with(fmt::format("{},", rows)));
  }
  CHECK(rows == 6);

  std::ifstream file(tmp / "summary.json");
  nlohmann::json summary = nlohmann::json::parse(file);
  for (const char* key :
       {"recipe", "model", "steps", "skipped_steps", "final_scale", "test_accuracy", "train_seconds", "peak_rss_bytes"})
    CHECK_MESSAGE(summary.contains(key), key);
  CHECK(summary["recipe"] == "mixed_float16");
  CHECK(summary["steps"] == 6);
  CHECK(summary["final_scale"].get<double>() == 65536.0);  // 6 clean steps: no growth, no backoff
  CHECK(summary["test_accuracy"].get<double>() > 0.25);  // 10 classes: guessing gives 0.10
  CHECK(summary["peak_rss_bytes"].get<std::int64_t>() > 0);
}

// The resume contract: 2N steps in one process give bit-identical weights (and optimizer
// state) to N steps, a save, and N more steps in a new process that resumes.
TEST_CASE("resume is exact: 2N steps equal N + save + load + N in a new process") {
  TempDir tmp;
  for (const char* flags : {"--precision float16_master --optimizer sgd", "--precision mixed_float16 --optimizer adam",
                            "--precision bfloat16_pure --optimizer adam --update-rounding stochastic",
                            "--precision bfloat16_pure --optimizer sgd --update-rounding kahan",
                            "--precision bfloat16_pure --optimizer adam --state-dtype f32 --update-rounding kahan",
                            "--precision nvfp4 --optimizer adam", "--precision mxfp4 --optimizer sgd"}) {
    INFO(flags);
    const std::string base = kSmallRun + " " + flags;
    REQUIRE(mixgrad(base + fmt::format(" --steps 10 --save {} --summary {}", tmp / "straight.safetensors",
                                       tmp / "straight.json"))
                .status == 0);
    REQUIRE(mixgrad(base + fmt::format(" --steps 5 --save {}", tmp / "half.safetensors")).status == 0);
    REQUIRE(mixgrad(base + fmt::format(" --steps 10 --resume {} --save {} --summary {}", tmp / "half.safetensors",
                                       tmp / "resumed.safetensors", tmp / "resumed.json"))
                .status == 0);
    // The reported loss too: the mean of the last steps, the steps before the resume included.
    std::ifstream straight_json(tmp / "straight.json"), resumed_json(tmp / "resumed.json");
    const nlohmann::json straight_summary = nlohmann::json::parse(straight_json);
    const nlohmann::json resumed_summary = nlohmann::json::parse(resumed_json);
    CHECK(straight_summary["final_loss_steps"] == 10);
    CHECK(resumed_summary["final_loss_steps"] == 10);
    CHECK(resumed_summary["final_loss"].get<double>() == straight_summary["final_loss"].get<double>());
    check_same_checkpoint(tmp / "straight.safetensors", tmp / "resumed.safetensors");
    const StateDict straight = data::load_safetensors(tmp / "straight.safetensors").tensors;
    const StateDict half = data::load_safetensors(tmp / "half.safetensors").tensors;
    // The comparison can fail: the weights did move between step 5 and step 10.
    const Tensor& w = straight.at("model.1.weight");
    CHECK(std::memcmp(w.data_ptr(), half.at("model.1.weight").data_ptr(), w.nbytes()) != 0);
  }
}

TEST_CASE("a resume that does not fit the run is refused and says why") {
  TempDir tmp;
  REQUIRE(mixgrad(kSmallRun + fmt::format(" --steps 2 --save {}", tmp / "sgd.safetensors")).status == 0);
  Run other_recipe = mixgrad(kSmallRun +
                             fmt::format(" --steps 4 --precision float16_master --resume {}", tmp / "sgd.safetensors"));
  CHECK(other_recipe.status == 1);
  CHECK(other_recipe.output.find("error:") != std::string::npos);
  Run past = mixgrad(kSmallRun + fmt::format(" --steps 1 --resume {}", tmp / "sgd.safetensors"));
  CHECK(past.status == 1);
  CHECK(past.output.find("already at step 2") != std::string::npos);
}

// On a GPU (or the CUDA emulator, which runs this in CI): the same run as on the CPU, step for step.
// The losses differ only by the order of f32 sums and the last ulp of exp/tanh, which training
// amplifies slowly: within the 8 f16 ulps that test_cuda_ops allows a 5-step run, over 20 steps.
TEST_CASE("--device cuda trains the MLP as the CPU does: the same losses step by step, scale and accuracy") {
  if (!mg::testing::have_gpu()) return;
  TempDir tmp;
  // --test-subset: the emulator (CI's GPU) scores 1,000 test images in a tenth of 10,000's time.
  const std::string base = kSmallRun + " --steps 20 --precision mixed_float16 --test-subset 1000";
  struct Row {
    double loss, scale;
    int skipped;
  };
  const auto train = [&](const char* device) {
    const auto log = tmp / fmt::format("{}.csv", device), summary = tmp / fmt::format("{}.json", device);
    REQUIRE(mixgrad(base + fmt::format(" --device {} --log {} --summary {}", device, log, summary)).status == 0);
    std::ifstream file(log);
    std::string line;
    std::getline(file, line);  // the header
    std::vector<Row> rows;
    while (std::getline(file, line)) {
      std::istringstream fields(line);
      std::string step, loss, lr, scale, skipped;
      std::getline(fields, step, ',');
      std::getline(fields, loss, ',');
      std::getline(fields, lr, ',');
      std::getline(fields, scale, ',');
      std::getline(fields, skipped, ',');
      rows.push_back({std::stod(loss), std::stod(scale), std::stoi(skipped)});
    }
    std::ifstream json(summary);
    return std::pair{rows, nlohmann::json::parse(json)["test_accuracy"].get<double>()};
  };
  const auto [cpu, cpu_accuracy] = train("cpu");
  const auto [gpu, gpu_accuracy] = train("cuda");
  REQUIRE(cpu.size() == 20);
  REQUIRE(gpu.size() == cpu.size());
  for (std::size_t step = 0; step < cpu.size(); ++step) {
    INFO("step " << step + 1);
    CHECK(gpu[step].loss == doctest::Approx(cpu[step].loss).epsilon(8 * dtype_eps(DType::F16)));
    CHECK(gpu[step].scale == cpu[step].scale);
    CHECK(gpu[step].skipped == cpu[step].skipped);
  }
  CHECK(gpu.back().loss < gpu.front().loss);
  CHECK(gpu_accuracy == doctest::Approx(cpu_accuracy).epsilon(0.02));
}

// A step never waits for the GPU: the training loop's only waits are the reads of the steps' numbers,
// one every 16 steps and one at the end (counted by cuda::host_waits, reported in the summary).
TEST_CASE("--device cuda: the host waits once per 16 steps, for the steps' numbers, and never in a step") {
  if (!mg::testing::have_gpu()) return;
  // One recipe here (each run scores 10,000 test images on the emulator); test_cuda_host_waits counts
  // a Trainer's waits under fp32, mixed_float16 and float16_master.
  TempDir tmp;
  const auto summary = tmp / "summary.json";
  REQUIRE(mixgrad(kSmallRun + fmt::format(" --steps 40 --precision mixed_float16 --device cuda --test-subset 1000 "
                                          "--summary {}",
                                          summary))
              .status == 0);
  std::ifstream json(summary);
  CHECK(nlohmann::json::parse(json)["host_waits"].get<int>() == 3);  // after steps 16, 32 and 40
}

// --tf32 reaches the GEMMs: the header says so, and the first loss moves off the plain f32 run's by
// TF32's rounding of the operands (to 10 mantissa bits), and by no more than that.
TEST_CASE("--device cuda --tf32 runs the f32 GEMMs in TF32") {
  if (!mg::testing::have_gpu()) return;
  TempDir tmp;
  // Not --quiet: the header names the GEMMs' precision.
  const std::string base = "train --data fashion-mnist --model mlp --subset 512 --batch 64 --steps 1 --precision fp32 "
                           "--device cuda --test-subset 1000";
  const auto first_loss = [&](const std::string& flags, const char* name) {
    const auto log = tmp / fmt::format("{}.csv", name);
    Run run = mixgrad(base + flags + fmt::format(" --log {}", log));
    REQUIRE(run.status == 0);
    CHECK(run.output.find(flags.empty() ? "f32 GEMMs in f32" : "f32 GEMMs in TF32") != std::string::npos);
    std::ifstream file(log);
    std::string header, row, step, loss;
    std::getline(file, header);
    std::getline(file, row);
    std::istringstream fields(row);
    std::getline(fields, step, ',');
    std::getline(fields, loss, ',');
    return std::stod(loss);
  };
  const double f32 = first_loss("", "f32"), tf32 = first_loss(" --tf32", "tf32");
  CHECK(tf32 != f32);  // the first forward already multiplies TF32-rounded operands
  CHECK(tf32 == doctest::Approx(f32).epsilon(1e-2));  // 2^-11 per operand, summed over a few hundred products
}

// Found by editing real checkpoints: every number `--resume` reads is checked before it is used. An
// unchecked NaN, 1e300 or -1e18 step hung the program (the loop started near INT64_MIN), -3 trained
// extra steps and 2.5 was cut to 2 without a word.
TEST_CASE("a resume whose step was edited is refused, naming the entry and the value") {
  TempDir tmp;
  REQUIRE(mixgrad(kSmallRun + fmt::format(" --steps 2 --save {}", tmp / "run.safetensors")).status == 0);
  const data::SafetensorsFile saved = data::load_safetensors(tmp / "run.safetensors");
  for (double step : {std::nan(""), 1e300, -1e18, -3.0, 2.5, 1e16}) {
    INFO("extra.step = " << step);
    StateDict edited = saved.tensors;
    edited["extra.step"] = state_scalar(step);
    data::save_safetensors(tmp / "edited.safetensors", edited, saved.metadata);
    Run run = mixgrad(kSmallRun + fmt::format(" --steps 4 --resume {}", tmp / "edited.safetensors"));
    CHECK(run.status == 1);
    CHECK(run.output.find("entry 'step' must be a whole number from 0 to") != std::string::npos);
  }
  // A data loader's position is checked the same way.
  StateDict edited = saved.tensors;
  edited["extra.data.batch_index"] = state_scalar(-1);
  data::save_safetensors(tmp / "edited.safetensors", edited, saved.metadata);
  Run run = mixgrad(kSmallRun + fmt::format(" --steps 4 --resume {}", tmp / "edited.safetensors"));
  CHECK(run.status == 1);
  CHECK(run.output.find("entry 'batch_index' must be a whole number from 0 to 8, got -1") != std::string::npos);
}

// A file that cannot be written is an error, not a silent exit 0 (an ofstream fails quietly).
TEST_CASE("--log and --summary on a full disk fail with status 1 and name the file") {
  Run log = mixgrad(kSmallRun + " --steps 1 --log /dev/full");
  CHECK(log.status == 1);
  CHECK(log.output.find("writing /dev/full failed") != std::string::npos);
  Run summary = mixgrad(kSmallRun + " --steps 1 --summary /dev/full");
  CHECK(summary.status == 1);
  CHECK(summary.output.find("the summary (--summary): writing /dev/full failed") != std::string::npos);
}

TEST_CASE("a negative --seed is refused rather than wrapped to 2^64 - 1") {
  for (const char* command : {"train --seed -1", "repro --seed -5"}) {
    Run run = mixgrad(command);
    CHECK(run.status == 1);
    CHECK(run.output.find("is not allowed: give a whole number from 0 to 18446744073709551615") != std::string::npos);
  }
  CHECK(mixgrad(kSmallRun + " --steps 1 --seed 18446744073709551615").status == 0);
}
