// The C++ element type behind each DType, and visit_dtype: the one switch per kernel family that
// turns a runtime DType tag into a compile-time element type.
//
//   visit_dtype(t.dtype(), "mg::exp", [&](auto zero) {
//     using T = decltype(zero);      // float, half, bfloat16, double or int32_t
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
  else
    static_assert(!sizeof(T), "mixgrad has no DType for this C++ type");
}

// The type arithmetic happens in: f64 stays f64, everything else computes in f32 and is rounded
// to its storage type on store (exactly what Tensor Cores and CUDA's half intrinsics do).
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The error of a kernel asked to compute on FP8 codes (core/dtype.h: storage only).
[[noreturn]] inline void throw_fp8_storage_only(DType dtype, const char* op) {
  throw Error(fmt::format("{}: {} tensors hold FP8 codes, for storage and the FP8 GEMM only; convert to f32 or "
                          "bf16 first (x.to(DType::F32))",
                          op, dtype));
}

// Calls fn(T{}) with the element type of `dtype`. `op` names the caller for the error message.
// FP8 dtypes have no C++ type to compute in: an error (throw_fp8_storage_only).
template <class Fn>
decltype(auto) visit_dtype(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::F32:
      return fn(float{});
    case DType::F16:
      return fn(half{});
    case DType::BF16:
      return fn(bfloat16{});
    case DType::F64:
      return fn(double{});
    case DType::I32:
      return fn(std::int32_t{});
    case DType::E4M3:
    case DType::E5M2:
      throw_fp8_storage_only(dtype, op);
  }
  throw Error(fmt::format("{}: unknown dtype tag {}", op, static_cast<int>(dtype)));
}

// As visit_dtype, for the floating dtypes only; i32 is an error naming the op.
template <class Fn>
decltype(auto) visit_floating(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::F32:
      return fn(float{});
    case DType::F16:
      return fn(half{});
    case DType::BF16:
      return fn(bfloat16{});
    case DType::F64:
      return fn(double{});
    case DType::I32:
      break;
    case DType::E4M3:
    case DType::E5M2:
      throw_fp8_storage_only(dtype, op);
  }
  throw Error(fmt::format("{}: needs a floating-point tensor, got {}", op, dtype));
}

}  // namespace mg
