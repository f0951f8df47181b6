// E13, NVIDIA 2025 (arXiv 2509.25149, its ablations) and a 2026 study on FP4 hardware (arXiv 2605.09825):
// what each ingredient of NVFP4 training buys.
//
// Training: E12's MLP (and the tiny GPT in the full preset) in V16 nvfp4 and with one ingredient taken
// away or changed: V18 without the Hadamard transform, V19 with a deterministic one (all signs +1),
// V20 with gradients rounded to nearest, V21 with 1x16 weight blocks instead of 16x16, V22 with every
// Linear in FP4 (the head too), beside V5 mixed_bfloat16, all from one seed. When E12 ran in the same
// call, its V5 and V16 runs are taken. Measured: the score, and the training-loss gap to V5 over the last
// quarter of the run against nvfp4's.
// Formats: the same values quantised with NVFP4's scales (E4M3 per 16 and f32 per tensor) and MXFP4's (a
// power of two per 32): the normwise error |x^ - x| / |x| and the share of non-zero values flushed to
// zero, for Gaussian values, for blocks of very different sizes, and for heavy tails.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/repro/e12_fp4_parity.h"
#include "tools/repro/experiment.h"

namespace mg::tools::repro {

struct E13Options {
  E8Options training{.cnn = false, .lstm = false, .variant_ids = {"V5", "V16", "V18", "V19", "V20", "V21", "V22"}};
  std::int64_t rows = 256, cols = 1024;  // the synthetic tensors of the format comparison
  std::uint64_t seed = 0;
  Device device = Device::cpu();
};

E13Options e13_options(Preset preset, Device device, std::uint64_t seed);

// One set of values under both formats.
struct E13FormatError {
  std::string values;  // what they are
  double nv_error = 0, mx_error = 0;  // |x^ - x| / |x|
  double nv_flushed = 0, mx_flushed = 0;  // non-zero values quantised to zero, a share of the non-zero ones
};

struct E13Result {
  E13Options options;
  E8Result training;
  std::vector<E13FormatError> formats{};
};

// The format comparison alone (no training), on `options`' synthetic tensors.
std::vector<E13FormatError> e13_format_errors(const E13Options& options);

E13Result run_e13(const E13Options& options, std::shared_ptr<const ImageData> images,
                  std::shared_ptr<const TextData> text, const E8Result* e12 = nullptr, const Progress& progress = {});

// Writes e13_runs.csv, e13_steps.csv and e13_formats.csv, and returns the section.
Section e13_section(const E13Result& result, Report& report);

extern const Heading kE13Fp4Ingredients;

}  // namespace mg::tools::repro
