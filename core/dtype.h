// DType: the element type of a tensor, carried as data (a tag), not as a template parameter.
//
//   F32   IEEE binary32: the master weights, the accumulators, the "safe" precision
//   F16   IEEE binary16: 10 mantissa bits, max 65504, min normal 2^-14, min subnormal 2^-24
//   BF16  bfloat16: f32's 8-bit exponent (same range) with only 7 mantissa bits
//   F64   binary64, CPU only: the reference precision of gradcheck
//   I32   32-bit integers: labels and indices, never differentiable
//   E4M3  FP8, 3 mantissa bits, max 448 (OCP "fn": no inf): FP8 forward operands (core/fp8.h)
//   E5M2  FP8, 2 mantissa bits, max 57344, inf and NaN: FP8 gradients (core/fp8.h)
//
// Host storage for F16/BF16 is Eigen::half / Eigen::bfloat16 (core/scalar_types.h). E4M3 and E5M2 are
// storage dtypes: a tensor of them holds codes that can be stored, copied, printed, saved and converted
// (to and from every other dtype), and that the FP8 GEMM reads (kernels/fp8.h); arithmetic kernels
// refuse them with an error that says to convert first, as no hardware computes in FP8 either.
//
// Each dtype is one row of the table in dtype.cpp (name, size, mantissa bits, max, file name); adding a
// dtype is a row there, an enumerator here, and its C++ type in scalar_types.h where kernels compute in it.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace mg {

enum class DType : std::uint8_t { F32, F16, BF16, F64, I32, E4M3, E5M2 };

std::size_t dtype_size(DType dtype);  // bytes per element
std::string_view dtype_name(DType dtype);  // "f32", "f16", "bf16", "f64", "i32", "e4m3", "e5m2"
bool is_floating(DType dtype);
bool is_low_precision(DType dtype);  // f16 or bf16: the 16-bit compute dtypes, rounded on every store
bool is_fp8(DType dtype);  // e4m3 or e5m2: storage only
double dtype_eps(DType dtype);  // 1 ulp at 1.0: 2^-23, 2^-10, 2^-7, 2^-52, 2^-3, 2^-2; error for i32
double dtype_max(DType dtype);  // largest finite value: 65504 for f16, 448 for e4m3, 2^31-1 for i32
// The dtype's name in the safetensors format: "F32", "F16", "BF16", "F64", "I32", "F8_E4M3", "F8_E5M2".
std::string_view dtype_file_name(DType dtype);
// Every dtype, in enum order (for parsing names and for tests that sweep them).
std::span<const DType> all_dtypes();

}  // namespace mg

template <>
struct fmt::formatter<mg::DType> : fmt::formatter<std::string_view> {
  auto format(mg::DType dtype, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(mg::dtype_name(dtype), ctx);
  }
};
