#include "core/convert.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace mg {

namespace detail {

void f32_to_f16_portable(const float* src, half* dst, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) dst[i] = half(src[i]);
}

void f16_to_f32_portable(const half* src, float* dst, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) dst[i] = static_cast<float>(src[i]);
}

float round_to_odd_float(double x) {
  float f = static_cast<float>(x);  // round to nearest
  if (std::isnan(x) || static_cast<double>(f) == x) return f;
  // Inexact: step back toward zero if rounding went away from it, then mark "inexact" in the last bit.
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) | 1u);
}

}  // namespace detail

namespace {

void f32_to_f16(const float* src, half* dst, std::int64_t count) {
  std::int64_t i = 0;
#if defined(__F16C__)
  // 8 lanes per instruction; imm 0 = round to nearest even (the MXCSR mode is not consulted).
  for (; i + 8 <= count; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  detail::f32_to_f16_portable(src + i, dst + i, count - i);
}

void f16_to_f32(const half* src, float* dst, std::int64_t count) {
  std::int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= count; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  detail::f16_to_f32_portable(src + i, dst + i, count - i);
}

void f32_to_bf16(const float* src, bfloat16* dst, std::int64_t count) {
  auto* out = reinterpret_cast<std::uint16_t*>(dst);
  for (std::int64_t i = 0; i < count; ++i) out[i] = detail::f32_to_bf16_bits(src[i]);
}

void bf16_to_f32(const bfloat16* src, float* dst, std::int64_t count) {
  const auto* in = reinterpret_cast<const std::uint16_t*>(src);
  for (std::int64_t i = 0; i < count; ++i) {
    std::uint32_t bits = static_cast<std::uint32_t>(in[i]) << 16;
    std::memcpy(dst + i, &bits, 4);
  }
}

// Codes (FP8, E2M1, E8M0) <-> anything, through f32 in chunks on the stack: every code's value is an
// f32 value, and every f16/bf16/f32 value reaches a code in one rounding from its f32 form. f64 and the
// integers go through round_to_odd_float, so that the f32 step does not add a second rounding
// (24 >= 2 * 4 + 2 bits). E2M1's codes are two a byte: chunks start on a whole byte (kChunk is even,
// and the caller's count is whole bytes, core/dtype.h's rule), and codes are written in pairs.
void convert_coded(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t count,
                   fp8::Overflow overflow) {
  constexpr std::int64_t kChunk = 512;
  float values[kChunk];
  for (std::int64_t begin = 0; begin < count; begin += kChunk) {
    const std::int64_t n = std::min(kChunk, count - begin);
    const char* from = static_cast<const char*>(src) + dtype_bytes(src_dtype, begin);
    char* to = static_cast<char*>(dst) + dtype_bytes(dst_dtype, begin);
    if (is_coded(src_dtype)) {
      const auto* codes = reinterpret_cast<const std::uint8_t*>(from);
      for (std::int64_t i = 0; i < n; ++i) values[i] = fp8::decode(fp8::load_code(codes, i, src_dtype), src_dtype);
    } else if (src_dtype == DType::F64 || is_integer(src_dtype)) {
      for (std::int64_t i = 0; i < n; ++i) values[i] = detail::round_to_odd_float(load_as_double(from, src_dtype, i));
    } else {
      convert(from, src_dtype, values, DType::F32, n);
    }
    if (!is_coded(dst_dtype)) {
      convert(values, DType::F32, to, dst_dtype, n);
      continue;
    }
    auto* codes = reinterpret_cast<std::uint8_t*>(to);
    if (packed_group(dst_dtype) == 2) {
      for (std::int64_t i = 0; i + 1 < n; i += 2)
        codes[i / 2] = fp8::pack_codes(fp8::encode(values[i], dst_dtype, overflow),
                                       fp8::encode(values[i + 1], dst_dtype, overflow));
    } else {
      for (std::int64_t i = 0; i < n; ++i) codes[i] = fp8::encode(values[i], dst_dtype, overflow);
    }
  }
}

template <class From, class To>
void convert_loop(const From* src, To* dst, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) dst[i] = scalar_cast<To>(src[i]);
}

}  // namespace

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t count, fp8::Overflow overflow) {
  if (count <= 0) return;
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, dtype_bytes(src_dtype, count));
    return;
  }
  // A count of a packed dtype that ends inside a byte is refused here, before anything is written.
  (void)dtype_bytes(src_dtype, count), (void)dtype_bytes(dst_dtype, count);
  if (is_coded(src_dtype) || is_coded(dst_dtype)) return convert_coded(src, src_dtype, dst, dst_dtype, count, overflow);
  // The hot pairs of mixed-precision training get their own vectorised loops.
  if (src_dtype == DType::F32 && dst_dtype == DType::F16)
    return f32_to_f16(static_cast<const float*>(src), static_cast<half*>(dst), count);
  if (src_dtype == DType::F16 && dst_dtype == DType::F32)
    return f16_to_f32(static_cast<const half*>(src), static_cast<float*>(dst), count);
  if (src_dtype == DType::F32 && dst_dtype == DType::BF16)
    return f32_to_bf16(static_cast<const float*>(src), static_cast<bfloat16*>(dst), count);
  if (src_dtype == DType::BF16 && dst_dtype == DType::F32)
    return bf16_to_f32(static_cast<const bfloat16*>(src), static_cast<float*>(dst), count);
  visit_host_type(src_dtype, "convert", [&](auto src_zero) {
    using From = decltype(src_zero);
    visit_host_type(dst_dtype, "convert", [&](auto dst_zero) {
      using To = decltype(dst_zero);
      convert_loop(static_cast<const From*>(src), static_cast<To*>(dst), count);
    });
  });
}

double load_as_double(const void* data, DType dtype, std::int64_t i) {
  if (is_coded(dtype)) return fp8::decode(fp8::load_code(static_cast<const std::uint8_t*>(data), i, dtype), dtype);
  return visit_host_type(dtype, "load_as_double", [&](auto zero) {
    using T = decltype(zero);
    return scalar_cast<double>(static_cast<const T*>(data)[i]);
  });
}

}  // namespace mg
