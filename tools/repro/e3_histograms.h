// E3, the paper's Figures 2b and 3: how small the gradients of an FP32 run are.
//
// Histograms. The fp32 runs of E1 (the MLP and the CNN) and of E5 (the character LSTM), run again
// with the same configuration and seed (so the same trajectory: recording only observes), record at
// every record_every-th step the histogram of log2|g| (amp::GradientStats) of every weight gradient
// and of every layer's output gradient, merged over the run. The activation gradients counted are
// those a framework materialises between layers, what a PyTorch backward hook on each module is
// handed: the gradient of each module's output (a convolution's pre-activation, a ReLU's, a
// pooling's, the LSTM's h sequence, the logits). A layer's input gradient is the previous layer's
// output gradient, counted once; the first layer's input (images, tokens) gets none. Tensors inside
// a layer are left out: a convolution's im2col buffer and GEMM rows, the LSTM's gates and its c
// state (which gets no gradient from outside the layer), the loss's own reshapes. Which backward
// entries those are, e3_layer_outputs finds by running the model's forward once under an op
// observer: a module's output is the last op recorded in its scope (nn::Module::operator() opens it).
//
// Long run (Figure 2b over training). The MLP with E1's recipe (SGD with momentum, a cosine-decaying
// rate) for long_run_steps, every weight's gradient recorded every checkpoint_every steps: per
// layer, the fraction of its values that f16 flushes to zero (non-zero in f32, |g| <= 2^-25), and
// the first checkpoint at which that fraction reaches 5% (the paper's speech model).
//
// Shown against f16's ranges: below 2^-24 a value is lost (rounds to zero, or to 2^-24 from
// [2^-25, 2^-24)), in [2^-24, 2^-14) it keeps fewer than 10 mantissa bits (subnormal), from 65520
// up it overflows. Measured per layer: the fraction exactly zero in f32 (ReLU's zeros, for
// instance), the fraction that rounding to f16 would make zero on top of those, and the fraction
// below 2^-24.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "amp/diagnostics.h"
#include "amp/precision_stats.h"
#include "tools/repro/e1_parity.h"
#include "tools/repro/e5_language_model.h"
#include "tools/repro/experiment.h"
#include "tools/repro/layer_outputs.h"

namespace mg::tools::repro {

struct E3Options {
  E1Options images{};  // the MLP and CNN runs (E1's fp32 ones), and the long run's recipe and data
  E5Options language{};  // the LSTM run (E5's fp32 one)
  bool text = true;  // the LSTM too (needs the KJV text, or `text` data given to run_e3)
  std::int64_t record_every = 20;  // steps between recordings (all the gradients of one step each)
  // The long MLP run: its steps (0: none) and the steps between its checkpoints. Quick: ~10 s on
  // one core of this project's CPU (0.75-0.85 ms a step), 77 epochs of E1's 10000 images.
  std::int64_t long_run_steps = 12000, checkpoint_every = 100;
};

// E1's and E5's options for the preset and device, seed set.
E3Options e3_options(Preset preset, Device device, std::uint64_t seed);

// One FP32 run's histograms, named for the report ("MLP").
struct E3Model {
  std::string model;
  RunResult run;
  // The activation gradients counted, in the order backward meets them (the logits first).
  std::vector<E3Layer> layers{};
};

// One checkpoint of the long run. Per weight (long_run.weight_names order): the fraction of its
// gradient's values exactly zero, and the fraction f16 flushes to zero on top of those.
struct E3Checkpoint {
  std::int64_t step = 0;
  double lr = 0, loss = 0;
  std::vector<double> zero{}, flushed{};
  double all_zero = 0, all_flushed = 0;  // the same over every weight's values together
};

struct E3Result {
  E3Options options;
  std::vector<E3Model> models{};  // MLP, CNN, and the LSTM when options.text
  RunResult long_run{};  // the long MLP run (its log empty when options.long_run_steps is 0)
  std::vector<std::int64_t> long_run_weight_values{};  // elements of each weight
  std::vector<E3Checkpoint> checkpoints{};  // one per logged step of long_run
};

// Of the values `stats` counted, the fraction with |g| < 2^exponent (non-zero; zeros excluded).
double fraction_below(const amp::GradientStats& stats, int exponent);

// The step of the first checkpoint whose `value` (a weight's flushed fraction, say) reaches
// `threshold`; nullopt when none does.
std::optional<std::int64_t> first_step_reaching(const std::vector<E3Checkpoint>& checkpoints,
                                                const std::function<double(const E3Checkpoint&)>& value,
                                                double threshold);

// `text` may be null when !options.text.
E3Result run_e3(const E3Options& options, std::shared_ptr<const ImageData> images, std::shared_ptr<const TextData> text,
                const Progress& progress = {});

// Writes e3_histograms.csv (one row per layer and exponent bin), e3_layers.csv and
// e3_weights_over_training.csv (one row per checkpoint and weight), and returns the section.
Section e3_section(const E3Result& result, Report& report);

// The x ticks of a log2|g| histogram (amp::GradientStats' bins): every 8 binades, so that -24 (f16's
// smallest subnormal) and 16 (its overflow) get one; the end ticks say that their bins take in
// everything beyond ("≤ -40", "≥ 16"). E3's figures and mixgrad train --inspect's use them.
std::vector<Tick> gradient_exponent_ticks();

// The x axis of log2|g| ends a bin past the last one (which holds 2^16 and up), so that the "inf"
// band is wide enough for its label.
constexpr int kGradientAxisEnd = amp::GradientStats::kMaxExponent + 2;

// A format's ranges as bands on that axis (bin e holds 2^e <= |x| < 2^(e+1)): lost (below its
// smallest subnormal), subnormal, normal, and past its largest value. E3's figures draw f16's;
// mixgrad train --inspect's draw each format's (for FP8, of the values times their scale).
std::vector<Band> format_bands(DType format);

// A log2|g| histogram as a curve: x = the bin's centre, y = its share of all values (zeros included
// in the denominator, so the curve sums to the non-zero fraction).
Series histogram_series(const std::string& name, const amp::GradientStats& stats);

extern const Heading kE3Histograms;

}  // namespace mg::tools::repro
