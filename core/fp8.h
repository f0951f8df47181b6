// The two 8-bit floating-point formats of FP8 training, and E8M0, the power-of-two scale of MX blocks.
//
//   format  bits      bias  max      min normal  min subnormal  inf  NaN codes         used for
//   E4M3    s.eeee.mmm   7  448      2^-6        2^-9           no   0x7F, 0xFF        forward: weights, activations
//   E5M2    s.eeeee.mm  15  57344    2^-14       2^-16          yes  0x7D-0x7F (+sign) backward: gradients
//   E8M0    eeeeeeee   127  2^127    2^-127      -              no   0xFF              MX block scales (no sign)
//
// E4M3 is the OCP "fn" variant (OCP 8-bit Floating Point Specification v1.0, 2023; the `float8_e4m3fn`
// of ml_dtypes and PyTorch): it gives up infinities and all but one NaN per sign to gain the binade
// from 256 to 448. E5M2 is IEEE binary16 with the low byte cut off: same exponent, inf and NaN.
// Every value of both formats is exactly an f16, a bf16 and an f32 value, so decoding is exact and
// the product of two codes is exact in f32 (4 + 4 significant bits at most).
//
// Encoding rounds to nearest, ties to even, and keeps subnormals. What happens past the largest
// finite value is a choice (Overflow), and what each choice gives for every input class is:
//
//   input                  Overflow::Saturate (training)   Overflow::NonFinite (the format's own rule)
//   |x| rounds past max    +-max (E4M3 448, E5M2 57344)     E4M3: NaN (0x7F/0xFF), E5M2: +-inf (0x7C/0xFC)
//   +-inf                  +-max                           E4M3: NaN,             E5M2: +-inf
//   NaN                    NaN (0x7F/0xFF; E5M2 0x7E/0xFE)  NaN, the same codes
//
// "Rounds past max": E4M3 448 < |x| <= 464 rounds to 448 (464 is the tie between 448 and 480, whose
// mantissa would be odd); above 464 it overflows. E5M2: 61440 is the tie between 57344 and 2^16, and
// goes up, like f16's 65520. NonFinite is what ml_dtypes and PyTorch's .to(float8) do; Saturate is
// CUDA's __NV_SATFINITE, what Transformer Engine and every recipe use, because a scale computed from
// last step's amax (delayed scaling) can be exceeded this step and one NaN would end the run.
// tests/test_fp8_format.cpp holds both modes to ml_dtypes and to cuda_fp8.h bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/host_device.h"

namespace mg::fp8 {

// A format is its dtype, DType::E4M3 or DType::E5M2: every constant below comes from that row of
// MG_DTYPES (core/dtype.h). The codec's functions take only those two (is_fp8); device code calls
// them with a constant, so the row is read at compile time.
enum class Overflow : std::uint8_t { Saturate, NonFinite };

// The constants of a format: everything encode() needs, and what the scaling recipes read.
struct FormatInfo {
  int exponent_bits, mantissa_bits, bias;
  bool has_inf;  // E5M2; E4M3 has a NaN only (0x7F)
  std::uint8_t max_code;  // the largest finite magnitude's code: 0x7E (448), 0x7B (57344)
  std::uint8_t overflow_code;  // NonFinite's overflow result: 0x7F (NaN) for E4M3, 0x7C (inf) for E5M2
  std::uint8_t nan_code;  // the quiet NaN encode() writes: 0x7F, 0x7E
  float max;  // 448, 57344
  int emax;  // floor(log2(max)): 8, 15 (the OCP MX spec's emax_elem)
};

// From the row: the first non-finite magnitude (nonfinite_from) is the overflow; the code below it
// is the largest finite one; with an inf the quiet NaN sets the top mantissa bit above it, without
// one the only NaN is all ones. The largest exponent is the top exponent code less the bias, one
// lower where the top code is inf and NaN.
MG_HOST_DEVICE constexpr FormatInfo format_info(DType format) {
  const DTypeInfo d = dtype_info(format);
  const auto nonfinite = static_cast<std::uint8_t>(nonfinite_from(format));
  const auto nan = static_cast<std::uint8_t>(d.has_inf ? nonfinite | (1u << (d.mantissa_bits - 1)) : nonfinite);
  const int emax = (1 << d.exponent_bits) - 1 - d.bias - (d.has_inf ? 1 : 0);
  return FormatInfo{d.exponent_bits,
                    d.mantissa_bits,
                    d.bias,
                    d.has_inf,
                    static_cast<std::uint8_t>(nonfinite - 1),
                    nonfinite,
                    nan,
                    static_cast<float>(d.max),
                    emax};
}
static_assert(format_info(DType::E4M3).max_code == 0x7E && format_info(DType::E4M3).nan_code == 0x7F &&
              format_info(DType::E4M3).overflow_code == 0x7F && format_info(DType::E4M3).emax == 8);
static_assert(format_info(DType::E5M2).max_code == 0x7B && format_info(DType::E5M2).nan_code == 0x7E &&
              format_info(DType::E5M2).overflow_code == 0x7C && format_info(DType::E5M2).emax == 15);

namespace detail {
MG_HOST_DEVICE inline std::uint32_t float_bits(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return bits;
}
MG_HOST_DEVICE inline float bits_float(std::uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}
}  // namespace detail

// The code of x, rounded to nearest even (the table above for overflow, inf and NaN).
MG_HOST_DEVICE inline std::uint8_t encode(float x, DType format, Overflow overflow) {
  const FormatInfo f = format_info(format);
  const std::uint32_t bits = detail::float_bits(x);
  const std::uint8_t sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t a = bits & 0x7FFFFFFFu;  // |x| as bits
  if (a > 0x7F800000u) return sign | f.nan_code;
  const std::uint8_t too_big = overflow == Overflow::Saturate ? f.max_code : f.overflow_code;
  if (a == 0x7F800000u) return sign | too_big;
  std::uint32_t code;
  const int exponent = static_cast<int>(a >> 23) - 127;
  if (exponent >= 1 - f.bias) {
    // A normal in the target: drop 23 - M mantissa bits, rounding to nearest even by adding just
    // under half of the dropped range plus the lowest kept bit (a carry moves into the exponent,
    // which is right); then move the exponent from f32's bias to the format's.
    const int shift = 23 - f.mantissa_bits;
    const std::uint32_t rounded = (a + ((1u << (shift - 1)) - 1u) + ((a >> shift) & 1u)) >> shift;
    code = rounded - (static_cast<std::uint32_t>(127 - f.bias) << f.mantissa_bits);
  } else {
    // Below the smallest normal the grid is uniform, 2^(1 - bias - M) apart: scale |x| so that one step
    // of it is 1 (a power-of-two scaling, exact) and round to an integer, ties to even. Code 2^M is
    // the smallest normal, which a round-up from the largest subnormal correctly reaches.
    const float steps = detail::bits_float(a) * static_cast<float>(1u << (f.bias - 1 + f.mantissa_bits));
    const float whole = static_cast<float>(static_cast<std::uint32_t>(steps));  // steps < 2^(M+1): exact
    const float rest = steps - whole;
    code = static_cast<std::uint32_t>(whole);
    if (rest > 0.5f || (rest == 0.5f && (code & 1u))) ++code;
  }
  if (code > f.max_code) return sign | too_big;
  return sign | static_cast<std::uint8_t>(code);
}

// The value of a code, exactly (every code is an f32 value). NaN codes give a quiet NaN of the same
// sign; E5M2's 0x7C/0xFC give +-inf.
MG_HOST_DEVICE inline float decode(std::uint8_t code, DType format) {
  const FormatInfo f = format_info(format);
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  const std::uint32_t magnitude = code & 0x7Fu;
  const std::uint32_t exponent = magnitude >> f.mantissa_bits;
  const std::uint32_t mantissa = magnitude & ((1u << f.mantissa_bits) - 1u);
  const std::uint32_t all_ones = (1u << f.exponent_bits) - 1u;
  if (f.has_inf && exponent == all_ones && mantissa == 0) return detail::bits_float(sign | 0x7F800000u);
  if (f.has_inf ? exponent == all_ones : magnitude == 0x7Fu)  // NaN: quiet (bit 22), payload kept
    return detail::bits_float(sign | 0x7FC00000u | (mantissa << 20));
  if (exponent == 0) {  // subnormal: mantissa * 2^(1 - bias - M), exact in f32
    const float value = static_cast<float>(mantissa) / static_cast<float>(1u << (f.bias - 1 + f.mantissa_bits));
    return detail::bits_float(sign | detail::float_bits(value));
  }
  return detail::bits_float(sign | ((exponent + 127u - static_cast<std::uint32_t>(f.bias)) << 23) |
                            (mantissa << (23 - f.mantissa_bits)));
}

// E8M0: 2^(code - 127), code 0xFF is NaN. The scale of an MX block (OCP Microscaling Formats v1.0):
// an exponent and nothing else, so multiplying by it is exact.
constexpr std::uint8_t kE8M0Nan = 0xFF;
MG_HOST_DEVICE inline float decode_e8m0(std::uint8_t code) {
  if (code == kE8M0Nan) return detail::bits_float(0x7FC00000u);
  if (code == 0) return detail::bits_float(0x00400000u);  // 2^-127 is an f32 subnormal
  return detail::bits_float(static_cast<std::uint32_t>(code) << 23);
}
// The code of 2^exponent, clamped to the representable -127..127.
MG_HOST_DEVICE inline std::uint8_t encode_e8m0(int exponent) {
  if (exponent < -127) exponent = -127;
  if (exponent > 127) exponent = 127;
  return static_cast<std::uint8_t>(exponent + 127);
}

}  // namespace mg::fp8
