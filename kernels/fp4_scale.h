// How an FP4 block's scale and each value's code follow from the amaxes, written once for the host and
// the device (kernels/fp4.h's kernels run them on either, bit for bit).
//
// NVFP4 (NVIDIA, arXiv 2509.25149; Transformer Engine's NVFP4BlockScaling), two levels of scales:
//   S_enc   = 448 * 6 / amax(tensor)                 f32; 1 when the tensor is all zeros
//   scale_b = e4m3(amax(block) / 6 * S_enc)          one E4M3 code a block, rounded to nearest
//   code    = e2m1(x * S_enc / decode(scale_b))      rounded to nearest, or stochastically
//   x      ~= decode(code) * decode(scale_b) / S_enc
// so the block's largest magnitude lands on 6 (up to the E4M3 rounding of its scale) and the tensor's
// largest block scale on 448. A block whose scale rounds to 0 (amax(block) below 2^-10 / 448 of the
// tensor's, E4M3's smallest subnormal) is flushed to zeros.
//
// MXFP4 (OCP Microscaling Formats v1.0; Tseng et al., arXiv 2502.20586): one E8M0 scale a block,
//   e       = floor(log2 amax(block)) - 2            the spec's rule (E2M1's emax is 2), kernels/fp8_scale.h
//   code    = e2m1(x * 2^-e)                         to nearest; stochastically: e2m1(x * 2^-e * 3/4)
//   x      ~= decode(code) * 2^e                     (* 4/3 after stochastic rounding)
// The block's largest magnitude lands in [4, 8): values past 6 saturate under round to nearest, the
// spec's known cost. Rounded stochastically a value in (6, 8) would saturate every time, a bias; Tseng
// et al. scale by 3/4 first, so that the block lands in [3, 6) and stochastic rounding stays unbiased,
// and undo it after the GEMM: the 4/3 is part of the tensor's factor below.
//
// Every tensor has one f32 factor the GEMM applies after summing (its epilogue): 1 / S_enc for NVFP4,
// 1 or 4/3 for MXFP4. A non-finite amax makes it NaN (NVFP4: the whole tensor; MXFP4: the block's scale
// is E8M0's NaN), so a NaN or inf in an operand reaches the GEMM's output and a step's overflow check,
// as in every other recipe.
#pragma once

#include <math.h>

#include <cstdint>

#include "core/fp8.h"
#include "core/host_device.h"
#include "core/stochastic_round.h"
#include "kernels/fp8_scale.h"

namespace mg::kernels {

enum class Fp4Format : std::uint8_t { Nv, Mx };  // NVFP4 (E4M3 scales per 16), MXFP4 (E8M0 scales per 32)

struct Fp4Rule {
  Fp4Format format = Fp4Format::Nv;
  bool stochastic = false;  // round the values stochastically (core/stochastic_round.h) from `stream`
  stochastic::RoundingStream stream = {};  // element i of the quantised 2-D tensor takes rounding_word(stream, i)
};

constexpr float kE2M1Max = 6.0f;
constexpr float kNvfp4ScaleMax = 448.0f;  // E4M3's largest value
constexpr float kMxfp4StochasticShrink = 0.75f;  // Tseng et al.: 3/4 before stochastic rounding

// NVFP4's S_enc from the tensor's amax: 448 * 6 / amax (at most FLT_MAX), 1 for 0, NaN when not finite.
MG_HOST_DEVICE inline float nvfp4_tensor_scale(float amax) {
  if (!(amax <= 3.402823466e38f)) return fp8::detail::bits_float(0x7FC00000u);  // NaN or inf
  if (amax == 0.0f) return 1.0f;
  const float scale = kNvfp4ScaleMax * kE2M1Max / amax;
  return scale <= 3.402823466e38f ? scale : 3.402823466e38f;
}

// A block's scale code (E4M3 for NVFP4, E8M0 for MXFP4) from its amax and the tensor's.
MG_HOST_DEVICE inline std::uint8_t fp4_block_scale(float block_amax, float tensor_amax, Fp4Format format) {
  if (format == Fp4Format::Nv)
    return fp8::encode(block_amax / kE2M1Max * nvfp4_tensor_scale(tensor_amax), DType::E4M3, fp8::Overflow::Saturate);
  if (!(block_amax <= 3.402823466e38f)) return fp8::kE8M0Nan;  // a NaN or inf in the block
  // fp8_scale gives 2^-e, e = floor(log2 amax) - 2 clamped to E8M0's range; 2^0 for an all-zero block.
  const Fp8ScaleRule rule{.kind = Fp8ScaleRule::Kind::Mx, .format = DType::E2M1};
  int exponent = 0;
  frexp(static_cast<double>(fp8_scale(block_amax, rule, 1.0f)), &exponent);  // 2^-e = 0.5 * 2^(1 - e)
  return fp8::encode_e8m0(1 - exponent);
}

// The value a block's scale code stands for.
MG_HOST_DEVICE inline float fp4_scale_value(std::uint8_t scale, Fp4Format format) {
  return fp8::decode(scale, format == Fp4Format::Nv ? DType::E4M3 : DType::E8M0);
}

// What x is multiplied by before it is rounded to E2M1: S_enc / decode(scale_b) (0 for a block scale of
// 0: the block is zeros), or 2^-e (times 3/4 when stochastic).
MG_HOST_DEVICE inline float fp4_encode_factor(std::uint8_t scale, float tensor_amax, const Fp4Rule& rule) {
  const float block = fp4_scale_value(scale, rule.format);
  if (rule.format == Fp4Format::Nv) return block == 0.0f ? 0.0f : nvfp4_tensor_scale(tensor_amax) / block;
  return (rule.stochastic ? kMxfp4StochasticShrink : 1.0f) / block;  // 1 / 2^e is exact
}

// The tensor's factor for the GEMM's epilogue: 1 / S_enc (NVFP4), 1 or 4/3 (MXFP4).
MG_HOST_DEVICE inline float fp4_tensor_factor(float tensor_amax, const Fp4Rule& rule) {
  if (rule.format == Fp4Format::Nv) return 1.0f / nvfp4_tensor_scale(tensor_amax);
  return rule.stochastic ? 1.0f / kMxfp4StochasticShrink : 1.0f;
}

// fp8::encode(x, E2M1, Saturate), by comparisons: E2M1's magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 are codes
// 0..7, so a magnitude's code is the number of midpoints it passes, each strict where its tie goes down
// to the even code (0.25, 1.25, 2.5, 5) and inclusive where it goes up (0.75, 1.75, 3.5); past 6 it
// saturates; a NaN gives the other sign's 0, as ml_dtypes does. (The general encode takes a branch
// for E2M1's subnormal 0.5 and costs several times as much; tests/test_fp4_quantize compares both.)
MG_HOST_DEVICE inline std::uint8_t e2m1_nearest(float x) {
  const std::uint32_t bits = fp8::detail::float_bits(x);
  const std::uint8_t sign = (bits >> 31) != 0 ? 0x8 : 0x0;
  const float a = fp8::detail::bits_float(bits & 0x7FFFFFFFu);
  if (!(a == a)) return sign ^ 0x8;  // NaN
  return sign | static_cast<std::uint8_t>((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                                          (a >= 3.5f) + (a > 5.0f));
}

// An element's E2M1 code: x * factor rounded to nearest (saturating at +-6), or stochastically with
// `random`, the element's rounding_word (rule.stream, its index); unused when rounding to nearest.
MG_HOST_DEVICE inline std::uint8_t fp4_encode_value(float x, float factor, const Fp4Rule& rule, std::uint32_t random) {
  float scaled = x * factor;
  if (rule.stochastic) scaled = stochastic::stochastic_round(scaled, DType::E2M1, random);
  return e2m1_nearest(scaled);  // exact for a stochastically rounded value: it is an E2M1 value already
}

// What the GEMM reads for one element: decode(code) * decode(scale_b), an exact bf16 for NVFP4 (at most
// 6 significant bits in [2^-10, 2688]) and for MXFP4 inside bf16's normal range. Outside it: past
// bf16's largest value the product is inf (only a scale code made by hand reaches it: a finite f32's
// block exponent is at most 125), and a magnitude below 2^-126 (a block whose exponent is below -124)
// is 0, as bf16 dot-product hardware (vdpbf16ps) reads a subnormal: written as 0 here, so that both
// devices and every kernel agree.
MG_HOST_DEVICE inline float fp4_decode_scaled(std::uint8_t code, float scale_value) {
  const float value = fp8::decode(code, DType::E2M1) * scale_value;
  if (value != 0.0f && value > -1.1754943508e-38f && value < 1.1754943508e-38f) return value < 0.0f ? -0.0f : 0.0f;
  return value;
}
MG_HOST_DEVICE inline float fp4_decode_value(std::uint8_t code, std::uint8_t scale, Fp4Format format) {
  return fp4_decode_scaled(code, fp4_scale_value(scale, format));  // a GPU decoding a block finds its scale once
}

}  // namespace mg::kernels
