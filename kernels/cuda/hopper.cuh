// sm_90's asynchronous machinery, as rung 4 of the GEMM (gemm_wgmma.cu) uses it, one function each in
// PTX for nvcc and as calls into the CUDA emulator's model of it (emulator/emulator.h, "Hopper"), as
// cp_async.cuh does for cp.async:
//   window_address                  a generic pointer to shared memory as the 32-bit shared address
//                                   that descriptors, TMA and mbarriers take
//   mbarrier_init/arrive/wait       a barrier in shared memory that counts arrivals and bytes, by
//                                   phases; a wait names the phase's parity
//   tma_load, tma_store             cp.async.bulk.tensor: one box of a tensor map between global and
//                                   shared memory, with the map's swizzle; a load completes its bytes
//                                   on an mbarrier, a store joins the thread's bulk group
//   bulk_commit, bulk_wait_read     a thread's bulk groups: wait until the older stores have read
//                                   their shared memory (it may be overwritten then)
//   fence_proxy_async               makes this thread's ordinary stores to shared memory visible to
//                                   TMA and wgmma (the async proxy), which otherwise may not see them
//   set_max_registers               setmaxnreg: a warpgroup gives registers back (producer) or takes
//                                   more (consumers); the count's rules checked at compile time (the
//                                   kernel asserts that its counts fit the block's pool), not modelled
// The PTX ISA (version 9.x: "cp.async.bulk.tensor", "Parallel Synchronization and Communication
// Instructions: mbarrier", "membar/fence", "setmaxnreg") says what each does; the emulator's model is
// what emulator/README.md describes.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace mg::kernels::cuda::hopper {

#ifdef MG_CUDA_EMULATED

__device__ inline std::uint32_t window_address(const void* p) { return ::mg::emu::shared_address(p); }

__device__ inline void mbarrier_init(std::uint64_t* barrier, unsigned count) {
  ::mg::emu::mbarrier_init(barrier, count);
}
// The initialisations made visible to the async proxy (TMA's complete_tx) and the other threads: the
// fence here, a __syncthreads after it.
__device__ inline void fence_barrier_init() { ::mg::emu::fence_proxy_async(); }
__device__ inline void mbarrier_arrive(std::uint64_t* barrier) { ::mg::emu::mbarrier_arrive(barrier); }
__device__ inline void mbarrier_arrive_expect_tx(std::uint64_t* barrier, unsigned bytes) {
  ::mg::emu::mbarrier_arrive(barrier, bytes);
}
__device__ inline void mbarrier_wait(std::uint64_t* barrier, unsigned parity,
                                     std::source_location where = std::source_location::current()) {
  ::mg::emu::mbarrier_wait(barrier, parity, where);
}

__device__ inline void tma_load(void* shared, const void* map, int c0, int c1, int c2, std::uint64_t* barrier) {
  const int coordinates[3] = {c0, c1, c2};
  ::mg::emu::tma_load(shared, map, coordinates, barrier);
}
__device__ inline void tma_store(const void* map, int c0, int c1, int c2, const void* shared) {
  const int coordinates[3] = {c0, c1, c2};
  ::mg::emu::tma_store(map, coordinates, shared);
}
__device__ inline void bulk_commit() { ::mg::emu::bulk_commit(); }
template <int kPending>
__device__ inline void bulk_wait_read() {
  ::mg::emu::bulk_wait(kPending);
}
__device__ inline void fence_proxy_async() { ::mg::emu::fence_proxy_async(); }

#else

__device__ __forceinline__ std::uint32_t window_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarrier_init(std::uint64_t* barrier, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(window_address(barrier)), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive(std::uint64_t* barrier) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(window_address(barrier))
               : "memory");
}
// The bytes the phase expects, then this thread's arrival.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint64_t* barrier, unsigned bytes) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(
                   window_address(barrier)),
               "r"(bytes)
               : "memory");
}
// Returns once the phase of parity `parity` has completed (at once if the phase in progress has the
// other parity).
__device__ __forceinline__ void mbarrier_wait(std::uint64_t* barrier, unsigned parity) {
  const std::uint32_t address = window_address(barrier);
  std::uint32_t done = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(address), "r"(parity)
                 : "memory");
  } while (!done);
}

// The box of `map` at coordinates (c0 innermost, c1, c2) into `shared` (128-byte aligned; the map's
// swizzle needs its period's alignment too), its bytes completed on `barrier`.
__device__ __forceinline__ void tma_load(void* shared, const void* map, int c0, int c1, int c2,
                                         std::uint64_t* barrier) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(window_address(shared)),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(window_address(barrier))
      : "memory");
}
// The box at `shared` to `map` at (c0, c1, c2), clipped to the tensor.
__device__ __forceinline__ void tma_store(const void* map, int c0, int c1, int c2, const void* shared) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(map),
               "r"(window_address(shared)), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most kPending of the thread's bulk groups still read their shared memory.
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

#endif

// The first byte at or after `raw` (dynamic shared memory) whose shared address is a multiple of 1024:
// where a tile with the 128-byte swizzle must start for the swizzle's period to begin with it.
__device__ inline unsigned char* align_to_swizzle_period(unsigned char* raw) {
  return raw + (1024 - window_address(raw) % 1024) % 1024;
}

// setmaxnreg: the calling warpgroup's registers a thread become kRegisters (kIncrease: at least, taken
// from what other warpgroups gave back; else at most). Every warp of the warpgroup must run it; the
// kernel's launch bounds must cap the registers at entry. The count's rules are the ISA's.
template <int kRegisters, bool kIncrease>
__device__ inline void set_max_registers() {
  static_assert(kRegisters >= 24 && kRegisters <= 256 && kRegisters % 8 == 0,
                "setmaxnreg takes a multiple of 8 from 24 to 256");
#ifdef MG_CUDA_EMULATED
  __syncwarp();  // .sync.aligned: every lane of the warp at the same instruction
#else
  if constexpr (kIncrease)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
  else
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}

}  // namespace mg::kernels::cuda::hopper
