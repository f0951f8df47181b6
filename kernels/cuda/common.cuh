// What every CUDA kernel file shares: the device element type behind each DType, conversions that
// round exactly like the CPU path (core/convert.h), the dtype switch, and launch helpers.
//
// Conventions of the CUDA backend (kernels/cuda/README.md says more):
//   - An entry point kernels::cuda::<fn> has the signature of kernels::cpu::<fn>; kernels/dispatch.cpp
//     picks it when the output lives on a GPU. Ops have checked shapes, dtypes and devices already.
//   - Work is queued on the device's one stream (mg::cuda::stream) under a DeviceGuard; nothing here
//     waits for the GPU. Scratch memory is a Tensor::empty on the same device (the caching allocator).
//   - Kernels are launched with MG_LAUNCH(kernel, grid, block, shared_bytes, stream)(arguments...) and
//     declare shared memory with MG_SHARED / MG_DYNAMIC_SHARED (below), never <<<...>>> or __shared__:
//     the same source then also compiles as host C++ for the CUDA emulator (emulator/), which
//     defines these macros its own way.
//   - Every launch is followed by MG_CUDA_LAUNCHED(), so a bad launch is an mg::Error at its source.
//   - Values are loaded into float, computed in float and rounded once on store (RNE, subnormals
//     kept): the same contract as the CPU, so results agree to the last bit wherever the order of
//     operations is the same.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/tensor.h"
#include "kernels/cuda/runtime.h"

#define MG_CUDA_LAUNCHED() MG_CUDA_CHECK(cudaGetLastError())

#ifndef MG_CUDA_EMULATED
// MG_LAUNCH(kernel, grid, block, shared_bytes, stream)(arguments...); a kernel with template arguments goes
// in parentheses: MG_LAUNCH((f<float, 4>), grid, block, 0, stream)(arguments...).
#define MG_LAUNCH(kernel, grid, block, shared_bytes, stream) kernel<<<grid, block, shared_bytes, stream>>>
// The same, for a kernel whose result may depend on the order its float atomics land in (the
// emulator's race check does not compare its runs).
#define MG_LAUNCH_UNORDERED(kernel, grid, block, shared_bytes, stream) kernel<<<grid, block, shared_bytes, stream>>>
// __shared__ variables: MG_SHARED(float[32], scratch) is `__shared__ float scratch[32]`.
#define MG_SHARED(type, name) __shared__ std::type_identity_t<type> name
#define MG_SHARED_ALIGNED(alignment, type, name) __shared__ __align__(alignment) std::type_identity_t<type> name
// The launch's dynamic shared memory: `extern __shared__ type name[]`, aligned to 128 bytes.
#define MG_DYNAMIC_SHARED(type, name) extern __shared__ __align__(128) type name[]
#endif

namespace mg::kernels::cuda {

using bf16 = __nv_bfloat16;

// ---- conversions (device) -------------------------------------------------------------------------

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(std::int32_t x) { return static_cast<float>(x); }
__device__ __forceinline__ float to_float(std::int64_t x) { return static_cast<float>(x); }  // rounded once
__device__ __forceinline__ float to_float(std::uint8_t x) { return static_cast<float>(x); }

// Rounds a float into T: to nearest even for f16/bf16 (subnormals kept, overflow to inf), toward zero
// with saturation (NaN -> 0) for i32, as core/convert.h's scalar_cast does.
template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float x) {
  return __float2bfloat16_rn(x);
}
// cvt.rzi saturates at the i32 range; NaN is mapped to 0 here, so the CPU's rule does not rest on
// what the conversion instruction makes of a NaN.
template <>
__device__ __forceinline__ std::int32_t from_float<std::int32_t>(float x) {
  return isnan(x) ? 0 : __float2int_rz(x);
}

// The storage-only integers' range (i64, u8), for the saturating conversions into them.
template <class T>
struct IntegerRange;
template <>
struct IntegerRange<std::int64_t> {
  static constexpr long long lowest = -9223372036854775807LL - 1, highest = 9223372036854775807LL;
  static constexpr float past_highest = 9223372036854775808.0f;  // 2^63
};
template <>
struct IntegerRange<std::uint8_t> {
  static constexpr long long lowest = 0, highest = 255;
  static constexpr float past_highest = 256.0f;
};

// A double rounded to float by "round to odd" (truncate, then set the last bit if inexact): rounding
// that float to f16/bf16 is then the single rounding of the double (core/convert.h's rule for i64).
__device__ __forceinline__ float round_to_odd_float(double x) {
  float f = static_cast<float>(x);
  if (isnan(x) || static_cast<double>(f) == x) return f;
  if (fabs(static_cast<double>(f)) > fabs(x)) f = nextafterf(f, 0.0f);
  return __int_as_float(__float_as_int(f) | 1);
}

// Any element type into any other, rounded once, with core/convert.h's rules: i32 -> f16/bf16 directly
// (not through f32, which would round twice above 2^24), i64 through round to odd; into an integer
// truncated and saturated (NaN 0), integers into each other saturated; into bool non-zero (NaN
// included) is true; everything else through the exact f32 value.
template <class To, class From>
__device__ __forceinline__ To convert(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<From, bool>) {
    return convert<To>(static_cast<std::int32_t>(x));
  } else if constexpr (std::is_same_v<To, bool>) {
    if constexpr (std::is_integral_v<From>)
      return x != 0;
    else
      return to_float(x) != 0.0f;
  } else if constexpr (std::is_integral_v<To> && std::is_integral_v<From> && !std::is_same_v<To, std::int32_t>) {
    const long long v = static_cast<long long>(x);  // every From here fits (i32, u8; i64 is itself)
    return v < IntegerRange<To>::lowest    ? static_cast<To>(IntegerRange<To>::lowest)
           : v > IntegerRange<To>::highest ? static_cast<To>(IntegerRange<To>::highest)
                                           : static_cast<To>(v);
  } else if constexpr (std::is_same_v<To, std::int32_t> && std::is_integral_v<From>) {
    const long long v = static_cast<long long>(x);
    return v < -2147483647LL - 1 ? -2147483647 - 1 : v > 2147483647LL ? 2147483647 : static_cast<std::int32_t>(v);
  } else if constexpr (std::is_integral_v<To> && !std::is_same_v<To, std::int32_t>) {
    const float f = to_float(x);
    if (isnan(f)) return 0;
    if (f >= IntegerRange<To>::past_highest) return static_cast<To>(IntegerRange<To>::highest);
    if (f <= static_cast<float>(IntegerRange<To>::lowest)) return static_cast<To>(IntegerRange<To>::lowest);
    return static_cast<To>(f);
  } else if constexpr (std::is_same_v<From, std::int64_t> && !std::is_same_v<To, float>) {
    return from_float<To>(round_to_odd_float(static_cast<double>(x)));
  } else if constexpr (std::is_same_v<From, std::int32_t> && std::is_same_v<To, __half>) {
    return __int2half_rn(x);
  } else if constexpr (std::is_same_v<From, std::int32_t> && std::is_same_v<To, bf16>) {
    return __int2bfloat16_rn(x);
  } else {
    return from_float<To>(to_float(x));
  }
}

// ---- warp and block reductions (device) --------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// The sum of `v` over the block, returned to every thread. blockDim.x is a multiple of 32, at most
// 1024; `scratch` is 32 floats of shared memory. Starts with a barrier, so it may be called in a loop.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

// The max over the block (NaN propagates: fmaxf drops NaN, so NaN is tracked on the side).
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const bool nan = __syncthreads_or(isnan(v));
  if (nan) return __int_as_float(0x7fc00000);
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// fn(T{}) with the element type of a floating dtype, inside a kernel that takes tensors of several
// dtypes in one launch (the multi-tensor unscale); the host has checked the dtypes.
// (A test, not a switch: three dtypes are taken and the host has refused the rest.)
template <class Fn>
__device__ __forceinline__ void visit_floating_on_device(DType dtype, Fn&& fn) {
  if (dtype == DType::F16)
    fn(__half{});
  else if (dtype == DType::BF16)
    fn(bf16{});
  else
    fn(float{});  // f32: the host has checked that every tensor is f32, f16 or bf16
}

// ---- vector access ---------------------------------------------------------------------------------

// Four elements moved by one load or store instruction (16 bytes of f32, 8 of f16/bf16): memory-bound
// kernels read a Pack per thread when every pointer involved is aligned() to it.
constexpr int kPack = 4;

template <class T>
struct alignas(sizeof(T) * kPack) Pack {
  T v[kPack];
};

inline bool aligned(const void* ptr, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(ptr) % bytes == 0; }

// ---- host side ------------------------------------------------------------------------------------

// Calls fn(T{}) with the device element type of `dtype` (float, __half, bf16 or int32): the dtypes
// kernels compute in. The storage-only ones (core/dtype.h) are refused as visit_dtype refuses them;
// f64 tensors never reach a GPU (mg::to_device refuses them), so F64 is an error naming the kernel.
template <class Fn>
decltype(auto) visit_device_dtype(DType dtype, const char* kernel, Fn&& fn) {
  if (dtype == DType::F32) return fn(float{});
  if (dtype == DType::F16) return fn(__half{});
  if (dtype == DType::BF16) return fn(bf16{});
  if (dtype == DType::I32) return fn(std::int32_t{});
  if (dtype_info(dtype).storage_only) throw_storage_only(dtype, kernel);
  throw Error(fmt::format("CUDA kernel {}: no kernel for {} tensors (f64 lives on the CPU only)", kernel, dtype));
}

// Like visit_device_dtype, for the floating dtypes only.
template <class Fn>
decltype(auto) visit_device_floating(DType dtype, const char* kernel, Fn&& fn) {
  if (dtype == DType::F32) return fn(float{});
  if (dtype == DType::F16) return fn(__half{});
  if (dtype == DType::BF16) return fn(bf16{});
  throw Error(fmt::format("CUDA kernel {}: needs an f32, f16 or bf16 tensor, got {}", kernel, dtype));
}

template <class T>
T* device_ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

inline cudaStream_t stream_of(const Tensor& t) { return mg::cuda::stream(t.device().index); }

// Blocks of `threads` for a grid-stride loop over n items: enough to fill the GPU several times
// over, never more than needed.
inline unsigned blocks_for(std::int64_t n, int threads) {
  const std::int64_t wanted = (n + threads - 1) / threads;
#ifdef MG_CUDA_EMULATED
  // Fewer: the loop then runs several rounds on the small inputs of the tests, as it does on a GPU
  // on large ones (MG_EMULATOR_MAX_BLOCKS).
  const std::int64_t max_blocks = ::mg::emu::grid_stride_block_cap();
#else
  constexpr std::int64_t max_blocks = 132 * 32;  // H100: 132 SMs, 32 resident blocks of 64 threads each
#endif
  return static_cast<unsigned>(wanted < 1 ? 1 : (wanted < max_blocks ? wanted : max_blocks));
}

// A grid-stride loop index: for (auto i = first_index(); i < n; i += grid_stride()).
__device__ __forceinline__ std::int64_t first_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

}  // namespace mg::kernels::cuda
