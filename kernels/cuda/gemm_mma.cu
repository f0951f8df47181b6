// Rung 3 of the GEMM ladder (gemm.cu): C[z] = epilogue(op(A[z]) op(B[z])) on Tensor Cores through the
// instructions WMMA hides, mma.sync and ldmatrix (mma.cuh), with f32 accumulation and C rounded once
// on store. The mainline for f16 and bf16 operands (C in their dtype or f32), and with f32 operands
// the TF32 path (kernels::allow_tf32(): operands rounded to TF32 in registers, m16n8k8). Read
// gemm_wmma.cuh first: the same pipeline, with WMMA's fragments. What this rung adds, and why:
//   - Fragments loaded with ldmatrix, for f16 and bf16 alike. WMMA's bf16 and TF32 fragment loads
//     compile to generic LD (+ MOVM) on sm_90; ldmatrix is one instruction per four 8x8 matrices,
//     and .trans reads MN-major tiles without a transposing copy. TF32 fragments of MN-major tiles
//     are read one f32 a register (ldmatrix moves 16-bit elements and cannot transpose f32).
//   - Shared memory swizzled, not padded (mma_layout.h): chunk c of each 128-byte row at c ^ (row %
//     8). Every cp.async write and ldmatrix read of a warp is conflict-free (tests/test_mma_layout.cpp
//     counts them), and a tile is exactly its data.
//   - Warp tiles of 64 x 64 (4 x 8 fragments m16n8: 128 f32 accumulators a lane), so each fragment
//     loaded from shared memory feeds 8 (A) or 4 (B) multiplies; f16/bf16 fragments double-buffered
//     in registers: the next substep's are loaded while this one's multiply. Registers are the limit
//     (255 a thread): every address is a kept offset plus a constant (mma_layout.h's FragmentLoads
//     says why), and TF32, which rounds its fragments in registers too, keeps one set.
//   - Block tiles of 128 x 256 (8 warps, 2 x 4; 4 stages of 48 KiB: 192 KiB, one block an SM) when C
//     has enough of them to fill the GPU and the device lets a block have that much shared memory (an
//     H100 does, an Ada GPU does not), else 128 x 128 (4 warps, 3 stages of 32 KiB: two blocks an SM
//     of an H100); gemm.cu decides. A k step is 128 bytes of each row: 64 f16/bf16 or 32 f32, 4
//     substeps.
//   - Blocks walk C in groups of 8 tile rows, column by column (mma_layout.h's block_tile: L2 reuse).
//   - The epilogue stages each warp's 64 x 64 sums through shared memory (16 KiB a warp, in the
//     pipeline's buffers), so that every lane stores 16 consecutive bytes of a row of C and a warp's
//     store covers whole 128-byte runs (bias, activation, one rounding on the way: mma_epilogue.cuh).
//
// Shapes: any m, n, k >= 0 and batch. Copy::Async needs every operand row to start on 16 bytes (the
// leading dimensions a multiple of 8 f16/bf16 or 4 f32, A and B 16-byte aligned), as rung 2 does;
// Copy::Registers (f16/bf16, 128 x 128 only) takes any shape: each thread loads its elements through
// registers and stores 16 bytes at a time, both tiles K-major (the copy transposes), so a misaligned
// operand still runs on this rung instead of WMMA (e.g. the n = 10 classes of a classifier).
// Launch geometry: Config::kThreads threads; grid (tiles of C, 1, slices * batch): x is the tile's
// number in block_tile's order. When gemm.cu splits k, a block runs the pipeline over its slice and
// stores f32 partial sums (gemm_common.cuh) for the second pass.
// The pipeline (one commit group per step, empty ones included, as in rung 2): at substep 3 of step
// s, once the warp has loaded its last fragments of step s's stage, a thread waits until step s + 1's
// copies have landed and a barrier makes everyone's visible (so substep 3 can load step s + 1's first
// fragments); at substep 0 of step s + 1 it refills the stage of step s, which every warp finished
// reading before that barrier.
//
// FP4 (launch_fp4, Copy::Fp4): the codes of both operands decoded into bf16 in registers between the
// global load and the shared store, a chunk of 8 values with its block's scale at a time, then this
// rung's bf16 mainline; the tensors' factors multiply the sums in the epilogue.
//
// Tests: build/tests/test_cuda_gemm (every rung), test_cuda_fp4_quantize (FP4), test_mma_layout
// (layouts, conflicts, sectors), test_cuda_mma (the instructions). Benchmark: build/bench/cuda_gemm. The compiler's output:
// scripts/check-sass (HMMA : LDSM : LDGSTS : BAR per k step, no generic LD, no spills).
#include <cstring>
#include <type_traits>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/gemm_mma.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/mma_epilogue.cuh"

namespace mg::kernels::cuda::mma_pipelined {

using namespace mma_layout;

namespace {

// One operand as the copies see it: element (x, k) (x along m for A, n for B) of a contiguous matrix
// stored [x][k] (K-major: kKMajor) or [k][x].
template <class In, bool kKMajor>
struct GlobalOperand {
  const In* data;
  int extent_x, extent_k;
  __device__ std::int64_t index(int x, int k) const {
    return kKMajor ? static_cast<std::int64_t>(x) * extent_k + k : static_cast<std::int64_t>(k) * extent_x + x;
  }
  // The 16 bytes of elements along k from (x, k) (Copy::Registers): loaded one by one, zeros outside.
  __device__ __forceinline__ uint4 chunk(int x, int k) const {
    In values[16 / sizeof(In)];
#pragma unroll
    for (int e = 0; e < 16 / static_cast<int>(sizeof(In)); ++e)
      values[e] = x < extent_x && k + e < extent_k ? data[index(x, k + e)] : In{};
    uint4 bits;
    std::memcpy(&bits, values, sizeof bits);
    return bits;
  }
};

// An FP4 operand as Copy::Fp4 reads it: chunk(x, k) is the 8 values along k from (x, k), each code
// times its block's scale (fp4_decode_value: exact in bf16), as bf16 bits; zeros outside the matrix.
// A chunk has one scale (block_cols is a multiple of 8) and its codes are 4 bytes: one 32-bit load
// where extent_k is a multiple of 8 (every chunk then whole and 4-byte aligned), else byte by byte.
struct Fp4Chunks {
  Fp4Source source;
  __device__ __forceinline__ uint4 chunk(int x, int k) const {
    const Fp4Source& s = source;
    std::uint32_t words[4] = {0u, 0u, 0u, 0u};
    if (x < s.extent_x && k < s.extent_k) {
      const std::int64_t first = static_cast<std::int64_t>(x) * s.extent_k + k;  // even, as extent_k and k are
      const float scale = fp4_scale_value(s.scales[x / s.block_rows * s.scale_cols + k / s.block_cols], s.format);
      const int count = min(8, s.extent_k - k);
      std::uint32_t codes = 0;
      if (s.extent_k % 8 == 0) {
        codes = *reinterpret_cast<const std::uint32_t*>(s.codes + first / 2);
      } else {
#pragma unroll
        for (int byte = 0; byte < 4; ++byte)
          if (2 * byte < count) codes |= std::uint32_t{s.codes[first / 2 + byte]} << (8 * byte);
      }
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (e < count)  // past the end: 0, even under a NaN scale
          words[e / 2] |= (fp8::detail::float_bits(fp4_decode_scaled((codes >> (4 * e)) & 0xFu, scale)) >> 16)
                          << (16 * (e % 2));
    }
    return make_uint4(words[0], words[1], words[2], words[3]);
  }
};

// Queues the cp.async copies of one operand's tile for the step at k0: the tile has the global
// layout's majorness, so every copy is 16 contiguous bytes of a global row. The alignment rule makes
// a chunk lie wholly inside the matrix or wholly outside it: outside, it reads nothing and fills 16
// bytes of zeros (the partial tiles along m, n and k add exact zeros). A thread's copies are evenly
// spaced (OperandTile::kCopyStep), so it keeps one shared offset (`first`: the tile's offset of its
// first copy) and one global pointer, and steps both by constants.
template <class Tile, int kThreads, class In, bool kKMajor>
__device__ __forceinline__ void copy_async_tile(unsigned char* tile, int first, const GlobalOperand<In, kKMajor>& g,
                                                int x, int k) {
  constexpr int kApartX = Tile::template kCopyApartX<kThreads>, kApartK = Tile::template kCopyApartK<kThreads>;
  const In* source = g.data + g.index(x, k);
  const std::int64_t stride = g.index(kApartX, kApartK);
#pragma unroll
  for (int i = 0; i < Tile::kCopies / kThreads; ++i) {
    const bool inside = x + i * kApartX < g.extent_x && k + i * kApartK < g.extent_k;
    copy_async(tile + first + i * Tile::template kCopyStep<kThreads>, inside ? source : g.data,
               inside ? kCopyBytes : 0);
    source += stride;
  }
}

// The same through registers, for any alignment (a GlobalOperand) or FP4 codes (Fp4Chunks): the tile is
// K-major whatever the global layout, each chunk its 8 elements along k, made in registers (zeros
// outside the matrix) and stored at once.
template <class Tile, int kThreads, class Source>
__device__ __forceinline__ void copy_registers_tile(unsigned char* tile, int first, const Source& g, int x, int k) {
  static_assert(Tile::kKMajor && Tile::kChunkElements * 2 == 16);  // f16/bf16 tiles
  constexpr int kApartX = Tile::template kCopyApartX<kThreads>;
#pragma unroll 2
  for (int i = 0; i < Tile::kCopies / kThreads; ++i)
    store_shared_16(tile + first + i * Tile::template kCopyStep<kThreads>, g.chunk(x + i * kApartX, k));
}

// A lane's fragments for one substep: A of its warp's 4 m16 rows, B of its 4 pairs of n8 columns.
struct Fragments {
  MmaA a[kFragsM];
  std::uint32_t b[kFragsN / 2][4];
};

// ---- the kernel ----------------------------------------------------------------------------------

template <class Cfg, class In, class Out, bool kTransposeA, bool kTransposeB, bool kSplit, Copy kCopy>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kBlocksPerSm)
    gemm_mma_kernel(GemmArgs<In, Out> args, Fp4Operands fp4) {
  constexpr int kBytes = sizeof(In);
  constexpr bool kTf32 = std::is_same_v<In, float>;
  static_assert(!kTf32 || kCopy == Copy::Async, "TF32 copies through cp.async only");
  // Global layouts: A is K-major when not transposed ([m][k]), B when transposed ([n][k]).
  constexpr bool kGlobalKMajorA = !kTransposeA, kGlobalKMajorB = kTransposeB;
  constexpr bool kKMajorA = kCopy != Copy::Async || kGlobalKMajorA;
  constexpr bool kKMajorB = kCopy != Copy::Async || kGlobalKMajorB;
  using TileA = OperandTile<kBytes, Cfg::kTileM, kKMajorA>;
  using TileB = OperandTile<kBytes, Cfg::kTileN, kKMajorB>;
  constexpr int kStep = TileA::kStep;

  MG_DYNAMIC_SHARED(unsigned char, shared);  // 128-byte aligned: every swizzle period is 1024 bytes
  const auto stage_a = [&](int stage) { return shared + stage * Cfg::kStageBytes; };
  const auto stage_b = [&](int stage) { return shared + stage * Cfg::kStageBytes + TileA::kBytes; };

  const int m = args.m, n = args.n, k = args.k;
  const Cell tile = block_tile(static_cast<int>(blockIdx.x), (m + Cfg::kTileM - 1) / Cfg::kTileM,
                               (n + Cfg::kTileN - 1) / Cfg::kTileN);
  const int row0 = tile.row * Cfg::kTileM, col0 = tile.column * Cfg::kTileN;
  const GemmBlock block = kSplit ? args.block() : GemmBlock{static_cast<int>(blockIdx.z), 0, 0, k};
  const GlobalOperand<In, kGlobalKMajorA> a{args.a_of(block.entry), m, k};
  const GlobalOperand<In, kGlobalKMajorB> b{args.b_of(block.entry), n, k};
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const Cell corner = Cfg::warp_corner(warp);

  // This thread's copies: the tile coordinates of its first one, and that one's offset in the tile.
  const Coord copy_a = TileA::copy_start(static_cast<int>(threadIdx.x));
  const Coord copy_b = TileB::copy_start(static_cast<int>(threadIdx.x));
  const int copy_a_offset = TileA::offset(copy_a.x, copy_a.k), copy_b_offset = TileB::offset(copy_b.x, copy_b.k);
  // Queues the copies of k step `step` into `stage`.
  const auto copy_step = [&](int stage, int step) {
    const int k0 = step * kStep;
    if constexpr (kCopy == Copy::Async) {
      copy_async_tile<TileA, Cfg::kThreads>(stage_a(stage), copy_a_offset, a, row0 + copy_a.x, k0 + copy_a.k);
      copy_async_tile<TileB, Cfg::kThreads>(stage_b(stage), copy_b_offset, b, col0 + copy_b.x, k0 + copy_b.k);
    } else if constexpr (kCopy == Copy::Registers) {
      copy_registers_tile<TileA, Cfg::kThreads>(stage_a(stage), copy_a_offset, a, row0 + copy_a.x, k0 + copy_a.k);
      copy_registers_tile<TileB, Cfg::kThreads>(stage_b(stage), copy_b_offset, b, col0 + copy_b.x, k0 + copy_b.k);
    } else {  // FP4 codes, decoded on the way
      copy_registers_tile<TileA, Cfg::kThreads>(stage_a(stage), copy_a_offset, Fp4Chunks{fp4.a}, row0 + copy_a.x,
                                                k0 + copy_a.k);
      copy_registers_tile<TileB, Cfg::kThreads>(stage_b(stage), copy_b_offset, Fp4Chunks{fp4.b}, col0 + copy_b.x,
                                                k0 + copy_b.k);
    }
  };

  // The lane's kept fragment offsets (mma_layout.h's FragmentLoads: why four, and which).
  using LoadsA = FragmentLoads<TileA, Operand::A>;
  using LoadsB = FragmentLoads<TileB, Operand::B>;
  int kept_a[LoadsA::kKept], kept_b[LoadsB::kKept];
#pragma unroll
  for (int index = 0; index < LoadsA::kKept; ++index) {
    kept_a[index] = LoadsA::kept(lane, corner.row, index);
    kept_b[index] = LoadsB::kept(lane, corner.column, index);
  }
  // Loads the lane's fragments of substep kk of `stage`.
  const auto load_fragments = [&](Fragments& f, int stage, int kk) {
    const unsigned char* tile_a = stage_a(stage);
    const unsigned char* tile_b = stage_b(stage);
#pragma unroll
    for (int i = 0; i < kFragsM; ++i) {
      if constexpr (LoadsA::kLdmatrix) {
        ldmatrix<4, LoadsA::kTranspose>(f.a[i].x,
                                        tile_a + kept_a[LoadsA::kept_index(i, kk, 0)] + LoadsA::constant(i, kk, 0));
      } else {
#pragma unroll
        for (int r = 0; r < 4; ++r)
          f.a[i].x[r] = load_shared_u32(tile_a + kept_a[LoadsA::kept_index(i, kk, r)] + LoadsA::constant(i, kk, r));
      }
    }
#pragma unroll
    for (int p = 0; p < kFragsN / 2; ++p) {
      if constexpr (LoadsB::kLdmatrix) {
        ldmatrix<4, LoadsB::kTranspose>(f.b[p],
                                        tile_b + kept_b[LoadsB::kept_index(p, kk, 0)] + LoadsB::constant(p, kk, 0));
      } else {
#pragma unroll
        for (int r = 0; r < 4; ++r)
          f.b[p][r] = load_shared_u32(tile_b + kept_b[LoadsB::kept_index(p, kk, r)] + LoadsB::constant(p, kk, r));
      }
    }
    if constexpr (kTf32) {  // round to TF32 once, here, rather than let the Tensor Core truncate
#pragma unroll
      for (int i = 0; i < kFragsM; ++i)
#pragma unroll
        for (int r = 0; r < 4; ++r) f.a[i].x[r] = to_tf32(f.a[i].x[r]);
#pragma unroll
      for (int p = 0; p < kFragsN / 2; ++p)
#pragma unroll
        for (int r = 0; r < 4; ++r) f.b[p][r] = to_tf32(f.b[p][r]);
    }
  };

  MmaAccumulator sum[kFragsM][kFragsN];
#pragma unroll
  for (int i = 0; i < kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) sum[i][j].x[r] = 0.0f;

  // The block's steps are [first, last): all of k, or its slice. Step s lives in stage s % kStages;
  // the waits count groups as rung 2's do (gemm_wmma.cuh).
  const int first = block.k_begin / kStep, last = (block.k_end + kStep - 1) / kStep;
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (first + s < last) copy_step((first + s) % Cfg::kStages, first + s);
    commit_copies();
  }
  wait_copies<Cfg::kStages - 2>();  // the first step's copies have landed,
  __syncthreads();  // everyone's
  // f16/bf16: the next substep's fragments load while this one's multiply, two sets of 32 registers.
  // TF32 rounds its fragments in registers as well, and with two sets ptxas runs out of the 255 and
  // spills (scripts/check-sass fails it): one set, loaded before the multiply; the SM's other warps
  // hide the loads' latency.
  constexpr int kBuffers = kTf32 ? 1 : 2;
  Fragments fragments[kBuffers];
  if (kBuffers == 2 && first < last) load_fragments(fragments[0], first % Cfg::kStages, 0);
  for (int step = first; step < last; ++step) {
    const int stage = step % Cfg::kStages;
#pragma unroll
    for (int kk = 0; kk < kSubsteps; ++kk) {
      if (kk == 0) {  // refill the stage of step - 1: every warp finished it before the last barrier
        const int ahead = step + Cfg::kStages - 1;
        if (ahead < last) copy_step(ahead % Cfg::kStages, ahead);
        commit_copies();
      }
      if constexpr (kBuffers == 1) load_fragments(fragments[0], stage, kk);
      if (kk == kSubsteps - 1) {  // after the warp's last load from this stage
        wait_copies<Cfg::kStages - 2>();  // this thread's copies of step + 1 have landed,
        __syncthreads();  // everyone's; and every warp is done with this step's stage
      }
      if constexpr (kBuffers == 2) {  // the next substep's fragments (the next step's, after the last)
        if (kk + 1 < kSubsteps)
          load_fragments(fragments[(kk + 1) % 2], stage, kk + 1);
        else if (step + 1 < last)
          load_fragments(fragments[(kk + 1) % 2], (step + 1) % Cfg::kStages, 0);
      }
      const Fragments& f = fragments[kk % kBuffers];
#pragma unroll
      for (int i = 0; i < kFragsM; ++i)
#pragma unroll
        for (int j = 0; j < kFragsN; ++j)
          mma<In>(sum[i][j], f.a[i], f.b[j / 2][2 * (j % 2)], f.b[j / 2][2 * (j % 2) + 1]);
    }
  }

  // ---- the epilogue: each warp's sums through its own 16 KiB of the pipeline's shared memory ----
  wait_copies<0>();  // the groups left are empty, but no copy may still be writing
  __syncthreads();  // and every warp is done reading its last stage
  // Split: f32 partial sums, finished by the second pass; else the epilogue and one rounding into C.
  unsigned char* staging = shared + warp * Staging::kBytes;
  if constexpr (kSplit)
    store_through_staging(staging, sum, lane, row0 + corner.row, col0 + corner.column, m, n, args.partial_of(block),
                          [](float value, int) { return value; });
  else if constexpr (kCopy == Copy::Fp4) {  // the tensors' factors first, as the CPU's fp4_gemm applies them
    const float factor = fp4.a.factor[0] * fp4.b.factor[0];
    store_through_staging(staging, sum, lane, row0 + corner.row, col0 + corner.column, m, n, args.c_of(block.entry),
                          [&](float value, int column) {
                            return from_float<Out>(args.finish(value * factor, column));
                          });
  } else {
    store_through_staging(staging, sum, lane, row0 + corner.row, col0 + corner.column, m, n, args.c_of(block.entry),
                          [&](float value, int column) { return from_float<Out>(args.finish(value, column)); });
  }
}

// ---- host side -----------------------------------------------------------------------------------

template <class Cfg, class In, class Out, bool kTransposeA, bool kTransposeB, bool kSplit, Copy kCopy>
void launch_variant(const GemmArgs<In, Out>& args, cudaStream_t stream, const Fp4Operands& fp4 = {}) {
  // Named for the emulator's messages, which quote the launch's first argument.
  constexpr auto mma_gemm = gemm_mma_kernel<Cfg, In, Out, kTransposeA, kTransposeB, kSplit, kCopy>;
  // Above 48 KiB of dynamic shared memory a kernel must opt in, once per device (gemm_wmma.cuh).
  static OncePerDevice opted_in;
  opted_in([&](int) {
    MG_CUDA_CHECK(cudaFuncSetAttribute(mma_gemm, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSharedBytes));
    MG_CUDA_CHECK(
        cudaFuncSetAttribute(mma_gemm, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  });
  const std::int64_t tiles = ((args.m + std::int64_t{Cfg::kTileM} - 1) / Cfg::kTileM) *
                             ((args.n + std::int64_t{Cfg::kTileN} - 1) / Cfg::kTileN);
  const std::int64_t z = std::int64_t{args.slices} * args.batch;
  MG_CHECK(tiles <= INT_MAX,
           "CUDA kernel gemm: {} x {} is {} tiles of {} x {}, above the grid's limit; split the "
           "product",
           args.m, args.n, tiles, Cfg::kTileM, Cfg::kTileN);
  MG_CHECK(z <= 65535, "CUDA kernel gemm: {} slices of k x {} batch entries exceed the grid's limit of 65535",
           args.slices, args.batch);
  MG_LAUNCH(mma_gemm, dim3(static_cast<unsigned>(tiles), 1, static_cast<unsigned>(z)), Cfg::kThreads, Cfg::kSharedBytes,
            stream)
  (args, fp4);
  MG_CUDA_LAUNCHED();
}

// kSplits: whether this configuration is ever split. gemm.cu takes the large tile only when C has at
// least one per SM, and splits k only when half the SMs would idle: never both, so the large tile has
// no split variants to compile.
template <class Cfg, Copy kCopy, bool kSplits, class In, class Out>
void launch_config(const GemmArgs<In, Out>& args, const GemmShape& shape, cudaStream_t stream) {
  MG_CHECK(kSplits || !args.partial, "CUDA kernel gemm: the {}x{} tile of rung 3 is not built to split k", Cfg::kTileM,
           Cfg::kTileN);
  with_layout(shape, [&]<bool kTransposeA, bool kTransposeB>() {
    if constexpr (kSplits)
      if (args.partial) return launch_variant<Cfg, In, Out, kTransposeA, kTransposeB, true, kCopy>(args, stream);
    launch_variant<Cfg, In, Out, kTransposeA, kTransposeB, false, kCopy>(args, stream);
  });
}

}  // namespace

template <class In, class Out>
void launch(Tile tile, Copy copy, const GemmArgs<In, Out>& args, const GemmShape& shape, cudaStream_t stream) {
  if (tile == Tile::Large && copy == Copy::Async) return launch_config<Large, Copy::Async, false>(args, shape, stream);
  if (tile == Tile::Medium && copy == Copy::Async) return launch_config<Medium, Copy::Async, true>(args, shape, stream);
  if constexpr (!std::is_same_v<In, float>)
    if (tile == Tile::Medium && copy == Copy::Registers)
      return launch_config<Medium, Copy::Registers, true>(args, shape, stream);
  throw Error("CUDA kernel gemm: rung 3 has no kernel for this tile and copy (TF32 and the 128x256 tile copy by "
              "cp.async only)");
}

template <class Out>
void launch_fp4(const GemmArgs<bf16, Out>& args, const Fp4Operands& operands, cudaStream_t stream) {
  MG_CHECK(args.batch == 1 && !args.partial, "CUDA kernel fp4 gemm: one product, k unsplit");
  // Both operands K-major (NT): the layout flags only name the variant; Fp4Chunks reads the codes.
  launch_variant<Medium, bf16, Out, false, true, false, Copy::Fp4>(args, stream, operands);
}

template void launch_fp4(const GemmArgs<bf16, bf16>&, const Fp4Operands&, cudaStream_t);
template void launch_fp4(const GemmArgs<bf16, __half>&, const Fp4Operands&, cudaStream_t);
template void launch_fp4(const GemmArgs<bf16, float>&, const Fp4Operands&, cudaStream_t);
template void launch(Tile, Copy, const GemmArgs<__half, __half>&, const GemmShape&, cudaStream_t);
template void launch(Tile, Copy, const GemmArgs<__half, float>&, const GemmShape&, cudaStream_t);
template void launch(Tile, Copy, const GemmArgs<bf16, bf16>&, const GemmShape&, cudaStream_t);
template void launch(Tile, Copy, const GemmArgs<bf16, float>&, const GemmShape&, cudaStream_t);
template void launch(Tile, Copy, const GemmArgs<float, float>&, const GemmShape&, cudaStream_t);

}  // namespace mg::kernels::cuda::mma_pipelined
