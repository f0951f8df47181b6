// DType: the element type of a tensor, carried as data (a tag), not as a template parameter.
//
//   F32   IEEE binary32: the master weights, the accumulators, the "safe" precision
//   F16   IEEE binary16: 10 mantissa bits, max 65504, min normal 2^-14, min subnormal 2^-24
//   BF16  bfloat16: f32's 8-bit exponent (same range) with only 7 mantissa bits
//   F64   binary64, CPU only: the reference precision of gradcheck
//   I32   32-bit integers: labels and indices, never differentiable
//   E4M3  FP8, 3 mantissa bits, max 448 (OCP "fn": no inf): FP8 forward operands (core/fp8.h)
//   E5M2  FP8, 2 mantissa bits, max 57344, inf and NaN: FP8 gradients (core/fp8.h)
//   I64   64-bit integers, U8 bytes, BOOL 0 or 1 (a byte): storage only, what PyTorch saves (int64
//         labels and indices, uint8 images, bool masks); cross_entropy and embedding take i64
//         indices, where a bool mask, and every dtype converts to and from them
//
// Host storage for F16/BF16 is Eigen::half / Eigen::bfloat16 (core/scalar_types.h). E4M3 and E5M2 are
// storage dtypes: a tensor of them holds codes that can be stored, copied, printed, saved and converted
// (to and from every other dtype), and that the FP8 GEMM reads (kernels/fp8.h); arithmetic kernels
// refuse them with an error that says to convert first, as no hardware computes in FP8 either.
//
// MG_DTYPES is the table of them, one row a dtype: the enum, all_dtypes(), the names and every fact
// below come from it, so adding a storage format is a row here, and then what the compiler names
// (-Werror=switch: the three maps of another layer, each a switch over DType with no default: the
// MPI and NCCL wire types in dist/, the --graph colours in amp/step_graph_dot.cpp). A format with a
// host type to convert through (an integer) adds it to visit_host_type (scalar_types.h) and the CUDA
// cast's visit_cast_type (kernels/cuda/copy.cu); one kernels compute in, to visit_dtype and
// visit_device_dtype. Those visitors test for the closed set they take, so other rows pass them by.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/host_device.h"

namespace mg {

// X(enumerator, name, bits, exponent bits, mantissa bits, bias, largest finite, smallest normal,
//   smallest subnormal, has inf, has NaN, has a sign, storage only, safetensors' name)
// For an integer: no exponent, mantissa -1, the smallest positive value 1 in both minimum columns
// (i64's max is 2^63 - 1 as the nearest double, 2^63). Storage only: stored, copied, saved and
// converted, never computed in: the codes of FP8 and FP4 (core/fp8.h), and the integer formats of files
// written by PyTorch (i64 labels and indices, u8 images, bool masks), which the ops that take indices
// or masks convert. E2M1 (FP4) packs two elements a byte; E8M0, the power-of-two scale of MX blocks,
// has no sign, no mantissa and no subnormals (both minimum columns are its smallest value, 2^-127).
#define MG_DTYPES(X) \
  X(F32, "f32", 32, 8, 23, 127, 0x1.FFFFFEp127, 0x1p-126, 0x1p-149, true, true, true, false, "F32") \
  X(F16, "f16", 16, 5, 10, 15, 65504.0, 0x1p-14, 0x1p-24, true, true, true, false, "F16") \
  X(BF16, "bf16", 16, 8, 7, 127, 0x1.FEp127, 0x1p-126, 0x1p-133, true, true, true, false, "BF16") \
  X(F64, "f64", 64, 11, 52, 1023, 0x1.FFFFFFFFFFFFFp1023, 0x1p-1022, 0x1p-1074, true, true, true, false, "F64") \
  X(I32, "i32", 32, 0, -1, 0, 2147483647.0, 1.0, 1.0, false, false, true, false, "I32") \
  X(E4M3, "e4m3", 8, 4, 3, 7, 448.0, 0x1p-6, 0x1p-9, false, true, true, true, "F8_E4M3") \
  X(E5M2, "e5m2", 8, 5, 2, 15, 57344.0, 0x1p-14, 0x1p-16, true, true, true, true, "F8_E5M2") \
  X(I64, "i64", 64, 0, -1, 0, 9223372036854775807.0, 1.0, 1.0, false, false, true, true, "I64") \
  X(U8, "u8", 8, 0, -1, 0, 255.0, 1.0, 1.0, false, false, false, true, "U8") \
  X(BOOL, "bool", 8, 0, -1, 0, 1.0, 1.0, 1.0, false, false, false, true, "BOOL") \
  X(E2M1, "e2m1", 4, 2, 1, 1, 6.0, 1.0, 0.5, false, false, true, true, "F4") \
  X(E8M0, "e8m0", 8, 8, 0, 127, 0x1p127, 0x1p-127, 0x1p-127, false, true, false, true, "F8_E8M0")

#define MG_DTYPE_ENUMERATOR(e, ...) e,
enum class DType : std::uint8_t { MG_DTYPES(MG_DTYPE_ENUMERATOR) };
#undef MG_DTYPE_ENUMERATOR

// One row of MG_DTYPES. Constant and usable in device code (names as C strings).
struct DTypeInfo {
  const char* name;  // "f32", "e4m3": messages, printing, --precision
  int bits;  // one element's
  int exponent_bits, mantissa_bits;  // mantissa -1: an integer
  int bias;
  double max, min_normal, min_subnormal;
  bool has_inf, has_nan, has_sign, storage_only;
  const char* file_name;  // safetensors' name (github.com/huggingface/safetensors, "Dtype")
};

// The row of a dtype; an unknown tag (memory gone bad) gives a row named "unknown" of 0 bits.
MG_HOST_DEVICE constexpr DTypeInfo dtype_info(DType dtype) {
  switch (dtype) {
#define MG_DTYPE_ROW(e, ...) \
  case DType::e: \
    return DTypeInfo{__VA_ARGS__};
    MG_DTYPES(MG_DTYPE_ROW)
#undef MG_DTYPE_ROW
  }
  return DTypeInfo{"unknown", 0, 0, -1, 0, 0.0, 0.0, 0.0, false, false, false, false, "unknown"};
}

// The inf and NaN encodings, from the row: with the sign bit dropped, a value is inf or NaN exactly
// when its bits reach nonfinite_from (the exponent all ones where the format has an inf; E4M3, with a
// NaN and no inf, only at all ones). What NonfiniteTrace and find_non_finite compare bits with.
MG_HOST_DEVICE constexpr std::uint64_t magnitude_mask(DType dtype) {
  const DTypeInfo d = dtype_info(dtype);
  return d.bits >= 64 ? ~std::uint64_t{0} >> 1 : (std::uint64_t{1} << (d.bits - (d.has_sign ? 1 : 0))) - 1;
}
// 0 where the dtype has neither inf nor NaN (an integer): nothing is non-finite.
MG_HOST_DEVICE constexpr std::uint64_t nonfinite_from(DType dtype) {
  const DTypeInfo d = dtype_info(dtype);
  if (!d.has_inf && !d.has_nan) return 0;
  if (!d.has_inf) return magnitude_mask(dtype);
  return ((std::uint64_t{1} << d.exponent_bits) - 1) << d.mantissa_bits;
}

std::size_t dtype_size(DType dtype);  // bytes per element (a whole-byte dtype's; see dtype_bytes)

// The bytes of `elements` consecutive elements: every byte count and byte offset of tensor data comes
// from here (storage sizes, views, slices, files), so a packed dtype of fewer than 8 bits (FP4's E2M1,
// two a byte) is a row of MG_DTYPES, not a hunt. The rule for packed dtypes: a tensor and each of its
// views and slices start and end on a whole byte, so a count of elements that does not fill whole
// bytes is refused (an mg::Error naming the dtype and the count), never rounded or padded.
std::size_t packed_bytes(DType dtype, std::int64_t elements);
inline std::size_t dtype_bytes(DType dtype, std::int64_t elements) {
  const int bits = dtype_info(dtype).bits;
  if (bits % 8 == 0 && bits > 0 && elements >= 0) [[likely]]
    return static_cast<std::size_t>(elements) * static_cast<std::size_t>(bits / 8);
  return packed_bytes(dtype, elements);
}
// The fewest consecutive elements that fill whole bytes: 1 for every dtype of 8 bits or more, 2 for
// E2M1. Work cut into pieces (threads, chunks, blocks of a file) cuts at multiples of it.
std::int64_t packed_group(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "f16", "bf16", "f64", "i32", "e4m3", ..., "e2m1", "e8m0"
bool is_floating(DType dtype);
bool is_low_precision(DType dtype);  // f16 or bf16: the 16-bit compute dtypes, rounded on every store
bool is_fp8(DType dtype);  // e4m3 or e5m2: the FP8 GEMM's operands, storage only
// A floating format stored as codes that core/fp8.h encodes and decodes, never computed in: e4m3, e5m2,
// e2m1 and e8m0 (every storage-only floating row).
bool is_coded(DType dtype);
bool is_integer(DType dtype);  // i32, i64, u8 or bool
double dtype_eps(DType dtype);  // 1 ulp at 1.0: 2^-23, 2^-10, 2^-7, 2^-52, 2^-3, 2^-2, 2^-1, 1; error for i32
double dtype_max(DType dtype);  // largest finite value: 65504 for f16, 448 for e4m3, 2^31-1 for i32
double dtype_min_normal(DType dtype);  // 2^-14 for f16, 2^-126 for bf16 and f32; error for i32
double dtype_min_subnormal(DType dtype);  // 2^-24 for f16, 2^-133 for bf16; error for i32
// The dtype's name in the safetensors format: "F32", "F16", "BF16", "F64", "I32", "F8_E4M3", "F8_E5M2",
// "I64", "U8", "BOOL", "F4", "F8_E8M0".
std::string_view dtype_file_name(DType dtype);
// Every dtype, in enum order (for parsing names and for tests that sweep them).
std::span<const DType> all_dtypes();
// "f32, f16, bf16, f64, i32, e4m3 and e5m2": for messages that list what mixgrad holds.
std::string dtype_names(bool file_names = false);

}  // namespace mg

template <>
struct fmt::formatter<mg::DType> : fmt::formatter<std::string_view> {
  auto format(mg::DType dtype, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(mg::dtype_name(dtype), ctx);
  }
};
