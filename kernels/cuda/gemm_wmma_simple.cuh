// The simple WMMA (Tensor Core) GEMM: C[z] = epilogue(op(A[z]) op(B[z])) for f16 or bf16 operands,
// f32 accumulation, C in f16, bf16 or f32 rounded once on store. Rung 1 of the ladder in gemm.cu: the
// version to read first, and the fallback of the fast kernel (gemm_wmma.cuh) when an operand's rows
// are not 16-byte aligned, e.g. the n = 10 classes of a classifier's last layer.
// Its Accumulator template argument is the dtype of the running sums: float, or __half for f16
// operands under kernels::Accumulation::F16 (kernels/gemm.h), the accumulation the paper's §3.3 warns
// against, run only by `mixgrad repro`'s E7. With __half the fragment is rounded to f16 by every
// mma_sync (and inside it, as the hardware does: see kernels/gemm.h), then widened for the epilogue.
//
// Shapes: any m, n, k >= 0, any batch (kernels/gemm.h; GemmArgs in gemm_common.cuh).
// Launch geometry: 128 threads = 4 warps a block, one 32x32 tile of C a block, each warp one 16x16
// WMMA accumulator of it (warps 2 x 2). Grid (ceil(m/32), ceil(n/32), slices * batch): when gemm.cu
// splits k (e.g. a weight gradient with n = 9 over k = 100352), a block sums its slice of k only and
// stores f32 partial sums for the second pass (gemm_common.cuh) to finish.
// Per step of 16 along k, the block copies op(A)'s 32x16 and op(B)'s 16x32 slice into shared memory
// element by element, writing 0 outside the matrices (so no size needs to be a multiple of 16 and
// the padding adds nothing to the sums), then every warp does one 16x16x16 multiply-accumulate.
// The transposes are resolved by that copy: whatever the layout, the shared tiles hold op(A) and
// op(B) row-major, and consecutive threads read consecutive addresses of global memory.
// The accumulators go through shared memory, so each thread then finishes whole elements of C: bias,
// activation, one rounding, and a store only where the element exists.
//
// Tests: build/tests/test_cuda_gemm. Benchmark: build/bench/cuda_gemm (its shapes with n = 10).
#pragma once

#include <mma.h>

#include "kernels/cuda/gemm_common.cuh"

namespace mg::kernels::cuda::wmma_simple {

constexpr int kTile = 32;  // C tile of a block: 32 x 32
constexpr int kStep = 16;  // k per step: one WMMA fragment deep
constexpr int kThreads = 128;  // 4 warps, 2 x 2 over the tile
// Rows of the shared tiles are 8 elements (16 bytes) longer than the data: with 32-byte (A) and
// 64-byte (B) rows, the 8 rows that one fragment load reads would start on the same few banks and
// conflict; 48- and 80-byte rows spread them over all 32 banks. 8 halves keeps every row start a
// multiple of 16 bytes, as WMMA's loads require (ldm a multiple of 8 elements), and the fragments'
// starts on 32 bytes: 16 rows of 48 bytes down, 16 columns (32 bytes) across.
constexpr int kSkew = 8;
constexpr int kSkewC = 4;  // floats: the same reason for the f32 accumulator tile (rows of 144 bytes)
// The accumulator tile's skew: 4 floats, or 8 halves (rows of 80 bytes) for an f16 accumulator.
template <class Accumulator>
constexpr int kSkewOf = std::is_same_v<Accumulator, float> ? kSkewC : kSkew;
// Blocks an SM runs at once: promised by the launch bounds (at most 64 registers a thread; 7.4 KiB
// of shared memory a block), and what gemm.cu's split-K fills the GPU with.
constexpr int kBlocksPerSm = 8;
static_assert((16 * (kStep + kSkew) * sizeof(__half)) % 32 == 0 && (16 * sizeof(__half)) % 32 == 0 &&
                  (16 * (kTile + kSkewC) * sizeof(float)) % 32 == 0 &&
                  (16 * (kTile + kSkew) * sizeof(__half)) % 32 == 0,
              "WMMA fragment pointers must be 32-byte aligned");

template <class In, class Out, class Accumulator = float>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    gemm_wmma_simple_kernel(GemmArgs<In, Out> args, bool transpose_a, bool transpose_b) {
  using namespace nvcuda;
  constexpr int kSkewAcc = kSkewOf<Accumulator>;
  MG_SHARED_ALIGNED(32, In[kTile][kStep + kSkew], a_tile);  // op(A) rows x k, row-major
  MG_SHARED_ALIGNED(32, In[kStep][kTile + kSkew], b_tile);  // k x op(B) columns, row-major
  MG_SHARED_ALIGNED(32, Accumulator[kTile][kTile + kSkewAcc], c_tile);  // the block's sums

  const int m = args.m, n = args.n, k = args.k;
  const int row0 = blockIdx.x * kTile, col0 = blockIdx.y * kTile;
  const GemmBlock block = args.block();
  const In* a = args.a_of(block.entry);
  const In* b = args.b_of(block.entry);
  const int warp = threadIdx.x / 32, warp_row = (warp / 2) * 16, warp_col = (warp % 2) * 16;
  const In zero = from_float<In>(0.0f);

  wmma::fragment<wmma::accumulator, 16, 16, 16, Accumulator> sum;
  wmma::fill_fragment(sum, from_float<Accumulator>(0.0f));
  // The block's k: all of it, or its slice, which ends at k or on a multiple of kStep, so that the
  // bound below stays the matrix's k.
  for (int k0 = block.k_begin; k0 < block.k_end; k0 += kStep) {
    // Element i of each slice; the index that runs fastest follows the operand's memory order.
    for (int i = threadIdx.x; i < kTile * kStep; i += kThreads) {
      const int r = transpose_a ? i % kTile : i / kStep;  // A stored [k, m]: along m; [m, k]: along k
      const int kk = transpose_a ? i / kTile : i % kStep;
      const int row = row0 + r, kg = k0 + kk;
      const bool inside = row < m && kg < k;
      a_tile[r][kk] =
          inside ? a[transpose_a ? static_cast<std::int64_t>(kg) * m + row : static_cast<std::int64_t>(row) * k + kg]
                 : zero;
      const int c = transpose_b ? i / kStep : i % kTile;  // B stored [n, k]: along k; [k, n]: along n
      const int kb = transpose_b ? i % kStep : i / kTile;
      const int col = col0 + c, kgb = k0 + kb;
      const bool inside_b = col < n && kgb < k;
      b_tile[kb][c] =
          inside_b
              ? b[transpose_b ? static_cast<std::int64_t>(col) * k + kgb : static_cast<std::int64_t>(kgb) * n + col]
              : zero;
    }
    __syncthreads();  // the slices are complete
    wmma::fragment<wmma::matrix_a, 16, 16, 16, In, wmma::row_major> a_frag;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, In, wmma::row_major> b_frag;
    wmma::load_matrix_sync(a_frag, &a_tile[warp_row][0], kStep + kSkew);
    wmma::load_matrix_sync(b_frag, &b_tile[0][warp_col], kTile + kSkew);
    wmma::mma_sync(sum, a_frag, b_frag, sum);
    __syncthreads();  // every warp has read the slices before the next step overwrites them
  }

  wmma::store_matrix_sync(&c_tile[warp_row][warp_col], sum, kTile + kSkewAcc, wmma::mem_row_major);
  __syncthreads();
  for (int i = threadIdx.x; i < kTile * kTile; i += kThreads) {
    const int r = i / kTile, col_in_tile = i % kTile, row = row0 + r, col = col0 + col_in_tile;
    if (row < m && col < n) args.store(block, row, col, to_float(c_tile[r][col_in_tile]));
  }
}

template <class In, class Out, class Accumulator = float>
void launch(const GemmArgs<In, Out>& args, const GemmShape& shape, cudaStream_t stream) {
  MG_LAUNCH((gemm_wmma_simple_kernel<In, Out, Accumulator>), gemm_grid(args, kTile, kTile), kThreads, 0, stream)
  (args, shape.transpose_a, shape.transpose_b);
  MG_CUDA_LAUNCHED();
}

}  // namespace mg::kernels::cuda::wmma_simple
