// DType: the element type of a tensor, carried as data (a tag), not as a template parameter.
//
//   F32   IEEE binary32: the master weights, the accumulators, the "safe" precision
//   F16   IEEE binary16: 10 mantissa bits, max 65504, min normal 2^-14, min subnormal 2^-24
//   BF16  bfloat16: f32's 8-bit exponent (same range) with only 7 mantissa bits
//   F64   binary64, CPU only: the reference precision of gradcheck
//   I32   32-bit integers: labels and indices, never differentiable
//
// Host storage for F16/BF16 is Eigen::half / Eigen::bfloat16 (core/scalar_types.h).
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mg {

enum class DType : std::uint8_t { F32, F16, BF16, F64, I32 };

std::size_t dtype_size(DType dtype);  // bytes per element
std::string_view dtype_name(DType dtype);  // "f32", "f16", "bf16", "f64", "i32"
bool is_floating(DType dtype);
bool is_low_precision(DType dtype);  // f16 or bf16: rounded on every store
double dtype_eps(DType dtype);  // 1 ulp at 1.0: 2^-23, 2^-10, 2^-7, 2^-52; error for i32
double dtype_max(DType dtype);  // largest finite value: 65504 for f16, 2^31-1 for i32

}  // namespace mg

template <>
struct fmt::formatter<mg::DType> : fmt::formatter<std::string_view> {
  auto format(mg::DType dtype, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(mg::dtype_name(dtype), ctx);
  }
};
