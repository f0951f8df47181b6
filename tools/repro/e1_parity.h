// E1, the paper's Table 1: mixed precision matches FP32.
//
// The 784-256-256-10 MLP and the two-convolution CNN (nn::cnn) on Fashion-MNIST, SGD with momentum
// and a cosine-decaying rate,
// in V0 fp32, V2 float16_master (no loss scaling: Table 1's CNNs needed none), V3 float16_master
// with S = 1024, V4 float16_master with the dynamic GradScaler and V5 mixed_bfloat16. Measured:
// test accuracy over the run, and at the end each variant's distance from fp32. The paper's claim
// is parity within a few tenths of a point. What "parity" can mean is bounded by the noise of the
// measurement itself, so fp32 also runs with other seeds (other initial weights and batch order):
// a variant is at parity when its gap to fp32 is within the largest of 0.5 points, one standard
// error of the accuracy on n test images (sqrt(p (1 - p) / n)) and the spread of fp32 over seeds.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tools/repro/experiment.h"

namespace mg::tools::repro {

struct E1Options {
  std::int64_t train_examples = 10000, test_examples = 2000;
  std::int64_t mlp_steps = 1000, cnn_steps = 600, batch = 64;
  std::int64_t log_every = 10, eval_every = 100;
  // Cosine decay from lr to lr * min_lr_factor: the runs end settled, so the final accuracies
  // compare the precisions rather than where each one's last steps happened to bounce.
  double lr = 0.05, momentum = 0.9, min_lr_factor = 0.01;
  nn::CnnOptions cnn{.channels1 = 8, .channels2 = 16, .hidden = 64};
  std::vector<std::string> variant_ids{"V0", "V2", "V3", "V4", "V5"};
  double static_scale = 1024;  // V3's S
  std::vector<std::uint64_t> fp32_seed_offsets{1};  // fp32 also runs with seed + each of these
  std::uint64_t seed = 0;
  Device device = Device::cpu();
};

// The preset's sizes; seed and device are the caller's to set.
E1Options e1_options(Preset preset);

struct E1Result {
  E1Options options;
  std::vector<RunResult> mlp{}, cnn{};  // one per variant, options.variant_ids order
  std::vector<RunResult> mlp_fp32_seeds{}, cnn_fp32_seeds{};  // V0 at the other seeds
};

// The largest minus the smallest final accuracy of fp32 over its seeds (0 with one seed).
double fp32_seed_spread(const std::vector<RunResult>& runs, const std::vector<RunResult>& other_seeds);

// One standard error of an accuracy p measured on n examples: sqrt(p (1 - p) / n).
double accuracy_standard_error(double accuracy, std::int64_t examples);

// One run of E1: `make` (the MLP or the CNN) for `steps` in variant `v` from `seed`. E3 records the
// histograms of the same fp32 runs through it.
RunConfig e1_run_config(const E1Options& options, std::shared_ptr<const ImageData> data, const ModelFactory& make,
                        std::int64_t steps, const Variant& v, std::uint64_t seed);

E1Result run_e1(const E1Options& options, std::shared_ptr<const ImageData> data,
                const std::function<void(const std::string&)>& progress = {});

// Writes e1_runs.csv and e1_steps.csv, and returns the section.
Section e1_section(const E1Result& result, Report& report);

Experiment e1_experiment();

}  // namespace mg::tools::repro
