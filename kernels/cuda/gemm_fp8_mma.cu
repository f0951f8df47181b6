// Rung 3 of the FP8 GEMM: the pipeline of gemm_mma.cu (read it first) with FP8 codes, for the GEMMs
// mg::fp8_linear makes in every recipe: C = act(sum over chunks of (A B^T)_chunk * scale_a * scale_b +
// bias), both operands K-major, scales per tensor, by DeepSeek-V3's blocks (chunks of 128 along k) or
// MX's (chunks of 32), and the F32 accumulator or a Limited one. What it does not take (other layouts,
// k not a multiple of 16, other chunks, a Limited accumulator promoted inside a chunk of 128 at other than
// its end or at a count that is not a multiple of 32) runs on gemm_fp8.cu's rung 1, which this kernel equals bit for bit where both run (tests/test_cuda_fp8_gemm.cpp).
//
// Why FP8 fits rung 3's layouts unchanged: an FP8 fragment of mma.sync.m16n8k32 holds the same bytes
// as an f16 fragment of m16n8k16 (mma_fp8.cuh: register r of A is row group + 8 (r % 2) at k bytes
// 4 quad + 16 (r / 2) .. + 3; f16's a0a1..a6a7 are those bytes too), so a K-major tile of codes is
// mma_layout.h's K-major tile of 16-bit "pairs": rows of 128 codes (one k step), the same swizzle,
// copies, ldmatrix rows and kept offsets, and a substep of 16 pairs is one m16n8k32. That is also why
// the operands must be K-major: ldmatrix has no byte transpose before sm_100 (and wgmma none for
// e4m3/e5m2), so fp8_linear quantises the operands its backward reduces along their rows into
// column-wise copies (kernels/fp8.h, Fp8Copies).
//
// The sums, as rung 1 and the CPU's model make them (kernels/fp8.h, Fp8Accumulator): with the F32
// accumulator each instruction starts from 0 and its sum is added to the lane's f32 sums (promote_every
// = 32); with a Limited one the instruction's own accumulator is carried from one mma to the next and
// added to the f32 sums every promote_every products. At each chunk's end (where a block scale changes,
// or once, after the loop) the chunk's sum goes into the total with one fmaf by scale_a * scale_b of its
// row and column; then + bias (+0 without one), the activation, one rounding into C. The instruction's
// own accumulator is the device's (sm_89: FP8 Tensor Cores; sm_90: f16 HMMA; the emulator models both).
// fp8_mma_kernel's comment says which sums a lane keeps in each case.
//
// Blocks of 128 x 128 (8 warps of 32 x 64) with one set of sums, 64 x 128 (8 warps of 16 x 64) with two
// (Cfg says why), 3 stages in cp.async, block order rasterised for L2, fragments loaded as they are
// used (each instruction's result arrives in 4 registers of its own before it is added, so registers
// are scarcer than in gemm_mma.cu), the scales read at each chunk's end through offsets the block
// writes once into shared memory, the epilogue staged through shared memory for 16-byte stores
// (mma_epilogue.cuh, as gemm_mma.cu's).
//
// Tests: build/tests/test_cuda_fp8_gemm (against the CPU's model and rung 1, bit for bit on the emulator).
// Benchmark: build/bench/cuda_gemm fp8 (on a GPU). SASS: scripts/check-sass.
#include <fmt/format.h>

#include <climits>
#include <string>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/gemm_fp8_mma.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/mma_epilogue.cuh"
#include "kernels/cuda/mma_fp8.cuh"
#include "kernels/cuda/mma_layout.h"
#include "kernels/pointwise.h"

namespace mg::kernels::cuda::fp8_pipelined {

using namespace mma_layout;

namespace {

// The configurations: 8 warps (4 along m, 2 along n) of kWarpRows x 64, each lane holding 64 sums in
// all (kWarpRows / 16 x 8 fragments a set), 3 stages, one block an SM (its 256 threads may have 255
// registers each). With one set of sums (one chunk, promoted after every instruction) warps
// of 32 x 64 and blocks of 128 x 128; with two sets (a carried accumulator beside the promoted sums,
// or chunks' sums beside their scaled total) warps of 16 x 64 and blocks of 64 x 128. Rung 3's
// 64 x 64 warps would hold 128 sums a set, and beside each instruction's own result (and on sm_90 the
// f16 conversions of the codes) ptxas spills; so it does with 2 sets of 32 x 64.
template <int kWarpRows_>
struct Cfg {
  static constexpr int kWarpRows = kWarpRows_, kFragsM = kWarpRows / 16;
  static constexpr int kWarpsM = 4, kWarpsN = 2, kStages = 3, kBlocksPerSm = 1;
  static constexpr int kTileM = kWarpsM * kWarpRows, kTileN = kWarpsN * kWarpTile;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  using TileA = OperandTile<2, kTileM, true>;  // K-major: rows of 64 pairs, 128 codes of k a step
  using TileB = OperandTile<2, kTileN, true>;
  static constexpr int kStageBytes = TileA::kBytes + TileB::kBytes;
  using Staging = WarpStaging<kWarpRows>;
  static constexpr int kPipelineBytes = kStages * kStageBytes > kThreads / 32 * Staging::kBytes
                                            ? kStages* kStageBytes
                                            : kThreads / 32 * Staging::kBytes;
  // Then the offsets of the block's rows' and columns' scales (scale_lines), 4 bytes a line.
  static constexpr int kSharedBytes = kPipelineBytes + (kTileM + kTileN) * 4;
  using Sums = MmaAccumulator[kFragsM][kFragsN];  // one set of a lane's sums
  MG_LAYOUT_FN static Cell warp_corner(int warp) {
    return {(warp / kWarpsN) * kWarpRows, (warp % kWarpsN) * kWarpTile};
  }
};
template <bool kChained, int kChunk>
using CfgFor = Cfg<(kChained || kChunk > 0) ? 16 : 32>;
constexpr int kThreads = 256;  // both configurations'
constexpr int kStepCodes = kRowBytes;  // codes of k a step
constexpr int kInstructionCodes = 32;  // codes of k an instruction: m16n8k32

// Queues the cp.async copies of one operand's tile for the step whose first code of k is k0: thread
// t's copies are rows x, x + 32, ... of 16 codes at k0 + kc (codes [rows][k], k a multiple of 16, so a
// chunk is wholly inside or outside; outside reads nothing and fills zeros, which add nothing).
template <class Tile>
__device__ __forceinline__ void copy_tile(unsigned char* tile, int first, const std::uint8_t* codes, int rows, int k,
                                          int x, int kc) {
  constexpr int kApartX = Tile::template kCopyApartX<kThreads>;
  static_assert(Tile::template kCopyApartK<kThreads> == 0);
  const std::uint8_t* source = codes + static_cast<std::int64_t>(x) * k + kc;
#pragma unroll
  for (int i = 0; i < Tile::kCopies / kThreads; ++i) {
    const bool inside = x + i * kApartX < rows && kc < k;
    copy_async(tile + first + i * Tile::template kCopyStep<kThreads>, inside ? source : codes,
               inside ? kChunkBytes : 0);
    source += static_cast<std::int64_t>(kApartX) * k;
  }
}

// Where the scales of the block's rows of A and columns of B are: each line's offset in its scale grid
// (line / block_lines * columns; lines past m or n clamped, their sums never stored), written once by
// the block into shared memory after the pipeline's, so that a chunk's scale is
// scale_inv[offset + first code of the chunk / block_k] and no lane keeps offsets in registers.
template <class C>
__device__ __forceinline__ int* scale_lines(unsigned char* shared) {
  return reinterpret_cast<int*>(shared + C::kPipelineBytes);  // [kTileM rows of A, then kTileN columns of B]
}
template <class C>
__device__ __forceinline__ void write_scale_lines(unsigned char* shared, const Fp8ScaleGrid& sa, const Fp8ScaleGrid& sb,
                                                  int row0, int col0, int m, int n) {
  for (int t = static_cast<int>(threadIdx.x); t < C::kTileM + C::kTileN; t += kThreads)
    scale_lines<C>(shared)[t] = t < C::kTileM ? min(row0 + t, m - 1) / sa.block_lines * sa.columns
                                              : min(col0 + t - C::kTileM, n - 1) / sb.block_lines * sb.columns;
}

// A chunk's end (the chunk whose codes include g): total += its sums times the scales of its rows and
// columns, one fmaf each, as rung 1 and the CPU do (kernels/cpu/gemm_fp8.cpp). `corner` is the warp's.
template <class C>
__device__ __forceinline__ void add_chunk(typename C::Sums& total, const typename C::Sums& chunk, unsigned char* shared,
                                          Cell corner, int lane, const Fp8ScaleGrid& sa, const Fp8ScaleGrid& sb,
                                          int g) {
  const float* scale_a = sa.scale_inv + g / sa.block_k;
  const float* scale_b = sb.scale_inv + g / sb.block_k;
  const int* rows = scale_lines<C>(shared) + corner.row + lane / 4;  // row 16 i + 8 h of the warp's
  const int* columns = scale_lines<C>(shared) + C::kTileM + corner.column + 2 * (lane % 4);  // column 8 j + e
#pragma unroll
  for (int i = 0; i < C::kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float sa_r = scale_a[rows[16 * i + 8 * (r / 2)]];
        const float sb_r = scale_b[columns[8 * j + r % 2]];
        total[i][j].x[r] = fmaf(chunk[i][j].x[r], __fmul_rn(sa_r, sb_r), total[i][j].x[r]);
      }
}

template <class C>
__device__ __forceinline__ void set_zero(typename C::Sums& sums) {
#pragma unroll
  for (int i = 0; i < C::kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) sums[i][j].x[r] = 0.0f;
}

// to += from, and from = 0.
template <class C>
__device__ __forceinline__ void promote(typename C::Sums& to, typename C::Sums& from) {
#pragma unroll
  for (int i = 0; i < C::kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) to[i][j].x[r] += from[i][j].x[r], from[i][j].x[r] = 0.0f;
}

// The sums, in the order rung 1 and the CPU's model make them (kernels/fp8.h, Fp8Accumulator), kept in
// two of three sets (Cfg::Sums: 64 registers a lane with one set in use, 32 with two):
//   running   the instruction's own accumulator, carried from one mma to the next (kChained: a Limited
//             accumulator promoted every promote_every products, or never); otherwise each mma
//             starts from 0 and its 32 products are promoted at once (F32, or Limited every 32)
//   promoted  the chunk's f32 sum of promoted parts
//   total     the sum over chunks, each chunk's sum times its scales (kChunk: 128 for DeepSeek-V3's
//             blocks, 32 for MX's, where the scales change along k; 0: one chunk, all of k, whose
//             product by the scales is made after the loop, into the same registers)
// Promotions and chunks' ends are at instruction boundaries (takes()). With both kChained and kChunk
// the promotions are only at the chunks' ends, so a chunk's promoted sum is 0 + running and `promoted`
// holds no registers across the loop: two sets each time.
template <DType kA, DType kB, class Out, bool kChained, int kChunk>
__global__ void __launch_bounds__(kThreads, CfgFor<kChained, kChunk>::kBlocksPerSm)
    fp8_mma_kernel(Fp8MmaArgs<Out> args) {
  using Cfg = CfgFor<kChained, kChunk>;
  using TileA = typename Cfg::TileA;
  using TileB = typename Cfg::TileB;
  MG_DYNAMIC_SHARED(unsigned char, shared);  // 128-byte aligned: every swizzle period is 1024 bytes
  const auto stage_a = [&](int stage) { return shared + stage * Cfg::kStageBytes; };
  const auto stage_b = [&](int stage) { return shared + stage * Cfg::kStageBytes + TileA::kBytes; };

  const int m = args.m, n = args.n, k = args.k;
  const Cell tile = block_tile(static_cast<int>(blockIdx.x), (m + Cfg::kTileM - 1) / Cfg::kTileM,
                               (n + Cfg::kTileN - 1) / Cfg::kTileN);
  const int row0 = tile.row * Cfg::kTileM, col0 = tile.column * Cfg::kTileN;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const Cell corner = Cfg::warp_corner(warp);

  // This thread's copies (the same positions in both tiles): the first one's tile coordinates (x, and
  // k in pairs) and offset.
  const Coord copy = TileA::copy_start(static_cast<int>(threadIdx.x));
  const int copy_offset = TileA::offset(copy.x, copy.k);
  static_assert(TileB::offset(1, 2) == TileA::offset(1, 2));
  const auto copy_step = [&](int stage, int step) {
    const int kc = step * kStepCodes + 2 * copy.k;
    copy_tile<TileA>(stage_a(stage), copy_offset, args.a, m, k, row0 + copy.x, kc);
    copy_tile<TileB>(stage_b(stage), copy_offset, args.b, n, k, col0 + copy.x, kc);
  };

  using LoadsA = FragmentLoads<TileA, Operand::A>;
  using LoadsB = FragmentLoads<TileB, Operand::B>;
  static_assert(LoadsA::kLdmatrix && !LoadsA::kTranspose && LoadsB::kLdmatrix && !LoadsB::kTranspose);
  typename Cfg::Sums running, promoted, total;
  if constexpr (kChained) set_zero<Cfg>(running);
  if constexpr (!(kChained && kChunk > 0)) set_zero<Cfg>(promoted);
  if constexpr (kChunk > 0) set_zero<Cfg>(total);
  write_scale_lines<Cfg>(shared, args.scale_a, args.scale_b, row0, col0, m, n);  // read after the next barrier

  // The pipeline of gemm_mma.cu with one fragment set: the loads of a substep, then its multiplies.
  const int steps = (k + kStepCodes - 1) / kStepCodes;
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < steps) copy_step(s, s);
    commit_copies();
  }
  wait_copies<Cfg::kStages - 2>();
  __syncthreads();
  const Fp8FragmentC zero{};
  for (int step = 0; step < steps; ++step) {
    const int stage = step % Cfg::kStages;
#pragma unroll 1
    for (int kk = 0; kk < kSubsteps; ++kk) {
      // The lane's ldmatrix rows of this substep (mma_layout.h's FragmentLoads: a kept offset and
      // constants), computed here: a loop unrolled over the substeps lets ptxas hoist every load and
      // the next substep's instructions, and it spills (scripts/check-sass).
      const unsigned char* tile_a = stage_a(stage) + LoadsA::kept(lane, corner.row, kk);
      const unsigned char* tile_b = stage_b(stage) + LoadsB::kept(lane, corner.column, kk);
      if (kk == 0) {  // refill the stage of step - 1: every warp finished it before the last barrier
        const int ahead = step + Cfg::kStages - 1;
        if (ahead < steps) copy_step(ahead % Cfg::kStages, ahead);
        commit_copies();
      }
      const int g = step * kStepCodes + kk * kInstructionCodes;  // the substep's first code of k
      if (g < k) {  // (the same for the whole block) past k the tile holds zeros, and rung 1 stops
        // A's fragments for the substep, then B's a pair of n8 columns at a time with their 4
        // instructions (fewer fragment registers live than all of B's at once).
        Fp8FragmentA a[Cfg::kFragsM];
#pragma unroll
        for (int i = 0; i < Cfg::kFragsM; ++i) ldmatrix<4, false>(a[i].x, tile_a + LoadsA::constant(i, kk, 0));
#pragma unroll
        for (int p = 0; p < kFragsN / 2; ++p) {
          std::uint32_t b[4];
          ldmatrix<4, false>(b, tile_b + LoadsB::constant(p, kk, 0));
#pragma unroll
          for (int i = 0; i < Cfg::kFragsM; ++i)
#pragma unroll
            for (int q = 0; q < 2; ++q) {
              const int j = 2 * p + q;
              const Fp8FragmentB bj{{b[2 * q], b[2 * q + 1]}};
              if constexpr (kChained) {
                Fp8FragmentC carried{{running[i][j].x[0], running[i][j].x[1], running[i][j].x[2], running[i][j].x[3]}};
                mma_fp8<kA, kB>(carried, a[i], bj, carried);  // the Tensor Core's own sum, carried
#pragma unroll
                for (int r = 0; r < 4; ++r) running[i][j].x[r] = carried.x[r];
              } else {
                Fp8FragmentC group;
                mma_fp8<kA, kB>(group, a[i], bj, zero);  // one instruction's 32 products, from 0
#pragma unroll
                for (int r = 0; r < 4; ++r) promoted[i][j].x[r] += group.x[r];  // promoted into f32
              }
            }
        }
        const int end = min(k, g + kInstructionCodes);  // products summed so far (of the one chunk)
        if constexpr (kChained && kChunk == 0)
          if (args.promote_every > 0 && end % args.promote_every == 0) promote<Cfg>(promoted, running);
        if constexpr (kChunk > 0) {
          if (end % kChunk == 0 || end == k) {  // the chunk's end: its sum, scaled, into the total
            if constexpr (kChained) {
              set_zero<Cfg>(promoted);  // 0 + running (see above)
              promote<Cfg>(promoted, running);
            }
            add_chunk<Cfg>(total, promoted, shared, corner, lane, args.scale_a, args.scale_b, g);
            set_zero<Cfg>(promoted);
          }
        }
      }
      if (kk == kSubsteps - 1) {  // after the warp's last load from this stage
        wait_copies<Cfg::kStages - 2>();  // this thread's copies of step + 1 have landed,
        __syncthreads();  // everyone's; and every warp is done with this step's stage
      }
    }
  }
  // ---- the epilogue, as rung 1's: the one chunk's product by the scales (one fmaf), + bias (+0
  // without one), activation, one rounding; through each warp's part of the pipeline's shared memory
  // (mma_epilogue.cuh) ----
  wait_copies<0>();  // the groups left are empty, but no copy may still be writing
  __syncthreads();  // and every warp is done reading its last stage
  if constexpr (kChunk == 0) {
    set_zero<Cfg>(total);
    if constexpr (kChained) promote<Cfg>(promoted, running);  // rung 1's promoted + running
    if (k > 0)
      add_chunk<Cfg>(total, promoted, shared, corner, lane, args.scale_a, args.scale_b, 0);  // k = 0: no scales
  }
  store_through_staging(shared + warp * Cfg::Staging::kBytes, total, lane, row0 + corner.row, col0 + corner.column, m,
                        n, args.c,
                        [&](float value, int column) { return from_float<Out>(args.finish(value, column)); });
}

template <DType kA, DType kB, class Out, bool kChained, int kChunk>
void launch_kernel(const Fp8MmaArgs<Out>& args, cudaStream_t stream) {
  using Cfg = CfgFor<kChained, kChunk>;
  constexpr auto fp8_mma = fp8_mma_kernel<kA, kB, Out, kChained, kChunk>;  // the emulator's messages quote this name
  static OncePerDevice opted_in;  // above 48 KiB of dynamic shared memory a kernel must opt in
  opted_in([&](int) {
    MG_CUDA_CHECK(cudaFuncSetAttribute(fp8_mma, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSharedBytes));
    MG_CUDA_CHECK(
        cudaFuncSetAttribute(fp8_mma, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  });
  const std::int64_t tiles = ((args.m + std::int64_t{Cfg::kTileM} - 1) / Cfg::kTileM) *
                             ((args.n + std::int64_t{Cfg::kTileN} - 1) / Cfg::kTileN);
  MG_LAUNCH(fp8_mma, dim3(static_cast<unsigned>(tiles)), kThreads, Cfg::kSharedBytes, stream)(args);
  MG_CUDA_LAUNCHED();
}

// The kernel for the sums: chunks of 32 (MX) or 128 (DeepSeek-V3's blocks) when the scales change
// along k; the instruction's accumulator carried unless every instruction is promoted (or is a chunk of
// its own, which starts from 0 all the same).
struct Variant {  // fp8_mma_kernel's kChunk and kChained
  int chunk;  // 0: one chunk (all of k), else 32 or 128
  bool chained;
  Variant(std::int64_t scale_chunk, int promote_every, std::int64_t k)
      : chunk(scale_chunk < k ? static_cast<int>(scale_chunk) : 0),
        chained(promote_every != kInstructionCodes && chunk != kInstructionCodes) {}
};

template <DType kA, DType kB, class Out>
void launch_formats(const Fp8MmaArgs<Out>& args, cudaStream_t stream) {
  const auto [chunk, chained] = Variant(args.chunk, args.promote_every, args.k);
  MG_CHECK(chunk == 0 || chunk == 32 || chunk == 128,
           "kernels::cuda::fp8_pipelined::launch: no kernel for chunks of {} (takes() refuses them)", chunk);
  if (chunk == 0) (chained ? launch_kernel<kA, kB, Out, true, 0> : launch_kernel<kA, kB, Out, false, 0>)(args, stream);
  if (chunk == 32) launch_kernel<kA, kB, Out, false, 32>(args, stream);
  if (chunk == 128)
    (chained ? launch_kernel<kA, kB, Out, true, 128> : launch_kernel<kA, kB, Out, false, 128>)(args, stream);
}

}  // namespace

bool takes(bool transpose_a, bool transpose_b, std::int64_t chunk, int promote_every, std::int64_t m, std::int64_t n,
           std::int64_t k, const void* a, const void* b) {
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kChunkBytes == 0; };
  using Smaller = Cfg<16>;  // the configuration with more tiles
  const std::int64_t tiles = ((m + Smaller::kTileM - 1) / Smaller::kTileM) *
                             ((n + Smaller::kTileN - 1) / Smaller::kTileN);
  const bool one_chunk = chunk >= k;
  const bool compiled = one_chunk || chunk == 32 || chunk == 128;  // MX's and DeepSeek-V3's blocks along k
  // Two sets of sums (fp8_mma_kernel): with chunks, promotions after every instruction or only at the
  // chunks' ends.
  const bool two_sets = one_chunk || promote_every == kInstructionCodes || chunk == kInstructionCodes ||
                        promote_every % chunk == 0;
  return !transpose_a && transpose_b && k % 16 == 0 && aligned(a) && aligned(b) && tiles <= INT_MAX && compiled &&
         promote_every >= 0 && promote_every % kInstructionCodes == 0 && two_sets;
}

template <class Out>
void launch(DType fa, DType fb, const Fp8MmaArgs<Out>& args, cudaStream_t stream) {
  with_fp8_formats(fa, fb, [&]<DType kA, DType kB>() { launch_formats<kA, kB>(args, stream); });
}

template void launch(DType, DType, const Fp8MmaArgs<float>&, cudaStream_t);
template void launch(DType, DType, const Fp8MmaArgs<__half>&, cudaStream_t);
template void launch(DType, DType, const Fp8MmaArgs<bf16>&, cudaStream_t);

std::string kernel_name(std::int64_t chunk, int promote_every, std::int64_t k) {
  const auto [scale_chunk, chained] = Variant(chunk, promote_every, k);
  std::string name = chained || scale_chunk > 0 ? "fp8 mma 64x128x128, 3 stages" : "fp8 mma 128x128x128, 3 stages";
  if (chained) name += promote_every > 0 ? fmt::format(", promoted every {}", promote_every) : ", never promoted";
  if (scale_chunk > 0) name += fmt::format(", scales every {}", scale_chunk);
  return name;
}

}  // namespace mg::kernels::cuda::fp8_pipelined
