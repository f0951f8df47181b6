// The narrow floating formats mixgrad stores as codes: FP8's two, FP4's E2M1, and E8M0, the
// power-of-two scale of MX blocks. Encoding and decoding, on the host and the device, bit for bit.
//
//   format  bits      bias  max      min normal  min subnormal  inf  NaN codes         used for
//   E4M3    s.eeee.mmm   7  448      2^-6        2^-9           no   0x7F, 0xFF        forward: weights, activations
//   E5M2    s.eeeee.mm  15  57344    2^-14       2^-16          yes  0x7D-0x7F (+sign) backward: gradients
//   E2M1    s.ee.m       1  6        1           0.5            no   none              FP4 values (two a byte)
//   E8M0    eeeeeeee   127  2^127    2^-127      -              no   0xFF              MX block scales (no sign)
//
// E4M3 is the OCP "fn" variant (OCP 8-bit Floating Point Specification v1.0, 2023; the `float8_e4m3fn`
// of ml_dtypes and PyTorch): it gives up infinities and all but one NaN per sign to gain the binade
// from 256 to 448. E5M2 is IEEE binary16 with the low byte cut off: same exponent, inf and NaN.
// E2M1 (OCP Microscaling Formats v1.0, `float4_e2m1fn`) has 16 codes, +-{0, 0.5, 1, 1.5, 2, 3, 4, 6},
// and neither inf nor NaN. Every value of these formats is exactly an f16 (E2M1, E4M3, E5M2), a bf16
// and an f32 value, so decoding is exact and the product of two codes is exact in f32.
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
// E2M1 has nothing non-finite to overflow to: both modes saturate (+-inf gives +-6), and a NaN gives
// the zero of the *other* sign (+NaN 0x8, -NaN 0x0): ml_dtypes' rule, followed here. (cuda_fp4.h's
// __nv_cvt_float_to_fp4 writes 0x7, +6, for every NaN; mixgrad's kernels do not use it.)
//
// E8M0 is an exponent and nothing else: 2^(code - 127), 0xFF is NaN, and there is no zero. Encoding
// follows ml_dtypes' float8_e8m0fnu: to the nearest power of two with ties *up* (1.5 -> 2, 3 -> 4,
// 0.75 -> 1); an f32 subnormal at or below 2^-127 to code 0 (2^-127) and one above it to code 1 (2^-126,
// not the nearest: ml_dtypes' rule there); past 2^127 (from 1.5 * 2^127 up, and +inf) to NaN under
// NonFinite and to 2^127 under Saturate; zero, negative values (-0 included) and NaN to NaN.
// (cuda_fp8.h's __nv_cvt_float_to_e8m0 rounds toward zero or toward +inf only, and gives 0x00 for 0
// and 0x7F for -1; checked on CUDA 13.0's host path.) The MX scale rule itself (2^(floor(log2 amax)
// - emax)) lives in autograd/fp8.cpp and encodes an exponent: encode_e8m0(int).
// tests/test_fp8_format.cpp holds E4M3 and E5M2 to ml_dtypes and cuda_fp8.h bit for bit,
// tests/test_fp4_format.cpp E2M1 and E8M0 to ml_dtypes.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/host_device.h"

namespace mg::fp8 {

// A format is its dtype, any of is_coded's (E4M3, E5M2, E2M1, E8M0): every constant below comes from
// that row of MG_DTYPES (core/dtype.h). Device code calls the codec with a constant format, so the
// row is read at compile time.
enum class Overflow : std::uint8_t { Saturate, NonFinite };

// The constants of a format: everything encode() needs, and what the scaling recipes read.
struct FormatInfo {
  int bits, exponent_bits, mantissa_bits, bias;
  bool has_inf;  // E5M2; E4M3 has a NaN only (0x7F), E2M1 neither
  bool has_nan;
  std::uint8_t sign_bit;  // 0x80, 0x08 for E2M1, 0 for E8M0 (no sign)
  std::uint8_t magnitude_mask;  // the bits below the sign: 0x7F, 0x07, 0xFF
  std::uint8_t max_code;  // the largest finite magnitude's code: 0x7E (448), 0x7B (57344), 0x7 (6), 0xFE
  std::uint8_t overflow_code;  // NonFinite's overflow result: 0x7F (NaN), 0x7C (inf), 0x7 (saturates), 0xFF
  std::uint8_t nan_code;  // the quiet NaN encode() writes: 0x7F, 0x7E, 0xFF (E2M1: none, see encode)
  float max;  // 448, 57344, 6, 2^127
  int emax;  // floor(log2(max)): 8, 15, 2, 127 (the OCP MX spec's emax_elem)
};

// From the row: the first non-finite magnitude (nonfinite_from) is the overflow; the code below it
// is the largest finite one; with an inf the quiet NaN sets the top mantissa bit above it, without
// one the only NaN is all ones. A format with neither (E2M1) saturates: its largest code is all ones.
// The largest exponent is the top exponent code less the bias, one lower where the top code holds
// inf and NaN, or the NaN alone (E8M0, whose top code has no mantissa to spare).
MG_HOST_DEVICE constexpr FormatInfo format_info(DType format) {
  const DTypeInfo d = dtype_info(format);
  const auto mask = static_cast<std::uint8_t>(magnitude_mask(format));
  const bool nonfinite = d.has_inf || d.has_nan;
  const auto first = static_cast<std::uint8_t>(nonfinite ? nonfinite_from(format) : mask + 1u);
  const auto nan = static_cast<std::uint8_t>(!nonfinite  ? 0u
                                             : d.has_inf ? first | (1u << (d.mantissa_bits - 1))
                                                         : first);
  const int emax = (1 << d.exponent_bits) - 1 - d.bias - (d.has_inf || d.mantissa_bits == 0 ? 1 : 0);
  return FormatInfo{d.bits,
                    d.exponent_bits,
                    d.mantissa_bits,
                    d.bias,
                    d.has_inf,
                    d.has_nan,
                    static_cast<std::uint8_t>(d.has_sign ? 1u << (d.bits - 1) : 0u),
                    mask,
                    static_cast<std::uint8_t>(first - 1u),
                    static_cast<std::uint8_t>(nonfinite ? first : first - 1u),
                    nan,
                    static_cast<float>(d.max),
                    emax};
}
static_assert(format_info(DType::E4M3).max_code == 0x7E && format_info(DType::E4M3).nan_code == 0x7F &&
              format_info(DType::E4M3).overflow_code == 0x7F && format_info(DType::E4M3).emax == 8);
static_assert(format_info(DType::E5M2).max_code == 0x7B && format_info(DType::E5M2).nan_code == 0x7E &&
              format_info(DType::E5M2).overflow_code == 0x7C && format_info(DType::E5M2).emax == 15);
static_assert(format_info(DType::E2M1).max_code == 0x7 && format_info(DType::E2M1).overflow_code == 0x7 &&
              format_info(DType::E2M1).sign_bit == 0x8 && format_info(DType::E2M1).emax == 2);
static_assert(format_info(DType::E8M0).max_code == 0xFE && format_info(DType::E8M0).nan_code == 0xFF &&
              format_info(DType::E8M0).sign_bit == 0 && format_info(DType::E8M0).emax == 127);

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

// E8M0: 2^(code - 127), code 0xFF is NaN. The scale of an MX block (OCP Microscaling Formats v1.0):
// an exponent and nothing else, so multiplying by it is exact.
constexpr std::uint8_t kE8M0Nan = 0xFF;
MG_HOST_DEVICE inline float decode_e8m0(std::uint8_t code) {
  if (code == kE8M0Nan) return detail::bits_float(0x7FC00000u);
  if (code == 0) return detail::bits_float(0x00400000u);  // 2^-127 is an f32 subnormal
  return detail::bits_float(static_cast<std::uint32_t>(code) << 23);
}
// The code of 2^exponent, clamped to the representable -127..127 (the MX scale rule's encoding).
MG_HOST_DEVICE inline std::uint8_t encode_e8m0(int exponent) {
  if (exponent < -127) exponent = -127;
  if (exponent > 127) exponent = 127;
  return static_cast<std::uint8_t>(exponent + 127);
}
// The code of a value: the nearest power of two, ties up (the header's table).
MG_HOST_DEVICE inline std::uint8_t round_to_e8m0(float x, Overflow overflow) {
  const std::uint32_t bits = detail::float_bits(x);
  const std::uint8_t too_big = overflow == Overflow::Saturate ? kE8M0Nan - 1 : kE8M0Nan;
  if (bits == 0 || (bits >> 31) != 0 || bits > 0x7F800000u) return kE8M0Nan;  // zero, negative (-0 too), NaN
  if (bits == 0x7F800000u) return too_big;
  // An f32 subnormal: up to 2^-127 code 0, above it 2^-126 (ml_dtypes rounds up there, not to nearest).
  if (bits < 0x00800000u) return bits <= 0x00400000u ? 0 : 1;
  // x's exponent, plus one where the bit below the leading one is set: 1.5 * 2^e, the midpoint of 2^e
  // and 2^(e + 1), and everything above it round up.
  const int exponent = static_cast<int>(bits >> 23) - 127 + static_cast<int>((bits >> 22) & 1u);
  if (exponent > 127) return too_big;
  return encode_e8m0(exponent);
}

// The code of x, rounded to nearest even (the header's tables for overflow, inf and NaN).
MG_HOST_DEVICE inline std::uint8_t encode(float x, DType format, Overflow overflow) {
  if (format == DType::E8M0) return round_to_e8m0(x, overflow);
  const FormatInfo f = format_info(format);
  const std::uint32_t bits = detail::float_bits(x);
  const auto sign = static_cast<std::uint8_t>((bits >> 31) != 0 ? f.sign_bit : 0u);
  const std::uint32_t a = bits & 0x7FFFFFFFu;  // |x| as bits
  if (a > 0x7F800000u) return f.has_nan ? sign | f.nan_code : sign ^ f.sign_bit;  // no NaN: the other sign's 0
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
// sign; E5M2's 0x7C/0xFC give +-inf. A code is the format's bits, in the low bits of the byte.
MG_HOST_DEVICE inline float decode(std::uint8_t code, DType format) {
  if (format == DType::E8M0) return decode_e8m0(code);
  const FormatInfo f = format_info(format);
  const std::uint32_t sign = (code & f.sign_bit) != 0 ? 0x80000000u : 0u;
  const std::uint32_t magnitude = code & f.magnitude_mask;
  const std::uint32_t exponent = magnitude >> f.mantissa_bits;
  const std::uint32_t mantissa = magnitude & ((1u << f.mantissa_bits) - 1u);
  const std::uint32_t all_ones = (1u << f.exponent_bits) - 1u;
  if (f.has_inf && exponent == all_ones && mantissa == 0) return detail::bits_float(sign | 0x7F800000u);
  if (f.has_inf ? exponent == all_ones : f.has_nan && magnitude == f.magnitude_mask)  // quiet, payload kept
    return detail::bits_float(sign | 0x7FC00000u | (mantissa << 20));
  if (exponent == 0) {  // subnormal: mantissa * 2^(1 - bias - M), exact in f32
    const float value = static_cast<float>(mantissa) / static_cast<float>(1u << (f.bias - 1 + f.mantissa_bits));
    return detail::bits_float(sign | detail::float_bits(value));
  }
  return detail::bits_float(sign | ((exponent + 127u - static_cast<std::uint32_t>(f.bias)) << 23) |
                            (mantissa << (23 - f.mantissa_bits)));
}

// Element i of a buffer of codes: one a byte, or two a byte for E2M1, element 2k in the low nibble and
// 2k + 1 in the high one (the order of PyTorch's float4_e2m1fn_x2, of safetensors' "F4" and of the
// packed FP4 operands of NVIDIA's and the OCP MX spec's GEMMs).
MG_HOST_DEVICE inline std::uint8_t load_code(const std::uint8_t* codes, std::int64_t i, DType format) {
  if (format_info(format).bits == 4) return static_cast<std::uint8_t>((codes[i >> 1] >> ((i & 1) * 4)) & 0xFu);
  return codes[i];
}
// The byte of two E2M1 codes, `first` the element of the lower index.
MG_HOST_DEVICE inline std::uint8_t pack_codes(std::uint8_t first, std::uint8_t second) {
  return static_cast<std::uint8_t>((first & 0xFu) | (second << 4));
}

}  // namespace mg::fp8
