// Rung 3 of the FP8 GEMM: the pipeline of gemm_mma.cu (read it first) with FP8 codes, for the GEMMs
// mg::fp8_linear makes under per-tensor scaling (fp8_delayed, fp8_current): C = act(A B^T * scale_a *
// scale_b + bias), both operands K-major, one scale each, every instruction's sum promoted into f32.
// The rest (block and MX scales, a Limited accumulator, other layouts, k not a multiple of 16) run on
// fp8.cu's rung 1, which this kernel equals bit for bit where both run (tests/test_cuda_fp8.cpp).
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
// The sums, as rung 1 and the CPU's model make them with promote_every = 32 (kernels/fp8.h): each
// instruction starts from 0 and its sum is added to the lane's f32 sums, in the order of k; at the
// end one fmaf by scale_a * scale_b, + bias (+0 without one), the activation, one rounding into C.
// The instruction's own accumulator is the device's (sm_89: FP8 Tensor Cores; sm_90: f16 HMMA; the
// emulator models both), and with one instruction a promotion it is used only for its 32 products.
//
// Block tile 128 x 128 (8 warps of 32 x 64: Cfg below says why not 64 x 64), 3 stages of 32 KiB in cp.async,
// block order rasterised for L2, fragments loaded as they are used (each instruction's result arrives
// in 4 registers of its own before it is added, so registers are scarcer than in gemm_mma.cu), the epilogue
// staged through shared memory for 16-byte stores (mma_epilogue.cuh, as gemm_mma.cu's).
//
// Tests: build/tests/test_cuda_fp8 (against the CPU's model and rung 1, bit for bit on the emulator).
// Benchmark: build/bench/fp8_gemm (on a GPU). SASS: scripts/check-sass.
#include <climits>

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

// The configuration: 128 x 128 of C a block, 8 warps of 32 x 64 (4 along m, 2 along n: 2 x 8
// fragments, 64 sums a lane), 3 stages of 32 KiB, one block an SM (its 256 threads may have 255
// registers each). Rung 3's 64 x 64 warps would hold 128 sums a lane, and with each instruction's
// result in registers of its own beside them ptxas spills.
struct Cfg {
  static constexpr int kTileM = 128, kTileN = 128, kStages = 3, kBlocksPerSm = 1;
  static constexpr int kWarpRows = 32, kFragsM = kWarpRows / 16;
  static constexpr int kWarpsM = kTileM / kWarpRows, kWarpsN = kTileN / kWarpTile;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kStageBytes = (kTileM + kTileN) * kRowBytes;
  using Staging = WarpStaging<kWarpRows>;
  static constexpr int kSharedBytes = kStages * kStageBytes > kThreads / 32 * Staging::kBytes
                                          ? kStages* kStageBytes
                                          : kThreads / 32 * Staging::kBytes;
  MG_LAYOUT_FN static Cell warp_corner(int warp) {
    return {(warp / kWarpsN) * kWarpRows, (warp % kWarpsN) * kWarpTile};
  }
};
using Tile = OperandTile<2, 128, true>;  // K-major, 128 rows of 64 pairs: 128 codes of k a step
constexpr int kStepCodes = kRowBytes;  // codes of k a step
constexpr int kCopiesPerThread = Tile::kCopies / Cfg::kThreads;
static_assert(Cfg::kTileM == Tile::kExtent && Cfg::kTileN == Tile::kExtent);

// Queues the cp.async copies of one operand's tile for the step whose first code of k is k0: thread
// t's copies are rows x, x + 16, ... of 16 codes at k0 + kc (codes [rows][k], k a multiple of 16, so a
// chunk is wholly inside or outside; outside reads nothing and fills zeros, which add nothing).
__device__ __forceinline__ void copy_tile(unsigned char* tile, int first, const std::uint8_t* codes, int rows, int k,
                                          int x, int kc) {
  constexpr int kApartX = Tile::kCopyApartX<Cfg::kThreads>;
  static_assert(Tile::kCopyApartK<Cfg::kThreads> == 0);
  const std::uint8_t* source = codes + static_cast<std::int64_t>(x) * k + kc;
#pragma unroll
  for (int i = 0; i < kCopiesPerThread; ++i) {
    const bool inside = x + i * kApartX < rows && kc < k;
    copy_async(tile + first + i * Tile::kCopyStep<Cfg::kThreads>, inside ? source : codes, inside ? kChunkBytes : 0);
    source += static_cast<std::int64_t>(kApartX) * k;
  }
}

template <fp8::Format kA, fp8::Format kB, class Out>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kBlocksPerSm) fp8_mma_kernel(Fp8MmaArgs<Out> args) {
  MG_DYNAMIC_SHARED(unsigned char, shared);  // 128-byte aligned: every swizzle period is 1024 bytes
  const auto stage_a = [&](int stage) { return shared + stage * Cfg::kStageBytes; };
  const auto stage_b = [&](int stage) { return shared + stage * Cfg::kStageBytes + Tile::kBytes; };

  const int m = args.m, n = args.n, k = args.k;
  const Cell tile = block_tile(static_cast<int>(blockIdx.x), (m + Cfg::kTileM - 1) / Cfg::kTileM,
                               (n + Cfg::kTileN - 1) / Cfg::kTileN);
  const int row0 = tile.row * Cfg::kTileM, col0 = tile.column * Cfg::kTileN;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const Cell corner = Cfg::warp_corner(warp);

  // This thread's copies (the same positions in both tiles): the first one's tile coordinates (x, and
  // k in pairs) and offset.
  const Coord copy = Tile::copy_start(static_cast<int>(threadIdx.x));
  const int copy_offset = Tile::offset(copy.x, copy.k);
  const auto copy_step = [&](int stage, int step) {
    const int kc = step * kStepCodes + 2 * copy.k;
    copy_tile(stage_a(stage), copy_offset, args.a, m, k, row0 + copy.x, kc);
    copy_tile(stage_b(stage), copy_offset, args.b, n, k, col0 + copy.x, kc);
  };

  using LoadsA = FragmentLoads<Tile, Operand::A>;
  using LoadsB = FragmentLoads<Tile, Operand::B>;
  static_assert(LoadsA::kLdmatrix && !LoadsA::kTranspose && LoadsB::kLdmatrix && !LoadsB::kTranspose);
  MmaAccumulator sum[Cfg::kFragsM][kFragsN];  // the lane's f32 sums, promoted after every instruction
#pragma unroll
  for (int i = 0; i < Cfg::kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) sum[i][j].x[r] = 0.0f;

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
      // B's fragments for the substep, then A's one m16 row at a time with its 8 instructions.
      std::uint32_t b[kFragsN / 2][4];
#pragma unroll
      for (int p = 0; p < kFragsN / 2; ++p) ldmatrix<4, false>(b[p], tile_b + LoadsB::constant(p, kk, 0));
#pragma unroll
      for (int i = 0; i < Cfg::kFragsM; ++i) {
        Fp8FragmentA a;
        ldmatrix<4, false>(a.x, tile_a + LoadsA::constant(i, kk, 0));
#pragma unroll
        for (int j = 0; j < kFragsN; ++j) {
          const Fp8FragmentB bj{{b[j / 2][2 * (j % 2)], b[j / 2][2 * (j % 2) + 1]}};
          Fp8FragmentC group;
          mma_fp8<kA, kB>(group, a, bj, zero);  // one instruction's 32 products, from 0
#pragma unroll
          for (int r = 0; r < 4; ++r) sum[i][j].x[r] += group.x[r];  // promoted into f32
        }
      }
      if (kk == kSubsteps - 1) {  // after the warp's last load from this stage
        wait_copies<Cfg::kStages - 2>();  // this thread's copies of step + 1 have landed,
        __syncthreads();  // everyone's; and every warp is done with this step's stage
      }
    }
  }
  // ---- the epilogue, as rung 1's: one fmaf by the scales, + bias (+0 without one), activation, one
  // rounding; through each warp's 16 KiB of the pipeline's shared memory (mma_epilogue.cuh) ----
  wait_copies<0>();  // the groups left are empty, but no copy may still be writing
  __syncthreads();  // and every warp is done reading its last stage
  const float scale = __fmul_rn(args.scale_a[0], args.scale_b[0]);
#pragma unroll
  for (int i = 0; i < Cfg::kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) sum[i][j].x[r] = fmaf(sum[i][j].x[r], scale, 0.0f);
  store_through_staging(shared + warp * Cfg::Staging::kBytes, sum, lane, row0 + corner.row, col0 + corner.column, m, n,
                        args.c, [&](float value, int column) {
                          float v = value + (args.bias ? args.bias[column] : 0.0f);
                          if (args.activation == Activation::Relu) v = functors::Relu{}(v);
                          if (args.activation == Activation::Gelu) v = functors::Gelu{}(v);
                          return from_float<Out>(v);
                        });
}

template <fp8::Format kA, fp8::Format kB, class Out>
void launch_formats(const Fp8MmaArgs<Out>& args, cudaStream_t stream) {
  constexpr auto fp8_mma = fp8_mma_kernel<kA, kB, Out>;  // the emulator's messages quote this name
  static OncePerDevice opted_in;  // above 48 KiB of dynamic shared memory a kernel must opt in
  opted_in([&](int) {
    MG_CUDA_CHECK(cudaFuncSetAttribute(fp8_mma, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSharedBytes));
    MG_CUDA_CHECK(
        cudaFuncSetAttribute(fp8_mma, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  });
  const std::int64_t tiles = ((args.m + std::int64_t{Cfg::kTileM} - 1) / Cfg::kTileM) *
                             ((args.n + std::int64_t{Cfg::kTileN} - 1) / Cfg::kTileN);
  MG_LAUNCH(fp8_mma, dim3(static_cast<unsigned>(tiles)), Cfg::kThreads, Cfg::kSharedBytes, stream)(args);
  MG_CUDA_LAUNCHED();
}

}  // namespace

bool takes(bool transpose_a, bool transpose_b, std::int64_t scales_a, std::int64_t scales_b, bool promote_each,
           std::int64_t m, std::int64_t n, std::int64_t k, const void* a, const void* b) {
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kChunkBytes == 0; };
  const std::int64_t tiles = ((m + Cfg::kTileM - 1) / Cfg::kTileM) * ((n + Cfg::kTileN - 1) / Cfg::kTileN);
  return !transpose_a && transpose_b && scales_a == 1 && scales_b == 1 && promote_each && k % 16 == 0 && aligned(a) &&
         aligned(b) && tiles <= INT_MAX;
}

template <class Out>
void launch(fp8::Format fa, fp8::Format fb, const Fp8MmaArgs<Out>& args, cudaStream_t stream) {
  with_fp8_formats(fa, fb, [&]<fp8::Format kA, fp8::Format kB>() { launch_formats<kA, kB>(args, stream); });
}

template void launch(fp8::Format, fp8::Format, const Fp8MmaArgs<float>&, cudaStream_t);
template void launch(fp8::Format, fp8::Format, const Fp8MmaArgs<__half>&, cudaStream_t);
template void launch(fp8::Format, fp8::Format, const Fp8MmaArgs<bf16>&, cudaStream_t);

const char* kernel_name() { return "fp8 mma 128x128x128, 3 stages"; }

}  // namespace mg::kernels::cuda::fp8_pipelined
