// The CUDA emulator's device language: force-included (g++ -include) before every kernels/cuda/*.cu
// compiled as host C++ in a -DMG_CUDA=EMULATE build, it makes the kernels' CUDA mean something on a
// CPU. The toolkit's own headers come first: cuda_runtime.h (host-side types: dim3, float4, the
// runtime API, whose functions cudart.cpp defines), cuda_fp16.h and cuda_bf16.h (their host
// conversions round exactly as the device's do). Then, on top of them:
//   - __global__, __device__, __forceinline__, __launch_bounds__, __grid_constant__: nothing (the
//     toolkit's headers already define them so for a host compiler);
//   - threadIdx, blockIdx, blockDim, gridDim: the running emulated thread's (scheduler.cpp);
//   - __syncthreads, __syncthreads_or, __syncwarp, __shfl_xor_sync, __reduce_add_sync: barriers and
//     warp collectives of the scheduler; atomicAdd and atomicMax (unsigned) on host atomics;
//   - the device intrinsics the kernels call, with the device's results (__float2int_rz saturates,
//     __fmul_rn and company round once: this file is compiled with -ffp-contract=off);
//   - nvcuda::wmma (wmma.h), and the three macros through which kernels/cuda/ declares what nvcc
//     and a host compiler must read differently: MG_LAUNCH, MG_SHARED, MG_DYNAMIC_SHARED (their nvcc
//     definitions are in kernels/cuda/common.cuh).
// A kernel that needs another intrinsic or collective fails to compile here; add it below (a
// collective: one Collective with its complete(), as __shfl_xor_sync does).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <fmt/format.h>

#include <atomic>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <tuple>
#include <type_traits>

#include "emulator/emulator.h"

// ---- qualifiers ------------------------------------------------------------------------------------

// Occupancy promises for nvcc's register allocation: nothing to a host compiler.
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

// Shared variables are declared with MG_SHARED: a plain `__shared__` would be a separate variable
// per emulated thread (each has its own stack), so it is refused at compile time.
#undef __shared__
#define __shared__ __shared__is_emulated_by_MG_SHARED_see_kernels_cuda_emulator_device_h

// ---- built-in variables -------------------------------------------------------------------------------

#define threadIdx (static_cast<const uint3&>(::mg::emu::thread_index))
#define blockIdx (static_cast<const uint3&>(::mg::emu::block_index))
#define blockDim (static_cast<const dim3&>(::mg::emu::block_dim))
#define gridDim (static_cast<const dim3&>(::mg::emu::grid_dim))

// ---- math and conversions -------------------------------------------------------------------------------

using std::isfinite;
using std::isinf;
using std::isnan;

// CUDA's min and max take any two arithmetic types (int with int64 here and there).
template <class A, class B>
requires std::is_arithmetic_v<A> && std::is_arithmetic_v<B>
constexpr std::common_type_t<A, B> min(A a, B b) { return b < a ? b : a; }
template <class A, class B>
requires std::is_arithmetic_v<A> && std::is_arithmetic_v<B>
constexpr std::common_type_t<A, B> max(A a, B b) { return a < b ? b : a; }

inline float __int_as_float(int bits) { return std::bit_cast<float>(bits); }
inline int __float_as_int(float value) { return std::bit_cast<int>(value); }

// cvt.rzi.s32.f32: toward zero, saturating at the int range, NaN to 0.
inline int __float2int_rz(float x) {
  if (std::isnan(x)) return 0;
  if (x >= 2147483648.0f) return INT_MAX;
  if (x <= -2147483648.0f) return INT_MIN;
  return static_cast<int>(x);
}

// One IEEE operation each, rounded to nearest: the host's (this file is compiled without contraction).
inline float __fmul_rn(float a, float b) { return a * b; }

// ---- barriers, warp collectives, atomics ---------------------------------------------------------------

inline void __syncthreads(std::source_location where = std::source_location::current()) {
  ::mg::emu::block_barrier(0, where);
}
inline int __syncthreads_or(int predicate, std::source_location where = std::source_location::current()) {
  return ::mg::emu::block_barrier(predicate != 0, where);
}

namespace mg::emu {

// __shfl_xor_sync: lane l receives the value of lane l ^ lane_mask.
template <class T>
struct ShuffleXor {
  T value;
  int lane_mask;
  T result;
  static void complete(void* const lanes[32], unsigned mask) {
    for (int l = 0; l < 32; ++l) {
      if (!(mask & (1u << l))) continue;
      auto* lane = static_cast<ShuffleXor*>(lanes[l]);
      const int source = l ^ lane->lane_mask;
      if (source > 31 || !(mask & (1u << source)))
        fail(
            fmt::format("__shfl_xor_sync: lane {} reads lane {}, which the mask {:#010x} leaves out", l, source, mask));
      lane->result = static_cast<ShuffleXor*>(lanes[source])->value;
    }
  }
  static constexpr Collective kind{"__shfl_xor_sync", &complete};
};

// __reduce_add_sync: every lane receives the sum of the masked lanes' values.
struct ReduceAdd {
  unsigned value;
  unsigned result;
  static void complete(void* const lanes[32], unsigned mask) {
    unsigned sum = 0;
    for (int l = 0; l < 32; ++l)
      if (mask & (1u << l)) sum += static_cast<ReduceAdd*>(lanes[l])->value;
    for (int l = 0; l < 32; ++l)
      if (mask & (1u << l)) static_cast<ReduceAdd*>(lanes[l])->result = sum;
  }
  static constexpr Collective kind{"__reduce_add_sync", &complete};
};

// __syncwarp: the masked lanes meet (a collective with nothing to compute), so what each wrote to
// shared memory before is there for the others after, as the PTX memory model promises.
struct SyncWarp {
  static void complete(void* const[32], unsigned) {}
  static constexpr Collective kind{"__syncwarp", &complete};
};

}  // namespace mg::emu

template <class T>
requires(sizeof(T) == 4 || sizeof(T) == 8) T
    __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32,
                    std::source_location where = std::source_location::current()) {
  if (width != 32) ::mg::emu::fail("__shfl_xor_sync: the emulator implements width 32 only");
  ::mg::emu::ShuffleXor<T> lane{value, lane_mask, T{}};
  ::mg::emu::warp_collective(mask, ::mg::emu::ShuffleXor<T>::kind, &lane, where);
  return lane.result;
}

inline void __syncwarp(unsigned mask = 0xFFFFFFFFu, std::source_location where = std::source_location::current()) {
  char nothing = 0;
  ::mg::emu::warp_collective(mask, ::mg::emu::SyncWarp::kind, &nothing, where);
}

inline unsigned __reduce_add_sync(unsigned mask, unsigned value,
                                  std::source_location where = std::source_location::current()) {
  ::mg::emu::ReduceAdd lane{value, 0};
  ::mg::emu::warp_collective(mask, ::mg::emu::ReduceAdd::kind, &lane, where);
  return lane.result;
}

// Threads run one at a time on one host thread, so these are atomic already; std::atomic_ref says so.
template <class T>
requires(std::is_same_v<T, float> || std::is_same_v<T, unsigned> || std::is_same_v<T, unsigned long long>) T
    atomicAdd(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value, std::memory_order_relaxed);
}
inline unsigned atomicMax(unsigned* address, unsigned value) {
  std::atomic_ref<unsigned> target(*address);
  unsigned old = target.load(std::memory_order_relaxed);
  while (old < value && !target.compare_exchange_weak(old, value, std::memory_order_relaxed)) {}
  return old;
}

#include "emulator/wmma.h"

// The runtime API's C++ form that cuda_runtime.h declares for nvcc only.
template <class T>
cudaError_t cudaFuncSetAttribute(T* function, cudaFuncAttribute attribute, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(function), attribute, value);
}

// ---- what kernels/cuda/common.cuh defines for nvcc ------------------------------------------------------

// MG_LAUNCH(kernel, grid, block, shared_bytes, stream)(arguments...): kernel<<<...>>>(arguments...).
// A kernel with template arguments goes in parentheses: MG_LAUNCH((f<float, 4>), ...).
#define MG_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  MG_EMU_LAUNCH(kernel, grid, block, shared_bytes, stream, true)
// The same for a kernel whose result may depend on the order its float atomics land in: it runs once
// and is not compared across schedules.
#define MG_LAUNCH_UNORDERED(kernel, grid, block, shared_bytes, stream) \
  MG_EMU_LAUNCH(kernel, grid, block, shared_bytes, stream, false)

#define MG_EMU_LAUNCH(kernel, grid, block, shared_bytes, stream, ordered) \
  ::mg::emu::Launcher( \
      ::mg::emu::KernelSite{#kernel, __PRETTY_FUNCTION__, __FILE__, __LINE__, nullptr, ordered}, grid, block, \
      shared_bytes, stream, [&](auto&... arguments) { kernel(arguments...); }, MG_EMU_KERNEL_ADDRESS(kernel))

// The kernel's address, from the arguments' types (its attributes, such as the dynamic shared memory
// opt-in, are kept by address): null when the kernel's parameters are not exactly those types.
#define MG_EMU_KERNEL_ADDRESS(kernel) \
  [&](auto&... arguments) -> const void* { \
    using Pointer = void (*)(std::remove_cvref_t<decltype(arguments)>...); \
    if constexpr (requires { static_cast<Pointer>(kernel); }) \
      return reinterpret_cast<const void*>(static_cast<Pointer>(kernel)); \
    else \
      return nullptr; \
  }

// MG_SHARED(type, name): `__shared__ type name`, e.g. MG_SHARED(float[32], scratch). Here a reference
// to the block's variable, made by the first thread of the block to reach the declaration.
#define MG_SHARED(type, name) MG_SHARED_ALIGNED(alignof(std::type_identity_t<type>), type, name)
#define MG_SHARED_ALIGNED(alignment, type, name) \
  static const char mg_emu_key_##name = 0; \
  std::type_identity_t<type>& name = *static_cast<std::type_identity_t<type>*>( \
      ::mg::emu::shared_variable(&mg_emu_key_##name, sizeof(std::type_identity_t<type>), alignment, #name))

// MG_DYNAMIC_SHARED(type, name): `extern __shared__ type name[]` (aligned to 128 bytes), the
// launch's dynamic shared memory.
#define MG_DYNAMIC_SHARED(type, name) type* const name = static_cast<type*>(::mg::emu::dynamic_shared())

namespace mg::emu {

// The object MG_LAUNCH makes: its call takes the kernel's arguments, copies them as a launch does
// (each thread then gets its own copy of each parameter) and runs the grid.
template <class Body, class AddressOf>
class Launcher {
 public:
  Launcher(const KernelSite& site, dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t, Body body,
           AddressOf address_of)
      : site_(site), grid_(grid), block_(block), shared_bytes_(shared_bytes), body_(body), address_of_(address_of) {}

  template <class... Arguments>
  void operator()(Arguments&&... arguments) {
    using Parameters = std::tuple<std::decay_t<Arguments>...>;
    struct Closure {
      Body* body;
      Parameters* parameters;
      static void invoke(void* self) {
        auto* c = static_cast<Closure*>(self);
        std::apply([c](auto&... p) { (*c->body)(p...); }, *c->parameters);
      }
    };
    Parameters parameters(std::forward<Arguments>(arguments)...);
    Closure closure{&body_, &parameters};
    site_.address = std::apply(address_of_, parameters);
    run_grid(site_, grid_, block_, shared_bytes_, &Closure::invoke, &closure, &parameters, sizeof parameters);
  }

 private:
  KernelSite site_;
  dim3 grid_, block_;
  std::size_t shared_bytes_;
  Body body_;
  AddressOf address_of_;
};

}  // namespace mg::emu
