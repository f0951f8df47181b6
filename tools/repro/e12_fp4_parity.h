// E12, NVIDIA 2025 ("Pretraining Large Language Models with NVFP4", arXiv 2509.25149): NVFP4 training
// tracks FP8 training, and NVFP4's scales (E4M3 per 16 values and f32 per tensor) beat MXFP4's (a
// power of two per 32).
//
// E8's models and runs (tools/repro/e8_fp8_parity.h: the MLP and the CNN as E1, the tiny GPT in the full
// preset) in V5 mixed_bfloat16, V9 fp8_current, V16 nvfp4 and V17 mxfp4, seeds as E8. Not the char LSTM:
// the FP4 recipes act on nn::Linear layers and keep the model's last one (the head) in bf16, and the
// head is the LSTM's only Linear (its recurrence is one op of its own), so nothing of it would run in
// FP4. When E8 ran in the same call, its V5 and V9 runs are taken. Measured as E8: each recipe's paired
// score difference from V5 and its training-loss gap to V5 over the first and last quarter of the run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/repro/e8_fp8_parity.h"
#include "tools/repro/experiment.h"

namespace mg::tools::repro {

struct E12Options {
  E8Options training{.lstm = false, .variant_ids = {"V5", "V9", "V16", "V17"}};  // V5 first: the baseline
  std::uint64_t seed = 0;
  Device device = Device::cpu();
};

E12Options e12_options(Preset preset, Device device, std::uint64_t seed);

// E8's result type: one model in every variant and seed.
using E12Result = E8Result;

// Trains what E8 (when given, of the same preset and seed) did not.
E12Result run_e12(const E12Options& options, std::shared_ptr<const ImageData> images,
                  std::shared_ptr<const TextData> text, const E8Result* e8 = nullptr, const Progress& progress = {});

// Writes e12_runs.csv and e12_steps.csv, and returns the section.
Section e12_section(const E12Result& result, Report& report);

extern const Heading kE12Fp4Parity;

}  // namespace mg::tools::repro
