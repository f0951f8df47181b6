// Conversions between dtypes, scalar and bulk.
//
// Every conversion rounds to nearest, ties to even, keeps subnormals (nothing is flushed to zero),
// and keeps inf and NaN. So 2^-24 becomes the smallest f16 subnormal, 2^-25 (a tie) becomes 0,
// 65504 is exact and 65520 (a tie) becomes inf, exactly as on a GPU.
//
// Bulk f32 <-> f16 uses the CPU's F16C instructions when the build targets them (MG_NATIVE on a
// CPU that has them); otherwise a portable loop gives bit-identical results.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <utility>

#include "core/dtype.h"
#include "core/fp8.h"
#include "core/scalar_types.h"

namespace mg {

// Scalar conversion with the rounding rules above. From f64 (and i32), the result is rounded once
// (not through f32), so f64 references round exactly like the hardware would.
template <class To, class From>
To scalar_cast(From x);

// Converts `count` contiguous elements from src (src_dtype) to dst (dst_dtype). Into an integer
// (i32, i64, u8): truncated toward zero, saturated at the integer's range, NaN to 0; into bool:
// non-zero (NaN included) is 1, as PyTorch's .to(torch.bool). i64 converts to floating types through
// its exact double (every i64 up to 2^53; beyond, the double is rounded once first). Into a coded format
// (E4M3, E5M2, E2M1, E8M0), `overflow` says what a value past the format's max becomes (core/fp8.h):
// NonFinite, the format's own rule and what ml_dtypes and PyTorch's .to(float8) do, unless the caller
// asks for Saturate (the FP8 recipes do). From f64 the value is rounded once, as for f16. Codes convert
// back exactly. E2M1 packs two elements a byte: `count` must fill whole bytes (an even count), and
// src and dst point at the byte holding the first element.
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t count,
             fp8::Overflow overflow = fp8::Overflow::NonFinite);

// Element i of a buffer, read as double (for formatting, item() and tests).
double load_as_double(const void* data, DType dtype, std::int64_t i);

namespace detail {
// f32 to bf16 bits, to nearest even: bf16 is the top half of an f32, so add 0x7FFF plus the lowest kept
// bit, then truncate; NaN is kept quiet explicitly (the add could carry it into inf). Branch-free, so
// a loop over it vectorises (convert() and the CPU GEMM's store both use it).
inline std::uint16_t f32_to_bf16_bits(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<std::uint16_t>(nan ? (bits >> 16) | 0x0040u : (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// The portable paths, kept callable so tests can prove the F16C path gives the same bits.
void f32_to_f16_portable(const float* src, half* dst, std::int64_t count);
void f16_to_f32_portable(const half* src, float* dst, std::int64_t count);
// Rounds a double to float with "round to odd": truncate, then set the last bit if inexact.
// A second rounding from that float to f16/bf16 is then exactly the single rounding of the double.
float round_to_odd_float(double x);
}  // namespace detail

// ---- implementation of the template -------------------------------------------------------------

template <class To, class From>
To scalar_cast(From x) {
  constexpr bool to_low = std::is_same_v<To, half> || std::is_same_v<To, bfloat16>;
  constexpr bool from_low = std::is_same_v<From, half> || std::is_same_v<From, bfloat16>;
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<From, bool>) {
    return scalar_cast<To>(static_cast<std::int32_t>(x));  // 0 or 1
  } else if constexpr (from_low) {
    return scalar_cast<To>(static_cast<float>(x));  // f16/bf16 -> f32 is exact
  } else if constexpr (to_low && (std::is_same_v<From, double> || std::is_same_v<From, std::int32_t> ||
                                  std::is_same_v<From, std::int64_t>)) {
    return To(detail::round_to_odd_float(static_cast<double>(x)));  // i32 -> f64 is exact
  } else if constexpr (to_low) {
    return To(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, bool>) {
    return x != From(0);  // NaN != 0: true
  } else if constexpr (std::is_integral_v<To> && std::is_integral_v<From>) {
    // Integer to integer: saturated at To's range (u8 of -1 is 0, i32 of 2^40 is 2^31 - 1).
    if (std::cmp_less(x, std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (std::cmp_greater(x, std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(x);
  } else if constexpr (std::is_integral_v<To>) {
    // Out-of-range float -> int is undefined in C++; define it as saturation, NaN -> 0. The bounds
    // as doubles: To's min is a power of two (exact); max + 1 is one too, the first value past it.
    constexpr double lowest = static_cast<double>(std::numeric_limits<To>::min());
    constexpr double past_max = static_cast<double>(std::numeric_limits<To>::max() / 2 + 1) * 2.0;
    if (x != x) return 0;
    if (static_cast<double>(x) >= past_max) return std::numeric_limits<To>::max();
    if (static_cast<double>(x) <= lowest) return std::numeric_limits<To>::min();
    return static_cast<To>(x);
  } else {
    return static_cast<To>(x);
  }
}

}  // namespace mg
