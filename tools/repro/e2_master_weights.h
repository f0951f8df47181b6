// E2, the paper's Figure 2a: why an f32 master copy of the weights.
//
// The 784-256-256-10 MLP on Fashion-MNIST with plain SGD (no momentum) at a small learning rate,
// once with a constant rate and once with a decaying one (cosine), in V0 fp32, V1 float16_pure,
// V2 float16_master, V5 mixed_bfloat16 and V6 bfloat16_pure. An SGD update lr * g smaller than half
// a weight's ulp (2^-11 relative in f16, 2^-8 in bf16) leaves an f16/bf16 weight unchanged; the
// master copy accumulates it in f32. Measured: test accuracy over the run and the fraction of
// updates lost at each step (optimizer last_update(): lost / nonzero).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/repro/experiment.h"

namespace mg::tools::repro {

struct E2Options {
  std::int64_t train_examples = 10000, test_examples = 2000;
  std::int64_t steps = 1500, batch = 64;
  std::int64_t log_every = 10, eval_every = 100;
  double lr = 1e-3;  // constant-rate series
  double decay_lr = 3e-3;  // decaying series: starts here ...
  double decay_min_factor = 0.01;  // ... and ends at decay_lr * decay_min_factor (cosine)
  std::vector<std::string> variant_ids{"V0", "V1", "V2", "V5", "V6"};
  std::uint64_t seed = 0;
  Device device = Device::cpu();
};

// The preset's sizes, run from `seed` on `device`.
E2Options e2_options(Preset preset, Device device, std::uint64_t seed);

struct E2Result {
  E2Options options;
  std::vector<RunResult> constant_lr{};  // one per variant, options.variant_ids order
  std::vector<RunResult> decaying_lr{};
};

// The run of variant `v` at the constant rate (E14 trains more variants the same way).
RunConfig e2_run_config(const E2Options& options, std::shared_ptr<const ImageData> data, const Variant& v);

// Trains every variant under both schedules. `progress` (may be empty) gets one line per run.
E2Result run_e2(const E2Options& options, std::shared_ptr<const ImageData> data, const Progress& progress = {});

// Writes e2_runs.csv (one row per run) and e2_steps.csv (one row per logged step of every run),
// and returns the section with its tables, verdict and plots.
Section e2_section(const E2Result& result, Report& report);

extern const Heading kE2MasterWeights;

}  // namespace mg::tools::repro
