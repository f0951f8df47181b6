// What both rung-4 kernels share (gemm_wgmma.cu for f16/bf16, gemm_fp8_wgmma.cu for FP8; read the
// first): the warpgroups' roles and registers, the ring of stages and its mbarriers, and the
// epilogue's swizzled staging stored by TMA.
#pragma once

#include <cudaTypedefs.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/mma.cuh"  // store_shared_4, store_shared_8
#include "kernels/cuda/mma_layout.h"
#include "kernels/cuda/wgmma_layout.h"

namespace mg::kernels::cuda::wgmma_pipeline {

// Warpgroup 0 is the producer (one thread issues every TMA copy), warpgroups 1 and 2 the consumers,
// each multiplying 64 rows of the block's tile of C.
constexpr int kConsumers = 2, kThreads = 128 * (1 + kConsumers);
constexpr int kConsumerWarps = 4 * kConsumers;
// setmaxnreg: 40 for the producer, 232 for the consumers. The block's registers are a pool fixed at
// launch, 384 x 168 (the launch bounds' cap: 64 Ki / 384, in granules of 8); setmaxnreg.inc waits
// until the pool has what it asks for, so the counts must fit it or the consumers wait for ever.
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
constexpr int kRegistersAtLaunch = 65536 / kThreads / 8 * 8;
static_assert(128 * kProducerRegisters + 128 * kConsumers * kConsumerRegisters <= kThreads * kRegistersAtLaunch,
              "the warpgroups' setmaxnreg counts must fit the registers the block launched with");

// A position in the ring of kStages stages: the stage, and the parity of the round the ring is on,
// which flips every time it wraps (an mbarrier wait names the parity it expects).
template <int kStages>
struct Ring {
  int stage = 0;
  unsigned phase = 0;
  __device__ void advance() {
    if (++stage == kStages) stage = 0, phase ^= 1;
  }
};

// Stage s has two mbarriers: full[s] (the producer's arrive.expect_tx, then TMA's bytes) and empty[s]
// (each of the consumer warps arrives when its wgmma have read the stage). Thread 0 makes them; the
// block's barrier after this call publishes them.
__device__ inline void init_barriers(std::uint64_t* full, std::uint64_t* empty, int stages) {
  if (threadIdx.x != 0) return;
  for (int s = 0; s < stages; ++s) {
    hopper::mbarrier_init(&full[s], 1);
    hopper::mbarrier_init(&empty[s], kConsumerWarps);
  }
  hopper::fence_barrier_init();
}

// A consumer warp is done reading stage `empty` guards (its wgmma have completed: after their wait).
__device__ inline void release(std::uint64_t* empty, int lane) {
  __syncwarp();
  if (lane == 0) hopper::mbarrier_arrive(empty);
}

// The epilogue of one consumer warp: its 16 rows of f32 sums (kTileN columns, wgmma_layout.h's
// accumulator layout), each finished by finish(sum, column of C) (bias, activation) and rounded once
// into Out, staged as 128-byte swizzled chunks of 16 rows (wgmma_layout.h's staging_offset) and
// stored by lane 0 with TMA at row `row`, columns n0.., batch entry `entry` of C's map (which clips
// to C). The staging's writes are ordinary stores that TMA reads through the async proxy:
// fence.proxy.async between the two; and the previous tile's stores must have read the staging
// (bulk wait) before it is written again. Columns past n are stored as 0 and clipped.
template <class Out, int kTileN, class Finish>
__device__ __forceinline__ void store_rows(const float (&sums)[kTileN / 2], unsigned char* staging,
                                           const CUtensorMap* map, int row, int n0, int entry, int n, int lane,
                                           Finish finish) {
  constexpr int kChunkColumns = wgmma_layout::kRowBytes / static_cast<int>(sizeof(Out));
  const std::uint32_t staging_address = hopper::window_address(staging);
  if (lane == 0) hopper::bulk_wait_read<0>();  // the previous tile's stores have read the staging
  __syncwarp();
  // Unrolled, as every loop over `sums`: an array indexed at run time would live in local memory.
#pragma unroll
  for (int v = 0; v < kTileN / 2; v += 2) {
    const mma_layout::Cell cell = wgmma_layout::accumulator_cell(0, lane, v);  // row within the warp's 16
    const int column = n0 + cell.column;
    Out pair[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) pair[i] = from_float<Out>(column + i < n ? finish(sums[v + i], column + i) : 0.0f);
    const std::uint32_t offset = wgmma_layout::staging_offset(cell.row, cell.column, static_cast<int>(sizeof(Out)));
    const std::uint32_t address = wgmma_layout::swizzle(staging_address + offset, wgmma_layout::Swizzle::B128);
    unsigned char* const at = staging + (address - staging_address);
    // One store of the pair, its bits moved in registers. Not a memcpy into the bytes of shared
    // memory: ptxas 13.0 compiles that one byte at a time and, for a 16-bit float, the low byte as
    // the value converted to an integer (F2I.U8.F16): C's low bytes were wrong on an H200
    // (2026-11-29). scripts/check-sass fails on that instruction and on byte stores here.
    if constexpr (sizeof(Out) == 4) {
      store_shared_8(at, pair[0], pair[1]);
    } else {
      std::uint32_t bits;
      std::memcpy(&bits, pair, sizeof bits);
      store_shared_4(at, bits);
    }
  }
  hopper::fence_proxy_async();  // the staging stores, visible to TMA
  __syncwarp();
  if (lane == 0) {
    for (int chunk = 0; chunk < kTileN / kChunkColumns; ++chunk)
      hopper::tma_store(map, n0 + chunk * kChunkColumns, row, entry,
                        staging + chunk * wgmma_layout::kStagingChunkBytes);
    hopper::bulk_commit();
  }
}

// Bytes of one consumer warp's staging for a tile kTileN wide of Out.
template <class Out, int kTileN>
constexpr int kStagingBytes =
    kTileN* static_cast<int>(sizeof(Out)) / wgmma_layout::kRowBytes* wgmma_layout::kStagingChunkBytes;

}  // namespace mg::kernels::cuda::wgmma_pipeline
