// The C++ element type behind each DType, and visit_dtype: the one switch per kernel family that
// turns a runtime DType tag into a compile-time element type.
//
//   visit_dtype(t.dtype(), "mg::exp", [&](auto zero) {
//     using T = decltype(zero);      // float, half, bfloat16, double or int32_t
//     ...
//   });
//
// The storage-only dtypes (FP8's codes, i64, u8, bool) have C++ types for copying, converting and
// reading (host_type_of, visit_host_type), but no kernel computes in them: visit_dtype refuses them.
//
//   visit_host_type(t.dtype(), "mg::convert", [&](auto zero) {
//     using T = decltype(zero);      // ... or int64_t, uint8_t, bool; FP8 is its own case
//     ...
//   });
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"

namespace mg {

using half = Eigen::half;  // IEEE binary16 on the host
using bfloat16 = Eigen::bfloat16;  // bfloat16 on the host

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::F32;
  else if constexpr (std::is_same_v<T, half>)
    return DType::F16;
  else if constexpr (std::is_same_v<T, bfloat16>)
    return DType::BF16;
  else if constexpr (std::is_same_v<T, double>)
    return DType::F64;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DType::I32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return DType::I64;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return DType::U8;
  else if constexpr (std::is_same_v<T, bool>)
    return DType::BOOL;
  else
    static_assert(!sizeof(T), "mixgrad has no DType for this C++ type");
}

// The type arithmetic happens in: f64 stays f64, everything else computes in f32 and is rounded
// to its storage type on store (exactly what Tensor Cores and CUDA's half intrinsics do).
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The error of a kernel asked to compute in a storage-only dtype (core/dtype.h).
[[noreturn]] inline void throw_storage_only(DType dtype, const char* op) {
  if (is_fp8(dtype))
    throw Error(fmt::format("{}: {} tensors hold FP8 codes, for storage and the FP8 GEMM only; convert to f32 or "
                            "bf16 first (x.to(DType::F32))",
                            op, dtype));
  if (is_coded(dtype))
    throw Error(fmt::format("{}: {} tensors hold codes ({} bits each), for storage and block-scaled quantization "
                            "only; convert to f32 or bf16 first (x.to(DType::F32))",
                            op, dtype, dtype_info(dtype).bits));
  throw Error(fmt::format("{}: {} tensors are for storage (what PyTorch saves: labels, indices, images, masks), not "
                          "computed in; convert first: x.to(DType::I32) for indices, x.to(DType::F32) for values",
                          op, dtype));
}

// Calls fn(T{}) with the element type of `dtype`: the dtypes kernels compute in. `op` names the
// caller for the error message. Storage-only dtypes are not computed in: an error (throw_storage_only).
// (Tests, not a switch: the dtypes taken are a closed set, so a new row of MG_DTYPES changes nothing
// here; a switch over DType is for places where every dtype needs its own answer.)
template <class Fn>
decltype(auto) visit_dtype(DType dtype, const char* op, Fn&& fn) {
  if (dtype == DType::F32) return fn(float{});
  if (dtype == DType::F16) return fn(half{});
  if (dtype == DType::BF16) return fn(bfloat16{});
  if (dtype == DType::F64) return fn(double{});
  if (dtype == DType::I32) return fn(std::int32_t{});
  if (dtype_info(dtype).storage_only) throw_storage_only(dtype, op);
  throw Error(fmt::format("{}: unknown dtype tag {}", op, static_cast<int>(dtype)));
}

// As visit_dtype, for the floating dtypes only; i32 is an error naming the op.
template <class Fn>
decltype(auto) visit_floating(DType dtype, const char* op, Fn&& fn) {
  if (dtype == DType::F32) return fn(float{});
  if (dtype == DType::F16) return fn(half{});
  if (dtype == DType::BF16) return fn(bfloat16{});
  if (dtype == DType::F64) return fn(double{});
  if (dtype_info(dtype).storage_only) throw_storage_only(dtype, op);
  throw Error(fmt::format("{}: needs a floating-point tensor, got {}", op, dtype));
}

// Calls fn(T{}) with the host C++ type of any dtype but the coded ones (FP8, E2M1, E8M0, whose codes
// are decoded by core/fp8.h): the storage-only integers included. For conversion and reading, not for kernels; a
// storage-only row with a host type adds its line here (test_dtype converts every dtype).
template <class Fn>
decltype(auto) visit_host_type(DType dtype, const char* op, Fn&& fn) {
  if (dtype == DType::I64) return fn(std::int64_t{});
  if (dtype == DType::U8) return fn(std::uint8_t{});
  if (dtype == DType::BOOL) return fn(bool{});
  if (is_coded(dtype))
    throw Error(fmt::format("{}: {} codes have no host type; decode them with core/fp8.h", op, dtype));
  return visit_dtype(dtype, op, std::forward<Fn>(fn));
}

}  // namespace mg
