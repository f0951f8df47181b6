// E14, Zamirai et al. 2020 ("Revisiting BFloat16 Training", arXiv 2010.06192): without f32 master
// weights, stochastic rounding or Kahan summation of the updates recovers f32-master accuracy.
//
// E2's MLP and schedule (plain SGD at a constant small learning rate, where an update is often below
// half a bf16 weight's ulp) in V5 mixed_bfloat16 (f32 weights: the masters), V6 bfloat16_pure (bf16
// weights, updates rounded to nearest), V23 bfloat16_pure with stochastically rounded updates and V24
// with Kahan-compensated ones (optim::UpdateRounding). Measured: test accuracy, the final training
// loss, E2's lost-update counter (a stored weight that did not change; a stochastically rounded update
// that rounded down, or a Kahan update held in the compensation, counts as lost too, though neither is
// gone), and the bytes a parameter costs (amp::MemoryReport::bytes_per_parameter) with this SGD and
// with Adam. When E2 ran in the same call, its V5 and V6 runs of the same configuration are taken.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/repro/e2_master_weights.h"
#include "tools/repro/experiment.h"

namespace mg::tools::repro {

struct E14Options {
  E2Options runs{.variant_ids = {"V5", "V6", "V23", "V24"}};  // E2's sizes, its constant-lr series
  std::uint64_t seed = 0;
  Device device = Device::cpu();
};

E14Options e14_options(Preset preset, Device device, std::uint64_t seed);

// What a parameter costs under one variant: its weight, master, gradient and optimizer state.
struct E14Bytes {
  std::string variant;  // its legend
  double sgd = 0;  // SGD without momentum, as the runs
  double adam = 0;  // Adam, moments in the parameter's dtype
  double adam_f32_moments = 0;  // Adam with f32 moments (state_dtype)
};

struct E14Result {
  E14Options options;
  std::vector<RunResult> runs{};  // options.runs.variant_ids order
  std::vector<E14Bytes> bytes{};  // likewise
};

// Trains the variants (taking V5 and V6 from `e2`, when given and of the same configuration).
E14Result run_e14(const E14Options& options, std::shared_ptr<const ImageData> data, const E2Result* e2 = nullptr,
                  const Progress& progress = {});

// Writes e14_runs.csv and e14_steps.csv, and returns the section.
Section e14_section(const E14Result& result, Report& report);

extern const Heading kE14MasterOrRounding;

}  // namespace mg::tools::repro
