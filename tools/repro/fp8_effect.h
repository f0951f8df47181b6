// What rounding a tensor into FP8 does to its values, counted: the numbers E9 (scaling granularity)
// and E11 (E4M3 against E5M2 for gradients) report.
//
// A value is quantised as the recipes quantise it (kernels/fp8.h): multiplied by its block's scale,
// rounded to the format (saturating), and read back as code x scale_inv. Of the non-zero values:
//   flushed    the result is 0: the value lay below half the format's smallest subnormal once scaled
//   subnormal  the result is a non-zero subnormal: fewer than the format's mantissa bits kept
//   saturated  the scaled value lay above the format's largest (448, 57344) and was clamped to it
// and the error two ways: ||x - q|| / ||x|| (2-norm), what rounding, flushing and clamping cost the
// tensor as a whole (dominated by its largest values), and the mean over the non-zero values of
// |x - q| / |x| (1 for a value flushed), what they cost a typical value.
#pragma once

#include <cstdint>

#include "autograd/fp8.h"
#include "core/fp8.h"
#include "core/tensor.h"
#include "kernels/fp8.h"

namespace mg::tools::repro {

struct Fp8Effect {
  std::int64_t values = 0, nonzero = 0;  // finite values seen, and the non-zero ones among them
  std::int64_t flushed = 0, subnormal = 0, saturated = 0;  // of the non-zero ones (above)
  double error_squares = 0, value_squares = 0;  // sum (x - q)^2 and sum x^2
  double element_errors = 0;  // sum over the non-zero values of |x - q| / |x|

  double flushed_share() const { return share(flushed); }  // of the non-zero values
  double subnormal_share() const { return share(subnormal); }
  double saturated_share() const { return share(saturated); }
  double relative_error() const;  // sqrt(error_squares / value_squares); 0 for an all-zero tensor
  double mean_element_error() const { return nonzero ? element_errors / static_cast<double>(nonzero) : 0.0; }
  void merge(const Fp8Effect& other);

 private:
  double share(std::int64_t part) const { return nonzero ? static_cast<double>(part) / nonzero : 0.0; }
};

// The effect of `q` (x's codes and scales, any blocks) on x: 2-D, f32, f16 or bf16, on the CPU.
Fp8Effect fp8_effect(const Tensor& x, const kernels::Fp8Tensor& q);

// x quantised as `options` quantise a GEMM operand of `role` whose reduction runs along x's columns
// (the forward GEMM's x and W, the input gradient's dy), and the effect. Delayed scaling has no
// history here: it is measured as Current, the scale a delayed history of a steady amax reaches.
Fp8Effect fp8_effect_of(const Tensor& x, Fp8Role role, const Fp8Options& options);

// x with one scale for the whole tensor (1: unscaled, as a cast to FP8 would be), in `format`.
Fp8Effect fp8_effect_with_scale(const Tensor& x, float scale, DType format);

}  // namespace mg::tools::repro
