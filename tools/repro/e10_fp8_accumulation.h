// E10, DeepSeek-V3 §3.3.2: the FP8 GEMM's accumulator, and promoting its partial sums to FP32.
//
// Hopper's FP8 Tensor Cores keep about 14 significant bits of their running sum, not f32's 24;
// DeepSeek-V3 measured a maximum relative error of nearly 2% for random matrices at K = 4096, and
// fixed it by adding the partial sum into an f32 register every N_C = 128 products. kernels/fp8.h
// models that accumulator (Fp8Accumulator::limited): groups of 32 exact products, each added to a
// running sum cut to 13 mantissa bits by truncation (the rounding is an assumption, not a
// measurement), promoted to f32 every promote_every products. Measured:
//   - the error of FP8 GEMMs C = A B^T against K, for E4M3 operands with per-tensor scales (so that
//     the whole of K is one chunk), standard normal (zero-mean products) and uniform [0, 1) (positive
//     products, a sum that only grows), each element's error |c - exact| / sum_k |a_k b_k| (exact: the
//     same FP8 values multiplied and summed in f64; for positive products it is the relative error),
//     and the whole product's ||C - exact|| / ||exact|| (Frobenius), with five accumulators: f32, the
//     13-bit model never promoted, promoted every 128, and, as checks of the model's assumptions,
//     rounding to nearest instead of truncating, and every product added alone instead of in exact
//     groups of 32 (both never promoted);
//   - E1's MLP trained in V8 fp8_delayed (f32 accumulation), V13 (the 13-bit model, never promoted)
//     and V14 (promoted every 128). The model is scalar (about 1 GFLOP/s): the runs are short.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/repro/e1_parity.h"
#include "tools/repro/experiment.h"

namespace mg::tools::repro {

struct E10Options {
  std::vector<std::int64_t> lengths{64, 128, 256, 512, 1024, 2048, 4096};  // K
  std::int64_t rows = 32, cols = 32;  // the outputs of each GEMM: rows x cols dot products of length K
  E1Options images{.mlp_steps = 150, .batch = 32, .log_every = 10, .eval_every = 50};  // E1's recipe, shorter
  std::vector<std::string> variant_ids{"V8", "V13", "V14"};  // V8 first: the baseline
  std::uint64_t seed = 0;
  Device device = Device::cpu();
};

// The preset's sizes from `seed`, on the CPU (the FP8 GEMMs are CPU-only).
E10Options e10_options(Preset preset, Device device, std::uint64_t seed);

// An accumulator E10 compares, by name.
struct E10Accumulator {
  std::string name;  // "f32 (V8)", "13 bits, never promoted (V13)", ...
  kernels::Fp8Accumulator accumulator;
};
const std::vector<E10Accumulator>& e10_accumulators();

// The errors of one length and distribution, per accumulator (e10_accumulators() order): the mean and
// the largest over the rows x cols elements of |c - exact| / sum_k |a_k b_k|, and ||C - exact|| / ||exact||.
struct GemmError {
  std::string distribution;  // "zero-mean" or "positive"
  std::int64_t k = 0;
  std::vector<double> mean{}, largest{}, normwise{};
};

// Every length with both distributions, operands drawn from `seed`.
std::vector<GemmError> fp8_gemm_errors(const std::vector<std::int64_t>& lengths, std::int64_t rows, std::int64_t cols,
                                       std::uint64_t seed);

struct E10Result {
  E10Options options;
  std::vector<GemmError> errors{};
  std::vector<RunResult> mlp{};  // one per variant
};

E10Result run_e10(const E10Options& options, std::shared_ptr<const ImageData> images, const Progress& progress = {});

// Writes e10_gemm_errors.csv, e10_runs.csv and e10_steps.csv, and returns the section.
Section e10_section(const E10Result& result, Report& report);

extern const Heading kE10Fp8Accumulation;

}  // namespace mg::tools::repro
