// Rung 4 of the FP8 GEMM: Hopper's FP8 Tensor Cores (wgmma with e4m3/e5m2 operands, QGMMA in SASS),
// fed by TMA through mbarriers, for an H100 or H200 (sm_90a). It is rung 4 of the f16/bf16 GEMM
// (gemm_wgmma.cu: read it first; the producer, the ring of stages and the epilogue are shared,
// wgmma_pipeline.cuh) with what FP8 changes:
//   - Codes are bytes, so a k step of one 128-byte swizzled row is 128 codes: 4 wgmma.m64n128k32 a
//     step. Both operands K-major (A [m, k], B [n, k]): FP8 wgmma has no transpose, which is why
//     fp8_linear makes column-wise copies (kernels/fp8.h, Fp8Copies).
//   - The accumulator. QGMMA keeps fewer bits than f32 (DeepSeek-V3: "around 14 bits"; modelled as
//     kernels/fp8.h's kHopperWgmmaFp8Accumulator). DeepSeek-V3's remedy, promotion, is what this rung
//     does: a step's 4 instructions are chained in the Tensor Core's own accumulator (`running`), and
//     at the step's end, after waiting for them, the warpgroup adds `running` into f32 registers and the
//     next step starts from 0. So the sums are the CPU's Limited model (kernels/cpu/gemm_fp8.cpp,
//     limited_chunk_sum) with promote_every 128, or any multiple of it, or 0 (never: chained all along).
//     While one consumer warpgroup promotes, the other's wgmma run: the two overlap.
//   - Scales. Per tensor, the one chunk's sum is multiplied by the scales after the loop; with
//     DeepSeek-V3's blocks (1 x 128 activations, 128 x 128 weights: the scales change every 128 of
//     k, every step) each step's sum goes into the total with one fmaf by its row's and column's
//     scales, as the CPU does (sum = fma(chunk, scale_a * scale_b, sum)). A lane's 2 rows and 32
//     columns find their scales through offsets it computes once a tile.
//   - Tiles of 128 x 128 x 128: each consumer holds 64 x 128 twice (running and total: 128 of its 232
//     registers); stages of 32 KiB, 6 of them (5 for C f32, whose staging is twice the size).
// Results bit for bit the CPU's Limited model with kHopperWgmmaFp8Accumulator on the emulator
// (tests/test_cuda_fp8_wgmma.cpp); SASS: scripts/check-sass requires QGMMA here.
#include "kernels/cuda/gemm_fp8_wgmma.h"

#include <fmt/format.h>

#include <climits>

#include "kernels/cuda/gemm_wgmma.h"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/mma_fp8.cuh"  // with_fp8_formats
#include "kernels/cuda/mma_layout.h"
#include "kernels/cuda/tma_maps.h"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/wgmma_layout.h"
#include "kernels/cuda/wgmma_pipeline.cuh"

namespace mg::kernels::cuda::fp8_wgmma {

using fp8_pipelined::Fp8MmaArgs;
using fp8_pipelined::Fp8ScaleGrid;

namespace {

using namespace wgmma_pipeline;
constexpr int kTileM = 128, kTileN = 128;
constexpr int kTileK = wgmma_layout::kRowBytes;  // codes of k a step: one swizzled row
constexpr int kInstructionCodes = 32;  // m64n128k32
constexpr int kInstructions = kTileK / kInstructionCodes;
constexpr int kStageA = kTileM * kTileK, kStageBytes = kStageA + kTileN * kTileK;
constexpr int kSums = kTileN / 2;  // a lane's share of its warpgroup's 64 x 128

template <class Out>
struct Config {
  static constexpr int kStages = sizeof(Out) == 4 ? 5 : 6;
  static constexpr int kChunkColumns = wgmma_layout::kRowBytes / static_cast<int>(sizeof(Out));
  static constexpr int kWarpStaging = wgmma_pipeline::kStagingBytes<Out, kTileN>;
  static constexpr int kBarrierOffset = kStages * kStageBytes + kConsumerWarps * kWarpStaging;
  // + the mbarriers, + 1 KiB to align the start to the 128-byte swizzle's period.
  static constexpr int kSharedBytes = kBarrierOffset + 2 * kStages * 8 + 1024;
  static_assert(kSharedBytes <= 227 * 1024, "an H100's block has at most 227 KiB of shared memory");
};

template <class Out>
struct Params {
  CUtensorMap a, b, c;
  Fp8MmaArgs<Out> args;
  int tiles_m, tiles_n, tiles, steps;
};

// Where the scales of a lane's lines are in their grids (gemm_fp8_mma.h's Fp8ScaleGrid): its 2 rows of
// A and 32 columns of B (lines past m or n clamped: their sums are never stored), found once a tile;
// then a chunk's scale is scale_inv[offset + first code of the chunk / block_k].
struct LaneScales {
  int rows[2], columns[kSums / 2];
  __device__ LaneScales(const Fp8ScaleGrid& sa, const Fp8ScaleGrid& sb, int row, int column, int m, int n) {
#pragma unroll
    for (int h = 0; h < 2; ++h) rows[h] = min(row + 8 * h, m - 1) / sa.block_lines * sa.columns;
#pragma unroll
    for (int c = 0; c < kSums / 2; ++c)
      columns[c] = min(column + 8 * (c / 2) + c % 2, n - 1) / sb.block_lines * sb.columns;
  }
};

// total (+)= sums x the scales of the chunk whose first code is k0, one fmaf each (value v of the
// accumulator is row h = (v / 2) % 2 and column c = 2 (v / 4) + v % 2 of the lane's).
__device__ __forceinline__ void add_scaled(float (&total)[kSums], const float (&sums)[kSums], const LaneScales& lines,
                                           const Fp8ScaleGrid& sa, const Fp8ScaleGrid& sb, int k0) {
  const float* scale_a = sa.scale_inv + k0 / sa.block_k;
  const float* scale_b = sb.scale_inv + k0 / sb.block_k;
  const float row_scale[2] = {scale_a[lines.rows[0]], scale_a[lines.rows[1]]};
#pragma unroll
  for (int v = 0; v < kSums; ++v) {
    const float scale = __fmul_rn(row_scale[(v / 2) % 2], scale_b[lines.columns[2 * (v / 4) + v % 2]]);
    total[v] = fmaf(sums[v], scale, total[v]);
  }
}

// kBlocks: the scales change every step (chunks of 128); otherwise one chunk, all of k.
template <DType kA, DType kB, class Out, bool kBlocks>
__global__ void __launch_bounds__(kThreads, 1) gemm_fp8_wgmma_kernel(const __grid_constant__ Params<Out> p) {
  using C = Config<Out>;
  const Fp8MmaArgs<Out>& args = p.args;
  MG_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* const shared = hopper::align_to_swizzle_period(raw);
  const std::uint32_t base = hopper::window_address(shared);
  auto* const full = reinterpret_cast<std::uint64_t*>(shared + C::kBarrierOffset);
  std::uint64_t* const empty = full + C::kStages;
  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  init_barriers(full, empty, C::kStages);
  __syncthreads();

  if (warpgroup == 0) {  // the producer: A's 128 rows and B's 128 columns of each step, one box each
    hopper::set_max_registers<kProducerRegisters, false>();
    if (threadIdx.x != 0) return;
    Ring<C::kStages> ring;
    for (int t = static_cast<int>(blockIdx.x); t < p.tiles; t += static_cast<int>(gridDim.x)) {
      const mma_layout::Cell tile = mma_layout::block_tile(t, p.tiles_m, p.tiles_n);
      for (int step = 0; step < p.steps; ++step) {
        std::uint64_t* const stage_full = &full[ring.stage];
        hopper::mbarrier_wait(&empty[ring.stage], ring.phase ^ 1);  // passes at once on the first round
        hopper::mbarrier_arrive_expect_tx(stage_full, kStageBytes);
        unsigned char* const a = shared + ring.stage * kStageBytes;
        hopper::tma_load(a, &p.a, step * kTileK, tile.row * kTileM, 0, stage_full);
        hopper::tma_load(a + kStageA, &p.b, step * kTileK, tile.column * kTileN, 0, stage_full);
        ring.advance();
      }
    }
    return;
  }

  // A consumer: rows 64 (warpgroup - 1) to 64 warpgroup - 1 of each tile.
  hopper::set_max_registers<kConsumerRegisters, true>();
  const int consumer = warpgroup - 1;
  const int warp = static_cast<int>(threadIdx.x) / 32 % 4, lane = static_cast<int>(threadIdx.x) % 32;
  unsigned char* const staging = shared + C::kStages * kStageBytes + (4 * consumer + warp) * C::kWarpStaging;
  Ring<C::kStages> ring;
  float running[kSums], total[kSums];  // the Tensor Core's own sums; the f32 ones they are promoted into
  for (int t = static_cast<int>(blockIdx.x); t < p.tiles; t += static_cast<int>(gridDim.x)) {
    const mma_layout::Cell tile = mma_layout::block_tile(t, p.tiles_m, p.tiles_n);
    const int row0 = tile.row * kTileM + 64 * consumer + 16 * warp, col0 = tile.column * kTileN;  // the warp's
    const LaneScales lines(args.scale_a, args.scale_b, row0 + lane / 4, col0 + 2 * (lane % 4), args.m, args.n);
#pragma unroll
    for (int v = 0; v < kSums; ++v) running[v] = total[v] = 0.0f;
    bool restart = true;  // the next instruction starts from 0 (scale-d 0)
    for (int step = 0; step < p.steps; ++step) {
      const int stage = ring.stage, k0 = step * kTileK;
      hopper::mbarrier_wait(&full[stage], ring.phase);
      const std::uint32_t a = base + static_cast<std::uint32_t>(stage * kStageBytes + consumer * 64 * kTileK);
      const std::uint32_t b = base + static_cast<std::uint32_t>(stage * kStageBytes + kStageA);
      wgmma::fence_operands(running);
      wgmma::fence();
      // The step's 4 instructions back to back (a branch between them would make ptxas fence each).
      // Past k the tile holds TMA's zeros, where the CPU's model stops: adding a group of 0 leaves the
      // accumulator as it is (already cut to its bits, and never -0), so the sums are the model's.
#pragma unroll
      for (int i = 0; i < kInstructions; ++i)
        wgmma::mma_fp8<kA, kB, kTileN>(running, wgmma_layout::encode(wgmma_layout::tile_descriptor(a, true, i, 0)),
                                       wgmma_layout::encode(wgmma_layout::tile_descriptor(b, true, i, 0)),
                                       !(restart && i == 0));
      wgmma::commit();
      wgmma::wait<0>();  // the step's sum, complete: promoted below
      wgmma::fence_operands(running);
      release(&empty[stage], lane);
      ring.advance();
      if constexpr (kBlocks) {  // the chunk's end: its sum, scaled, into the total
        add_scaled(total, running, lines, args.scale_a, args.scale_b, k0);
        restart = true;
      } else {  // one chunk: promoted every promote_every products (the CPU's `done`), or never
        const int done = min(args.k, k0 + kTileK);
        restart = args.promote_every > 0 && done % args.promote_every == 0;
        if (restart) {
#pragma unroll
          for (int v = 0; v < kSums; ++v) total[v] += running[v], running[v] = 0.0f;
        }
      }
    }
    if constexpr (!kBlocks) {  // the CPU's promoted + running, times the scales: fma(chunk, scale, 0)
#pragma unroll
      for (int v = 0; v < kSums; ++v) running[v] += total[v], total[v] = 0.0f;
      add_scaled(total, running, lines, args.scale_a, args.scale_b, 0);
    }
    // The epilogue (wgmma_pipeline.cuh): + bias, activation, one rounding, stored by TMA.
    store_rows<Out, kTileN>(total, staging, &p.c, row0, col0, 0, args.n, lane,
                            [&](float sum, int column) { return args.finish(sum, column); });
  }
  if (lane == 0) hopper::bulk_wait_read<0>();  // the staging must outlive the stores' reads
}

template <DType kA, DType kB, class Out, bool kBlocks>
void launch_kernel(const Fp8MmaArgs<Out>& args, cudaStream_t stream) {
  using C = Config<Out>;
  constexpr auto kernel = gemm_fp8_wgmma_kernel<kA, kB, Out, kBlocks>;
  constexpr const char* kWhat = "kernels::fp8_gemm (rung 4)";
  Params<Out> p{};
  p.a = tma::matrix_map(args.a, 1, args.m, args.k, kTileM, kTileK, kWhat);
  p.b = tma::matrix_map(args.b, 1, args.n, args.k, kTileN, kTileK, kWhat);
  p.c = tma::matrix_map(args.c, 1, args.m, args.n, wgmma_layout::kStagingRows, C::kChunkColumns, kWhat);
  p.args = args;
  p.tiles_m = (args.m + kTileM - 1) / kTileM;
  p.tiles_n = (args.n + kTileN - 1) / kTileN;
  const std::int64_t tiles = std::int64_t{p.tiles_m} * p.tiles_n;
  MG_CHECK(tiles <= INT_MAX, "kernels::fp8_gemm (rung 4): {} tiles exceed the kernel's int count", tiles);
  p.tiles = static_cast<int>(tiles);
  p.steps = (args.k + kTileK - 1) / kTileK;
  int multiprocessors = 0, device = 0;
  MG_CUDA_CHECK(cudaGetDevice(&device));
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
  static OncePerDevice opted_in;  // above 48 KiB of dynamic shared memory a kernel must opt in
  opted_in([&](int) {
    MG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSharedBytes));
  });
  const int blocks = static_cast<int>(std::min<std::int64_t>(tiles, multiprocessors));
  MG_LAUNCH(kernel, blocks, kThreads, C::kSharedBytes, stream)(p);
  MG_CUDA_LAUNCHED();
}

bool blocks_along_k(std::int64_t chunk, std::int64_t k) { return chunk < k; }

}  // namespace

bool takes(bool transpose_a, bool transpose_b, std::int64_t chunk, int promote_every, std::int64_t m, std::int64_t n,
           std::int64_t k, const void* a, const void* b, const void* c, DType out) {
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  const std::int64_t out_bytes = out == DType::F32 ? 4 : 2;
  const std::int64_t tiles = ((m + kTileM - 1) / kTileM) * ((n + kTileN - 1) / kTileN);
  return !transpose_a && transpose_b && k > 0 && k % 16 == 0 && aligned(a) && aligned(b) && aligned(c) &&
         (n * out_bytes) % 16 == 0 && tiles <= INT_MAX && (!blocks_along_k(chunk, k) || chunk == kTileK) &&
         promote_every >= 0 && promote_every % kTileK == 0;
}

template <class Out>
void launch(DType fa, DType fb, const Fp8MmaArgs<Out>& args, cudaStream_t stream) {
  const bool blocks = blocks_along_k(args.chunk, args.k);
  MG_CHECK(!blocks || args.chunk == kTileK,
           "kernels::cuda::fp8_wgmma::launch: no kernel for chunks of {} (takes() refuses them)", args.chunk);
  with_fp8_formats(fa, fb, [&]<DType kA, DType kB>() {
    (blocks ? launch_kernel<kA, kB, Out, true> : launch_kernel<kA, kB, Out, false>)(args, stream);
  });
}

template void launch(DType, DType, const Fp8MmaArgs<float>&, cudaStream_t);
template void launch(DType, DType, const Fp8MmaArgs<__half>&, cudaStream_t);
template void launch(DType, DType, const Fp8MmaArgs<bf16>&, cudaStream_t);

std::string kernel_name(std::int64_t chunk, int promote_every, std::int64_t k, DType out) {
  const int stages = out == DType::F32 ? Config<float>::kStages : Config<__half>::kStages;
  std::string name = fmt::format("fp8 wgmma {}x{}x{}, {} stages", kTileM, kTileN, kTileK, stages);
  if (blocks_along_k(chunk, k)) return name + fmt::format(", scales every {}", chunk);
  return name + (promote_every > 0 ? fmt::format(", promoted every {}", promote_every) : ", never promoted");
}

}  // namespace mg::kernels::cuda::fp8_wgmma
