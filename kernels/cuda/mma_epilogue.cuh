// The epilogue of rung 3 (gemm_mma.cu, and the FP8 GEMM's gemm_fp8_mma.cu): a warp's 64 x 64 f32 sums
// leave through shared memory (mma_layout.h's Staging), so that each lane then holds 16 consecutive
// bytes of a row of C and a warp's store covers whole 128-byte runs.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/mma_layout.h"

namespace mg::kernels::cuda {

// Stages `sum` (the warp's fragments, kFragsM m16 rows of 8 n8 columns; the warp's corner of C at
// row_base, col_base) in `staging` (the warp's WarpStaging<16 kFragsM>::kBytes of shared memory, free), then stores C[row][column] = finish(sum, column) for
// every element inside m x n, as Stored (C's dtype, or f32 partial sums), 16 bytes at a time where C's
// rows allow it. `finish` is called with the last column for the columns past n it computes but never
// stores.
template <int kFragsM, class Stored, class Finish>
__device__ __forceinline__ void store_through_staging(unsigned char* staging,
                                                      const MmaAccumulator (&sum)[kFragsM][mma_layout::kFragsN],
                                                      int lane, int row_base, int col_base, int m, int n, Stored* c,
                                                      const Finish& finish) {
  using Staging = mma_layout::WarpStaging<16 * kFragsM>;
#pragma unroll
  for (int i = 0; i < kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < mma_layout::kFragsN; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const mma_layout::Cell at = Staging::write(lane, i, j, h);
        store_shared_8(staging + Staging::offset(at.row, at.column), sum[i][j].x[2 * h], sum[i][j].x[2 * h + 1]);
      }
  __syncwarp();  // the warp's sums are staged
  // One loop, not unrolled: the epilogue (bias, GELU's erf) is compiled once, not once a register.
  constexpr int kStoreBytes = sizeof(Stored);
  constexpr int kColumns = Staging::template kColumnsPerStore<kStoreBytes>;
  const bool vectors = n % kColumns == 0 && reinterpret_cast<std::uintptr_t>(c) % 16 == 0;
#pragma unroll 1
  for (int item = 0; item < Staging::template kItems<kStoreBytes>; ++item) {
    const mma_layout::Cell at = Staging::template read<kStoreBytes>(lane, item);
    const int row = row_base + at.row, column = col_base + at.column;
    if (row >= m || column >= n) continue;
    float values[kColumns];
#pragma unroll
    for (int q = 0; q < kColumns / 4; ++q) {
      const uint4 bits = load_shared_16(staging + Staging::offset(at.row, at.column + 4 * q));
      std::memcpy(values + 4 * q, &bits, sizeof bits);
    }
    Stored out[kColumns];
#pragma unroll
    for (int e = 0; e < kColumns; ++e) out[e] = finish(values[e], min(column + e, n - 1));
    Stored* const to = c + static_cast<std::int64_t>(row) * n + column;
    if (vectors && column + kColumns <= n) {
      uint4 bits;
      std::memcpy(&bits, out, sizeof bits);
      *reinterpret_cast<uint4*>(to) = bits;
    } else {
      for (int e = 0; e < kColumns && column + e < n; ++e) to[e] = out[e];
    }
  }
}

}  // namespace mg::kernels::cuda
