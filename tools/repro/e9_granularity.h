// E9, scaling granularity: one scale per tensor, per 1x128 tile, or per 32 values (MX), on activations
// with outlier channels.
//
// An FP8 scale maps a block's largest magnitude onto the format's max; every value of the block far
// below that amax lands in the subnormals or flushes to zero. With one scale per tensor, a few channels
// 100x larger than the rest set the scale for all of them (DeepSeek-V3 §3.3.2: per-tensor scaling
// "makes low-precision training highly sensitive to activation outliers"); a scale per 1x128 tile or
// per 32 values confines an outlier's damage to its own block. Measured, for E4M3 (the forward format
// of every recipe), with each way of scaling a GEMM operand along its reduction (autograd/fp8.h):
// per tensor (V8/V9: Delayed reaches the scale of Current when the amax is steady), 1x128 tiles (V10),
// MX blocks of 32 with the spec's floor rule (V11) and with Transformer Engine's rounded-up exponent
// (Fp8Options::mx_rule): of the non-zero values, the share flushed to zero, the share saturated, the
// share left subnormal, and the relative error of the whole tensor (fp8_effect.h).
//   - Real activations: every nn::Linear's input in the last logged steps of a mixed_bfloat16 run (what
//     an FP8 recipe would quantise): the MLP's (E1's recipe); the tiny GPT's in the full preset.
//     How outlying their channels are: the largest channel amax over the median channel amax.
//   - Synthetic activations: rows x channels of standard normal values, a share of the channels (1%)
//     multiplied by a factor, swept from 1 (no outliers) to 10^4.
//   - The cost in training: each recipe's loss gap to mixed_bfloat16 on E8's MLP and char LSTM, and
//     that of V15, mxfp8 with the rounded-up exponent: E8's runs when E8 ran in the same call (V15 is
//     trained here), otherwise all trained here as E8 trains them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/repro/e8_fp8_parity.h"
#include "tools/repro/experiment.h"
#include "tools/repro/fp8_effect.h"

namespace mg::tools::repro {

struct E9Options {
  // E8's models and their training: the MLP whose activations are measured (its mixed_bfloat16 run),
  // the MLP and char LSTM whose loss gaps are reported, the tiny GPT's options.
  E8Options training{};
  std::int64_t watched_steps = 50;  // the activations of the logged steps among the last this many
  bool gpt = false;  // the tiny GPT's activations too (a mixed_bfloat16 run)
  std::int64_t synthetic_rows = 256, synthetic_channels = 1024;  // channels: a multiple of 128
  double outlier_share = 0.01;  // of the channels
  std::vector<double> outlier_factors{1, 10, 100, 1000, 10000};
  double headline_factor = 100;  // the factor the verdict quotes
  // The loss gaps: these variants, V5 first (the baseline); those E8 ran are taken from it when given.
  std::vector<std::string> gap_variant_ids{"V5", "V8", "V9", "V10", "V11", "V15"};
  std::vector<std::string> gap_models{"MLP", "char LSTM"};
  std::uint64_t seed = 0;
  Device device = Device::cpu();
};

// The preset's sizes from `seed`, on the CPU (the FP8 GEMMs are CPU-only).
E9Options e9_options(Preset preset, Device device, std::uint64_t seed);

// A way of scaling E9 compares: its name, the recipe it belongs to, and the options that make it.
struct E9Scaling {
  std::string name;  // "per tensor", "1x128 tiles", "MX, floor (spec)", "MX, round up (TE)"
  std::string variants;  // "V8, V9"
  Fp8Options options;
  int style = 0;  // its curves' line style: its variant's (Series::style)
};
const std::vector<E9Scaling>& e9_scalings();
// The ways of scaling by their place in e9_scalings(): what the verdicts compare.
inline constexpr std::size_t kE9PerTensor = 0, kE9Tiles = 1, kE9MxFloor = 2, kE9MxRoundUp = 3;

// One tensor (or a merge of tensors) and what each way of scaling does to it (e9_scalings() order).
struct E9Measure {
  std::string source;  // "MLP layer 3 input [64, 256]", "synthetic, 1% of channels x100"
  double outlier_factor = 0;  // synthetic: the factor; real: largest channel amax / median channel amax
  std::vector<Fp8Effect> effects{};
};

// Synthetic activations: rows x channels standard normal, round(share x channels) channels (at least
// one when share > 0) multiplied by `factor`, drawn from `seed`.
Tensor outlier_activations(std::int64_t rows, std::int64_t channels, double share, double factor, std::uint64_t seed);

// The largest channel amax over the median channel amax of x [rows, channels] (1: no outliers).
double channel_outlier_ratio(const Tensor& x);

// What each way of scaling does to x [rows, channels], as an E9Measure named `source`.
E9Measure measure_scalings(const std::string& source, const Tensor& x);

struct E9Result {
  E9Options options;
  std::vector<E9Measure> real{};  // per layer, then all layers of a model merged ("MLP, all layers")
  std::vector<E9Measure> synthetic{};  // one per outlier factor
  RunResult measured{};  // the MLP's mixed_bfloat16 run whose activations were measured
  // Per gap model: one run per gap variant (the first seed), V5 first; and which of them E8 ran.
  std::vector<E8Model> gaps{};
  std::vector<std::string> from_e8{};  // "MLP V8", ...
};

// Whether the gap run of `model` in variant `id` came from E8 (else it was trained here).
bool e9_from_e8(const E9Result& result, const std::string& model, const std::string& id);

// `e8`: E8's result when it ran in the same call (its runs give most loss gaps), or null.
E9Result run_e9(const E9Options& options, std::shared_ptr<const ImageData> images, std::shared_ptr<const TextData> text,
                const E8Result* e8 = nullptr, const Progress& progress = {});

// Writes e9_activations.csv, e9_runs.csv and e9_steps.csv (the runs trained here), and returns the section.
Section e9_section(const E9Result& result, Report& report);

extern const Heading kE9Granularity;

}  // namespace mg::tools::repro
