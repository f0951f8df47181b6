// E4, the paper's Table 2 (SSD) and Figure 3: where loss scaling is needed.
//
// The control (a sweep built so that scaling must work): the 784-256-256-10 MLP with plain SGD, its loss multiplied by 2^-k and its
// learning rate by 2^k. For plain SGD the f32 trajectory is then bit-identical for every k (scaling
// by a power of two is exact in f32 far from its range limits), so fp32 is a perfect control,
// while every gradient sits k binades lower: in f16 they fall below 2^-24 and flush to zero unless
// the loss is scaled back up. Variants V0, V2 (no scaling), V3 (static S = 2^k), V4 (dynamic
// GradScaler), V5 (bf16, f32's range); k in {0, 8, 12, 14, 16}. Measured: test accuracy and the
// fraction of activation gradients that are exactly zero. By construction V3 with S = 2^k undoes
// the multiplier exactly (at k = 0 it is V2, bit for bit): a control of the mechanism, not evidence
// that a real model needs scaling.
//
// The organic case, a model whose own gradients underflow (the paper's SSD, Table 2): a Fashion-MNIST
// autoencoder 784-256-32-256-784 (ReLU), binary cross entropy with logits averaged over the B x 784
// outputs, Adam. Each output's gradient is (sigmoid(x) - pixel) / (B x 784): at B = 128 it flushes
// to zero in f16 once the model's error on that pixel is below 100352 x 2^-25 (about 3e-3), which
// the many background pixels soon are. V0, V2, V3 with S in {8, 64, 1024}, V4. Measured: test loss
// and the fraction of output-gradient values that are zero in f16, at every logged step.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tools/repro/experiment.h"

namespace mg::tools::repro {

struct E4Options {
  std::int64_t train_examples = 10000, test_examples = 1000;
  std::int64_t steps = 400, batch = 64, log_every = 10;
  double lr = 0.05;  // at k = 0; run k uses lr * 2^k
  std::vector<int> ks{0, 8, 12, 14, 16};
  std::vector<std::string> variant_ids{"V0", "V2", "V3", "V4", "V5"};  // V3 gets S = 2^k
  bool organic = true;
  std::vector<std::int64_t> organic_sizes{784, 256, 32, 256, 784};
  std::int64_t organic_steps = 400, organic_batch = 128;
  double organic_lr = 1e-3;  // Adam
  std::vector<std::string> organic_variant_ids{"V0", "V2", "V3", "V4"};  // V3 once per scale below
  std::vector<double> organic_scales{8, 64, 1024};
  std::uint64_t seed = 0;
  Device device = Device::cpu();
};

// The preset's sizes, run from `seed` on `device`.
E4Options e4_options(Preset preset, Device device, std::uint64_t seed);

struct E4Result {
  E4Options options;
  std::vector<std::vector<RunResult>> sweep{};  // sweep[i][j]: k = options.ks[i], variant options.variant_ids[j]
  // V0's runs for every k have the same losses at every logged step and the same final accuracy,
  // bit for bit, as its k = ks[0] run (false when V0 is not in variant_ids).
  bool fp32_identical_across_k = false;
  std::vector<RunResult> organic{};  // one per organic_variant_ids (V3: one per organic_scales)
};

// The mean of `value` over the logged steps where it is not NaN (NaN when there are none).
double mean_over_log(const RunResult& run, const std::function<double(const StepLog&)>& value);

// The same loss at every logged step and the same final accuracy, exactly.
bool identical_trajectories(const RunResult& a, const RunResult& b);

// Runs the sweep and the organic case. `progress` (may be empty) gets one line per run.
E4Result run_e4(const E4Options& options, std::shared_ptr<const ImageData> data, const Progress& progress = {});

// Writes e4_sweep_runs.csv, e4_sweep_steps.csv, e4_organic_runs.csv and e4_organic_steps.csv, and
// returns the section.
Section e4_section(const E4Result& result, Report& report);

extern const Heading kE4LossScaling;

}  // namespace mg::tools::repro
