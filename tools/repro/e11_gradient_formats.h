// E11, E4M3 against E5M2 for gradients: why the FP8 recipes of Micikevicius et al. 2022 are a hybrid.
//
// E4M3 has one more mantissa bit, E5M2 twice the range in binades (E4M3: 2^-9 to 448, about 18
// binades; E5M2: 2^-16 to 57344, about 32). The paper puts weights and activations in E4M3 and
// gradients in E5M2, since gradients span more binades; DeepSeek-V3 uses E4M3 for everything, made safe
// by scaling each 1x128 tile. Measured, on the tensors an FP8 recipe quantises in the backward pass
// (each nn::Linear's output gradient dy, caught at every record_every-th step of a V8 fp8_delayed run
// through linear_operands.h):
//   - in each format, unscaled (a plain cast) and with one scale per tensor (448 or 57344 / amax): of
//     the non-zero values, the share flushed to zero (underflow), the share saturated (overflow), the
//     share left subnormal, and the relative error (fp8_effect.h);
//   - the histogram of log2(|g| / amax of its tensor), the binades below the scale point, against the
//     ranges each format keeps under per-tensor scaling;
//   - training: V5 mixed_bfloat16, V8 fp8_delayed (E5M2 gradients) and V12 (V8 with E4M3 gradients).
// On E1's MLP (every layer in FP8) and on the char LSTM (its head in FP8: the logits' gradient
// (softmax - one-hot) / (B T), whose small probabilities span many binades).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/repro/e1_parity.h"
#include "tools/repro/e5_language_model.h"
#include "tools/repro/experiment.h"
#include "tools/repro/fp8_effect.h"

namespace mg::tools::repro {

struct E11Options {
  E1Options images{};  // the MLP, E1's recipe
  E5Options language{.steps = 150, .log_every = 10, .eval_every = 50, .optimizers = {"adam"}, .adam_lr = 1e-2};
  std::int64_t record_every = 50;  // steps between gradient recordings (of the logged steps)
  std::vector<std::string> variant_ids{"V5", "V8", "V12"};  // V5 first (the baseline); V8 is recorded
  std::uint64_t seed = 0;
  Device device = Device::cpu();
};

// The preset's sizes from `seed`, on the CPU (the FP8 GEMMs are CPU-only).
E11Options e11_options(Preset preset, Device device, std::uint64_t seed);

// The four ways E11 puts a gradient into FP8, in this order.
struct E11Cast {
  std::string name;  // "E4M3 unscaled", ...
  DType format;
  bool scaled;  // one scale per tensor (format max / amax), else a plain cast
};
const std::vector<E11Cast>& e11_casts();

// Histogram of log2(|g| / amax of g's tensor): bin b holds -(b + 1) < log2 <= -b, for b < kBins - 1;
// the last bin everything further down. Zeros are left out.
struct RelativeExponents {
  static constexpr int kBins = 40;
  std::array<std::int64_t, kBins> counts{};
  void add(const Tensor& gradient);
};

// The output gradients of one Linear (or of all of a model's), merged over the steps recorded.
struct E11Gradients {
  std::string layer;  // "5", "head", "all layers"
  std::int64_t tensors = 0;  // tensors recorded (one per step recorded)
  std::vector<Fp8Effect> effects{};  // one per e11_casts()
  RelativeExponents exponents{};
};

struct E11Model {
  std::string name;  // "MLP", "char LSTM"
  bool text = false;
  std::vector<RunResult> runs{};  // one per variant
  std::vector<E11Gradients> gradients{};  // per layer (backward order), then "all layers"
};

struct E11Result {
  E11Options options;
  std::vector<E11Model> models{};
};

E11Result run_e11(const E11Options& options, std::shared_ptr<const ImageData> images,
                  std::shared_ptr<const TextData> text, const Progress& progress = {});

// Writes e11_gradients.csv, e11_runs.csv and e11_steps.csv, and returns the section.
Section e11_section(const E11Result& result, Report& report);

extern const Heading kE11GradientFormats;

}  // namespace mg::tools::repro
