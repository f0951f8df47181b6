// cp.async (sm_80+): copies from global to shared memory that do not pass through registers and land
// later, in commit groups a thread waits for. The one place kernels/cuda/ says it in PTX, so that the
// CUDA emulator (emulator/) can put its two landing modes here: each copy lands when it is issued
// (the emulator's schedules ":issue", which catch a refill that comes too early), or only at the
// cp.async.wait_group that covers its group (":wait", which catch a wait that is too weak).
// Used by the pipelined GEMMs (gemm_wmma.cuh, gemm_mma.cu).
#pragma once

#include "kernels/cuda/common.cuh"

namespace mg::kernels::cuda {

constexpr int kCopyBytes = 16;  // one cp.async

#ifdef MG_CUDA_EMULATED

__device__ inline void copy_async(void* shared, const void* global, int src_bytes) {
  ::mg::emu::copy_async(shared, global, kCopyBytes, src_bytes);
}
__device__ inline void commit_copies() { ::mg::emu::commit_copies(); }
template <int kPending>
__device__ inline void wait_copies() {
  ::mg::emu::wait_copies(kPending);
}

#else

// Copies 16 bytes from global to shared memory; bytes beyond `src_bytes` (0 to 16) are zeros.
// .cg caches in L2 only: each element is read once per block, so L1 would only be polluted.
__device__ __forceinline__ void copy_async(void* shared, const void* global, int src_bytes) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global), "r"(src_bytes)
               : "memory");
}
// Closes the thread's current group of copies.
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most kPending of the thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

#endif

}  // namespace mg::kernels::cuda
