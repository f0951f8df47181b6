// E1, the paper's Table 1: mixed precision matches FP32.
//
// The 784-256-256-10 MLP and the two-convolution CNN (nn::cnn) on Fashion-MNIST, SGD with momentum
// and a cosine-decaying rate, in V0 fp32, V1 float16_pure (no master copy: E2's subject, here under
// the normal recipe), V2 float16_master (no loss scaling: Table 1's CNNs needed none), V3 with
// S = 1024 (full preset), V4 float16_master with the dynamic GradScaler and V5 mixed_bfloat16, each
// at several seeds (other initial weights and batch order). Measured: test accuracy over the run,
// and at the end each variant's paired difference from fp32: runs of one seed share their initial
// weights and batches, so the difference is taken seed by seed, and its mean comes with a 95%
// confidence interval (Student's t over the seeds). What "parity" can mean is bounded by the noise
// of the measurement itself: a variant is at parity when its mean difference is within the largest
// of 0.5 points, one standard error of the accuracy on n test images (sqrt(p (1 - p) / n)) and the
// spread of fp32 over seeds; parity is established when the whole interval lies within that margin.
// V1 is judged apart: it is not the paper's mixed precision.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/repro/experiment.h"

namespace mg::tools::repro {

struct E1Options {
  std::int64_t train_examples = 10000, test_examples = 2000;
  std::int64_t mlp_steps = 600, cnn_steps = 400, batch = 64;
  std::int64_t log_every = 10, eval_every = 100;
  // Cosine decay from lr to lr * min_lr_factor: the runs end settled, so the final accuracies
  // compare the precisions rather than where each one's last steps happened to bounce.
  double lr = 0.05, momentum = 0.9, min_lr_factor = 0.01;
  nn::CnnOptions cnn{.channels1 = 8, .channels2 = 16, .hidden = 64};
  std::vector<std::string> variant_ids{"V0", "V1", "V2", "V4", "V5"};
  double static_scale = 1024;  // V3's S
  std::vector<std::uint64_t> seed_offsets{0, 1, 2};  // every variant runs with seed + each of these
  std::uint64_t seed = 0;
  Device device = Device::cpu();
};

// The preset's sizes, run from `seed` on `device`.
E1Options e1_options(Preset preset, Device device, std::uint64_t seed);

struct E1Result {
  E1Options options;
  // One per variant (options.variant_ids order), at the first seed: the curves of the plots.
  std::vector<RunResult> mlp{}, cnn{};
  // Every run: [variant][seed], options.variant_ids by options.seed_offsets (mlp_seeds[i][0] is mlp[i]).
  std::vector<std::vector<RunResult>> mlp_seeds{}, cnn_seeds{};
};

// The paired difference of a variant's final accuracy (or another `metric`: E8 compares bits/char too)
// from fp32's over the seeds (variant[s] and fp32[s] share seed s): mean, sample standard deviation
// and the 95% confidence interval of the mean (Student's t with seeds - 1 degrees of freedom; with one
// seed the interval is the point).
struct PairedDifference {
  double mean = 0, deviation = 0, low = 0, high = 0;
  std::size_t seeds = 0;
};
PairedDifference paired_difference(const std::vector<RunResult>& variant, const std::vector<RunResult>& fp32,
                                   double RunResult::*metric = &RunResult::final_accuracy);

// fp32's spread over seeds: its largest final accuracy (or `metric`) minus its smallest.
double fp32_seed_spread(const std::vector<RunResult>& fp32_runs,
                        double RunResult::*metric = &RunResult::final_accuracy);

// One standard error of an accuracy measured on n examples: sqrt(p (1 - p) / n).
double accuracy_standard_error(double accuracy, std::int64_t examples);

RunConfig e1_run_config(const E1Options& options, std::shared_ptr<const ImageData> data, const ModelFactory& make,
                        std::int64_t steps, const Variant& v, std::uint64_t seed);

E1Result run_e1(const E1Options& options, std::shared_ptr<const ImageData> data, const Progress& progress = {});

// Writes e1_runs.csv and e1_steps.csv, and returns the section.
Section e1_section(const E1Result& result, Report& report);

extern const Heading kE1Parity;

}  // namespace mg::tools::repro
