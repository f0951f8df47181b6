// The pipelined WMMA (Tensor Core) GEMM: C[z] = epilogue(op(A[z]) op(B[z])) for f16 operands with f32
// accumulation, C (f16 or f32) rounded once on store. Rung 2 of the ladder in gemm.cu: the step from
// gemm_wmma_simple.cuh (the same multiply, one 16x16 fragment a warp and no overlap of copies and math)
// to gemm_mma.cu, which does what WMMA hides and runs every f16 GEMM now; this one runs when
// kernels::cuda::set_gemm_rung asks for it (the benchmark, the tests). It had bf16 and TF32 versions:
// WMMA's bf16 and TF32 fragment loads compile to generic LD (+ MOVM) on sm_90, no LDSM, and held them
// to 23% and 17% of cuBLAS on an H200 against f16's 37% (bench/results/gpu_bench-h200-2026-11-28.txt).
//
// Shapes: any m, n, k >= 0 and batch, but every operand's rows must start on 16 bytes: the leading
// dimension of A (k, or m when transposed) and of B (n, or k when transposed) a multiple of 8
// elements, and A and B 16-byte aligned (gemm_common.cuh's rows_aligned). The copies are 16-byte
// cp.async, and a copy must not straddle two rows. gemm.cu sends other shapes to the simple kernel.
//
// Launch geometry: 256 threads = 8 warps a block, one 128x128 tile of C a block; the warps are 2 x 4
// over it and each owns 64x32 of C as 4 x 2 WMMA accumulators (64 f32 registers a thread). A step
// along k is 64 bytes of each row: 32 f16 values. Grid (ceil(m/128), ceil(n/128),
// slices * batch): when gemm.cu splits k, a block runs the pipeline over its slice's steps only and
// stores f32 partial sums (gemm_common.cuh) for the second pass to finish.
//
// The pipeline: 4 stages of shared memory, each holding one k step of A's and B's tiles. While the
// warps multiply stage s, the copies of the next 3 steps are in flight (cp.async: global to shared
// without passing through registers, one commit group per step). Before using a stage a thread waits
// until at most 2 groups are pending, i.e. its own copies of that step have landed, and a barrier
// makes everyone's visible; the same barrier guarantees that the stage refilled next was finished
// by every warp one step earlier. 4 x 20 KiB = 80 KiB of shared memory: 2 blocks fit on an SM
// (H100: 228 KiB, A100: 164 KiB), one's copies hiding the other's barriers.
//
// Transposes cost nothing: each tile is copied in the operand's own global layout ([m][k] or [k][m]
// for A, [k][n] or [n][k] for B) and the fragments are loaded as row_major or col_major to match.
// Edges: a 16-byte copy whose row or column lies outside the matrix has source size 0, which fills
// its 16 bytes of shared memory with zeros, so the last, partial tiles along m, n and k add exact
// zeros. Epilogue: the accumulators go through shared memory (reusing the pipeline's buffers), then
// each thread finishes whole elements of C (bias, activation, one rounding) and stores where they exist.
// Fragment pointers (WMMA wants them 32-byte aligned, ldm a multiple of 16 bytes) with the padded rows:
// a [x][k] row is 80 bytes and fragments start 16 rows (1280 bytes) and 32 bytes of k apart; a [k][x]
// row is 272 bytes, fragments 16 rows apart (4352 bytes) and 16 x (32 bytes); stage_b starts 10 KiB
// after stage_a; the accumulator rows are 528 bytes, 16 rows and 16 floats apart. All multiples of 32,
// checked by the static_asserts below.
//
// Tests: build/tests/test_cuda_gemm. Benchmark: build/bench/cuda_gemm (37% of cuBLAS at 4096^3 on an H200,
// 2026-11-28: the padded rows, 64x32 warp tiles and the epilogue's scalar stores are what rung 3 changes).
#pragma once

#include <mma.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/gemm_common.cuh"

namespace mg::kernels::cuda::wmma_pipelined {

using In = __half;
constexpr int kDepth = 16;  // k of one WMMA fragment
constexpr int kTileM = 128, kTileN = 128;  // equal: both operands' tiles are sized by kTileM
static_assert(kTileM == kTileN);
constexpr int kThreads = 256;  // 8 warps
constexpr int kWarpsN = 4;  // warps 2 (along m) x 4 (along n)
constexpr int kWarpM = 64, kWarpN = 32;  // C owned by one warp
constexpr int kFragsM = kWarpM / 16, kFragsN = kWarpN / 16;
constexpr int kStages = 4;
constexpr int kBlocksPerSm = 2;  // the launch bounds' promise; gemm.cu's split-K fills to it
constexpr int kStepBytes = 64;  // of each row per k step
constexpr int kStep = kStepBytes / sizeof(In);  // k per step: 32
// Shared rows are 16 bytes longer than the data. A fragment load reads 8 rows of 16 bytes at once:
// with rows of 64 bytes those land on 2 groups of 4 banks (a 4-way conflict), with 256 bytes on one
// (8-way); with 80 or 272 bytes they cover all 32 banks. 16 bytes also keeps every row aligned for
// cp.async and for WMMA (ldm a multiple of 16 bytes). Rung 3 swizzles instead (mma_layout.h).
constexpr int kSkewBytes = 16;
constexpr int kSkewC = 4;  // floats, for the accumulator tile: same reason
constexpr int kSkew = kSkewBytes / sizeof(In);

// The shared tile of one operand in one stage: `x` is m (A) or n (B). k-major tiles are [k][x]
// (A stored [k, m], B stored [k, n]), the others [x][k].
template <bool kMajor>
struct OperandTile {
  static constexpr int kChunk = kCopyBytes / sizeof(In);  // elements per copy
  static constexpr int kRows = kMajor ? kStep : kTileM;
  static constexpr int kCols = kMajor ? kTileM : kStep;
  static constexpr int kLd = kCols + kSkew;
  // A stage holds either layout: room for the larger one (both are 10 KiB).
  static constexpr int kElements = std::max(kStep * (kTileM + kSkew), kTileM*(kStep + kSkew));

  // The element (x, kk) of the operand, where a fragment of 16 x's starting there begins.
  __device__ static const In* at(const In* tile, int x, int kk) {
    return kMajor ? tile + kk * kLd + x : tile + x * kLd + kk;
  }
  // Byte offsets between fragment starts (see the header): every one a multiple of 32.
  static_assert((kLd * sizeof(In)) % 16 == 0, "ldm must be a multiple of 16 bytes");
  static_assert((16 * kLd * sizeof(In)) % 32 == 0 && (16 * sizeof(In)) % 32 == 0,
                "fragment pointers must be 32-byte aligned");
  static_assert((kElements * sizeof(In)) % 128 == 0, "stage_b must keep the shared buffer's alignment");
};

constexpr int kStageBytes = 2 * OperandTile<false>::kElements * sizeof(In);
constexpr int kAccumulatorBytes = kTileM * (kTileN + kSkewC) * sizeof(float);
static_assert(((kTileN + kSkewC) * sizeof(float)) % 16 == 0 && (16 * (kTileN + kSkewC) * sizeof(float)) % 32 == 0,
              "accumulator fragments must start on 32 bytes, rows a multiple of 16 bytes apart");
constexpr int kSharedBytes = std::max(kStages * kStageBytes, kAccumulatorBytes);

// ---- copies into shared memory -----------------------------------------------------------------

// Queues the copies of one operand tile: rows [row0, row0 + kRows) and columns [col0, col0 + kCols)
// of a row-major [rows, cols] matrix. cols is a multiple of kChunk (the alignment rule above), so a
// copy lies wholly inside the matrix or wholly outside it (and then reads nothing).
template <bool kMajor>
__device__ __forceinline__ void copy_tile(In* tile, const In* matrix, int rows, int cols, int row0, int col0) {
  using Tile = OperandTile<kMajor>;
  constexpr int kChunksPerRow = Tile::kCols / Tile::kChunk;
  constexpr int kChunks = Tile::kRows * kChunksPerRow;  // 512 in every case: 2 copies a thread
  static_assert(kChunks % kThreads == 0);
#pragma unroll
  for (int copy = 0; copy < kChunks / kThreads; ++copy) {
    const int i = copy * kThreads + threadIdx.x;
    const int r = i / kChunksPerRow, c = (i % kChunksPerRow) * Tile::kChunk;
    const int row = row0 + r, col = col0 + c;
    const bool inside = row < rows && col < cols;
    copy_async(tile + r * Tile::kLd + c, inside ? matrix + static_cast<std::int64_t>(row) * cols + col : matrix,
               inside ? kCopyBytes : 0);
  }
}

// ---- the kernel ----------------------------------------------------------------------------------

// A is k-major when stored transposed ([k, m]); B when not ([k, n]). kSplit: k is split (args.partial
// set); a template argument so that the unsplit kernel knows k_begin = 0 and has one store path.
template <class Out, bool kTransposeA, bool kTransposeB, bool kSplit>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) gemm_wmma_kernel(GemmArgs<In, Out> args) {
  using namespace nvcuda;
  using TileA = OperandTile<kTransposeA>;
  using TileB = OperandTile<!kTransposeB>;
  using LayoutA = std::conditional_t<kTransposeA, wmma::col_major, wmma::row_major>;
  using LayoutB = std::conditional_t<kTransposeB, wmma::col_major, wmma::row_major>;

  MG_DYNAMIC_SHARED(unsigned char, shared);  // 128-byte aligned
  const auto stage_a = [&](int stage) { return reinterpret_cast<In*>(shared + stage * kStageBytes); };
  const auto stage_b = [&](int stage) { return stage_a(stage) + TileA::kElements; };

  const int m = args.m, n = args.n, k = args.k;
  const int row0 = blockIdx.x * kTileM, col0 = blockIdx.y * kTileN;
  const GemmBlock block = kSplit ? args.block() : GemmBlock{static_cast<int>(blockIdx.z), 0, 0, k};
  const In* a = args.a_of(block.entry);
  const In* b = args.b_of(block.entry);
  const int warp = threadIdx.x / 32;
  const int warp_row = (warp / kWarpsN) * kWarpM, warp_col = (warp % kWarpsN) * kWarpN;

  // Queues the copies of k step `step` (k from step * kStep) into `stage`. The bounds are the
  // matrix's: a slice of k ends on a step boundary or at k.
  const auto copy_step = [&](int stage, int step) {
    const int k0 = step * kStep;
    if constexpr (kTransposeA)
      copy_tile<true>(stage_a(stage), a, k, m, k0, row0);
    else
      copy_tile<false>(stage_a(stage), a, m, k, row0, k0);
    if constexpr (kTransposeB)
      copy_tile<false>(stage_b(stage), b, n, k, col0, k0);
    else
      copy_tile<true>(stage_b(stage), b, k, n, k0, col0);
  };

  wmma::fragment<wmma::accumulator, 16, 16, kDepth, float> sum[kFragsM][kFragsN];
#pragma unroll
  for (int i = 0; i < kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j) wmma::fill_fragment(sum[i][j], 0.0f);

  // The block's steps are [first, last): all of k, or its slice (k_begin is a multiple of kStep).
  // Step s lives in stage s % kStages. One commit group per step, empty ones included, so that "step
  // s has landed" is always "at most kStages - 2 groups are still pending" when step s is needed:
  // before the wait of step s, kStages - 1 + (s - first) groups are committed, and the first
  // s - first + 1 of them, step s's included, must be complete. Fewer steps than stages (a short k
  // or slice) leave empty groups, which count as complete at once.
  const int first = block.k_begin / kStep, last = (block.k_end + kStep - 1) / kStep;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (first + s < last) copy_step((first + s) % kStages, first + s);
    commit_copies();
  }
  for (int step = first; step < last; ++step) {
    wait_copies<kStages - 2>();  // this thread's copies of `step` are in shared memory
    __syncthreads();  // everyone's are; and every warp is done with step - 1's stage
    const int ahead = step + kStages - 1;
    if (ahead < last) copy_step(ahead % kStages, ahead);  // refills the stage of step - 1
    commit_copies();

    const In* tile_a = stage_a(step % kStages);
    const In* tile_b = stage_b(step % kStages);
#pragma unroll
    for (int kk = 0; kk < kStep; kk += kDepth) {
      wmma::fragment<wmma::matrix_b, 16, 16, kDepth, In, LayoutB> b_frag[kFragsN];
#pragma unroll
      for (int j = 0; j < kFragsN; ++j)
        wmma::load_matrix_sync(b_frag[j], TileB::at(tile_b, warp_col + j * 16, kk), TileB::kLd);
#pragma unroll
      for (int i = 0; i < kFragsM; ++i) {
        wmma::fragment<wmma::matrix_a, 16, 16, kDepth, In, LayoutA> a_frag;
        wmma::load_matrix_sync(a_frag, TileA::at(tile_a, warp_row + i * 16, kk), TileA::kLd);
#pragma unroll
        for (int j = 0; j < kFragsN; ++j) wmma::mma_sync(sum[i][j], a_frag, b_frag[j], sum[i][j]);
      }
    }
  }

  // The epilogue reuses the pipeline's shared memory: no copy may still be writing it (the groups
  // left are empty, but waiting costs nothing) and every warp must be done reading its last stage.
  wait_copies<0>();
  __syncthreads();
  float* c_tile = reinterpret_cast<float*>(shared);  // [kTileM][kTileN + kSkewC]
  constexpr int kLdC = kTileN + kSkewC;
#pragma unroll
  for (int i = 0; i < kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j)
      wmma::store_matrix_sync(c_tile + (warp_row + i * 16) * kLdC + warp_col + j * 16, sum[i][j], kLdC,
                              wmma::mem_row_major);
  __syncthreads();
  // Consecutive threads take consecutive columns: coalesced stores, conflict-free shared reads.
  for (int i = threadIdx.x; i < kTileM * kTileN; i += kThreads) {
    const int r = i / kTileN, col_in_tile = i % kTileN, row = row0 + r, col = col0 + col_in_tile;
    if (row < m && col < n) args.template store<kSplit>(block, row, col, c_tile[r * kLdC + col_in_tile]);
  }
}

// ---- host side -----------------------------------------------------------------------------------

template <class Out, bool kTransposeA, bool kTransposeB, bool kSplit>
void launch_variant(const GemmArgs<In, Out>& args, cudaStream_t stream) {
  // Named for the emulator's messages, which quote the launch's first argument.
  constexpr auto pipelined_gemm = gemm_wmma_kernel<Out, kTransposeA, kTransposeB, kSplit>;
  // Above 48 KiB of dynamic shared memory a kernel must opt in, once per device (the attribute lasts;
  // setting it on every launch would add two driver calls to each); the carveout hint asks for the
  // most shared memory, so 2 blocks fit.
  static OncePerDevice opted_in;
  opted_in([&](int) {
    MG_CUDA_CHECK(cudaFuncSetAttribute(pipelined_gemm, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
    MG_CUDA_CHECK(cudaFuncSetAttribute(pipelined_gemm, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
  });
  MG_LAUNCH(pipelined_gemm, gemm_grid(args, kTileM, kTileN), kThreads, kSharedBytes, stream)(args);
  MG_CUDA_LAUNCHED();
}

template <class Out>
void launch(const GemmArgs<In, Out>& args, const GemmShape& shape, cudaStream_t stream) {
  with_layout(shape, [&]<bool kTransposeA, bool kTransposeB>() {
    if (args.partial)
      launch_variant<Out, kTransposeA, kTransposeB, true>(args, stream);
    else
      launch_variant<Out, kTransposeA, kTransposeB, false>(args, stream);
  });
}

}  // namespace mg::kernels::cuda::wmma_pipelined
