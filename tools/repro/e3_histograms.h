// E3, the paper's Figures 2b and 3: how small the gradients of an FP32 run are.
//
// The fp32 runs of E1 (the MLP and the CNN) and of E5 (the character LSTM), run again with the
// same configuration and seed (so the same trajectory: recording only observes), record at every
// record_every-th step the histogram of log2|g| (amp::GradientStats) of every weight gradient and
// of every activation gradient (each op's output gradient in the backward pass), merged over the run. Shown against
// f16's ranges: below 2^-24 a value is lost (rounds to zero, or to 2^-24 from [2^-25, 2^-24)),
// in [2^-24, 2^-14) it keeps fewer than 10 mantissa bits (subnormal), from 65520 up it overflows.
// Measured per layer: the fraction exactly zero in f32 (ReLU's zeros, for instance), the fraction
// that rounding to f16 would make zero on top of those, and the fraction below 2^-24.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tools/repro/e1_parity.h"
#include "tools/repro/e5_language_model.h"
#include "tools/repro/experiment.h"

namespace mg::tools::repro {

struct E3Options {
  E1Options images{};   // the MLP and CNN runs (E1's fp32 ones)
  E5Options language{}; // the LSTM run (E5's fp32 one)
  bool text = true;     // the LSTM too (needs the KJV text, or `text` data given to run_e3)
  std::int64_t record_every = 20;  // steps between recordings (all the gradients of one step each)
};

// E1's and E5's options for the preset and device, seed set.
E3Options e3_options(Preset preset, Device device, std::uint64_t seed);

// One FP32 run's histograms, named for the report ("MLP").
struct E3Model {
  std::string model;
  RunResult run;
};

struct E3Result {
  E3Options options;
  std::vector<E3Model> models{};  // MLP, CNN, and the LSTM when options.text
};

// Of the values `stats` counted, the fraction with |g| < 2^exponent (non-zero; zeros excluded).
double fraction_below(const amp::GradientStats& stats, int exponent);

// `text` may be null when !options.text.
E3Result run_e3(const E3Options& options, std::shared_ptr<const ImageData> images, std::shared_ptr<const TextData> text,
                const std::function<void(const std::string&)>& progress = {});

// Writes e3_histograms.csv (one row per layer and exponent bin) and returns the section.
Section e3_section(const E3Result& result, Report& report);

Experiment e3_experiment();

}  // namespace mg::tools::repro
