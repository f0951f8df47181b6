// How an FP8 scale follows from an amax, written once for the host and the device: the recipes
// (autograd/fp8.h's Fp8Options) choose the rule, and the quantisation kernels (kernels/fp8.h,
// fp8_quantize_fitted) apply it where the amax was measured, so that a GPU's scales never travel to
// the host and back.
//
//   per tensor (Current, Delayed)  scale = fp8_max / amax / 2^margin, or the previous scale when amax
//                                  is 0, inf or NaN (one bad step does not reset the scale)
//   block (DeepSeek-V3)            scale = fp8_max / amax, 1 for an empty or non-finite block
//   MX (OCP MX v1.0)               scale = 2^-e, e the block's shared exponent, clamped to E8M0's range:
//                                  e = floor(log2 amax) - emax (the spec), or ceil(log2(amax / fp8_max))
//                                  (Transformer Engine's rounding up, which never saturates)
//   power_of_two                   per tensor and block: the scale rounded down to a power of two, so
//                                  that scale_inv is exact
//
// Delayed scaling keeps a history of amaxes per role (fp8_record_amax): the newest in column 0, and
// the next scale comes from their max (a NaN anywhere keeps the previous scale, as Transformer Engine
// does) or from the newest alone.
//
// The arithmetic is in f64 (fp8_max / amax is exact there) and rounded once to f32, the same on both
// sides: tests/test_fp8_scaling.cpp and tests/test_cuda_fp8.cpp compare the bits.
#pragma once

#include <math.h>

#include <cstdint>

#include "core/fp8.h"
#include "core/host_device.h"

namespace mg::kernels {

struct Fp8ScaleRule {
  enum class Kind : std::uint8_t { PerTensor, Block, Mx };
  Kind kind = Kind::PerTensor;
  DType format = DType::E4M3;
  int margin = 0;  // PerTensor: the scale is divided by 2^margin
  bool power_of_two = false;  // PerTensor and Block
  bool mx_floor = true;  // Mx: the spec's floor; false: the exponent rounded up
};

namespace detail {
MG_HOST_DEVICE inline bool usable_amax(float amax) {
  return amax > 0.0f && amax <= 3.402823466e38f;  // finite and not 0 (false for NaN)
}
}  // namespace detail

// The scale of a block whose largest magnitude is `amax`; `previous`: the scale kept when a per-tensor
// amax is unusable.
MG_HOST_DEVICE inline float fp8_scale(float amax, const Fp8ScaleRule& rule, float previous) {
  const fp8::FormatInfo info = fp8::format_info(rule.format);
  const bool usable = detail::usable_amax(amax);
  if (rule.kind == Fp8ScaleRule::Kind::Mx) {
    if (!usable) return 1.0f;
    int exponent = 0;
    if (rule.mx_floor) {
      frexp(static_cast<double>(amax), &exponent);  // amax = f * 2^exponent, f in [0.5, 1)
      exponent = exponent - 1 - info.emax;  // floor(log2 amax) - emax
    } else {
      const double ratio = static_cast<double>(amax) / info.max;  // exact in f64
      const double f = frexp(ratio, &exponent);  // ceil(log2 ratio): exponent, or exponent - 1 at a power of 2
      if (f == 0.5) --exponent;
    }
    exponent = exponent < -127 ? -127 : exponent > 127 ? 127 : exponent;  // E8M0's range
    return static_cast<float>(ldexp(1.0, -exponent));
  }
  if (!usable) return rule.kind == Fp8ScaleRule::Kind::Block ? 1.0f : previous;
  double scale = static_cast<double>(info.max) / amax;
  if (rule.kind == Fp8ScaleRule::Kind::PerTensor) scale = ldexp(scale, -rule.margin);
  if (scale > 3.4028234663852886e38) scale = 3.4028234663852886e38;  // FLT_MAX
  if (rule.power_of_two) {
    int exponent = 0;
    frexp(scale, &exponent);
    exponent -= 1;
    scale = ldexp(1.0, exponent < -126 ? -126 : exponent > 127 ? 127 : exponent);
  }
  return static_cast<float>(scale);
}

// Delayed scaling's bookkeeping for one role, after its tensor was quantised with `*scale`: `amax`
// enters the history `row` (len entries, the newest first; the oldest drops), and `*scale` becomes
// the next step's, from the history's max (or, most_recent, from `amax` alone).
MG_HOST_DEVICE inline void fp8_record_amax(float* row, std::int64_t len, float amax, bool most_recent,
                                           const Fp8ScaleRule& rule, float* scale) {
  for (std::int64_t i = len - 1; i > 0; --i) row[i] = row[i - 1];
  row[0] = amax;
  float source = row[0];
  if (!most_recent)
    for (std::int64_t i = 1; i < len; ++i)
      if (row[i] != row[i] || row[i] > source) source = source != source ? source : row[i];  // a NaN wins
  *scale = fp8_scale(source, rule, *scale);
}

}  // namespace mg::kernels
