// E7, the paper's §3.3: FP16 products accumulated into FP32, the third technique, ablated.
//
// Every other experiment keeps f32 accumulation (the Tensor Core contract of kernels/gemm.h); here
// V7 is V4 (f16 weights, f32 master copy, dynamic loss scaling) with every f16 GEMM of its training
// steps accumulating in f16 instead (kernels/gemm.h's Accumulation::F16: the running sum rounded to
// f16 after every block of 8 products). Measured:
//   - the error of single dot products against an f64 reference, for lengths K from 64 to 65536, of
//     positive terms (uniform [0, 1) operands: the sum grows, and once its f16 spacing exceeds a
//     block's contribution the sum stops growing) and of zero-mean terms (normal operands);
//   - E1's MLP and a character LSTM trained in V0, V4 and V7. The LSTM's head weight gradient is a
//     sum over all B x T positions of the batch, the longest accumulation of either model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/repro/experiment.h"

namespace mg::tools::repro {

struct E7Options {
  std::vector<std::int64_t> dot_lengths{64, 256, 1024, 4096, 16384, 65536};
  std::int64_t dot_products = 64;  // independent dot products per length and distribution
  // The MLP: E1's (784-256-256-10, SGD momentum 0.9, cosine lr), shorter.
  std::int64_t train_examples = 10000, test_examples = 2000;
  std::int64_t mlp_steps = 600, mlp_batch = 64;
  // The char LSTM: Adam on KJV, the loss a mean over batch x context positions.
  std::int64_t train_chars = 1000000, validation_chars = 10000;
  std::int64_t lstm_steps = 150, lstm_batch = 128, context = 32;  // B x T = 4096 positions
  std::int64_t embed_dim = 32, hidden = 64;
  double lstm_lr = 1e-2;
  std::int64_t log_every = 10, eval_every = 100;
  std::vector<std::string> variant_ids{"V0", "V4", "V7"};
  std::uint64_t seed = 0;
  Device device = Device::cpu();
};

// The preset's sizes, run from `seed` on `device`.
E7Options e7_options(Preset preset, Device device, std::uint64_t seed);

// The error of dot products of length k with terms from one distribution, accumulated in f32 and in
// f16: the mean and the largest over the dot products of |computed - exact| / sum |a_i b_i| (exact:
// in f64, of the same f16 operands), so a sum that cancels is not judged by its small result.
struct DotError {
  std::string distribution;  // "positive" or "zero-mean"
  std::int64_t k = 0;
  double f32_mean = 0, f32_max = 0;
  double f16_mean = 0, f16_max = 0;
};

// Runs the dot products on `device` through kernels::gemm (batched 1 x k by k x 1 products, f16
// operands, f32 output) with each accumulation mode; operands drawn from `seed`.
std::vector<DotError> dot_product_errors(const std::vector<std::int64_t>& lengths, std::int64_t count,
                                         std::uint64_t seed, Device device);

struct E7Result {
  E7Options options;
  std::vector<DotError> dots{};
  std::vector<RunResult> mlp{}, lstm{};  // one per variant
};

E7Result run_e7(const E7Options& options, std::shared_ptr<const ImageData> images, std::shared_ptr<const TextData> text,
                const Progress& progress = {});

// Writes e7_dot_products.csv, e7_runs.csv and e7_steps.csv, and returns the section.
Section e7_section(const E7Result& result, Report& report);

extern const Heading kE7Accumulation;

}  // namespace mg::tools::repro
