// The f32 GEMM on CUDA cores: C[z] = epilogue(op(A[z]) op(B[z])) with A, B, C in f32, every product
// and sum in f32 (fp32 means fp32). Rung 3 of the ladder in gemm.cu. With kernels::allow_tf32() on
// and aligned operands, f32 GEMMs run on Tensor Cores instead: gemm_wmma.cuh instantiated for float
// (TF32 fragments, m16n16k8, f32 accumulation), the same pipeline as f16 and bf16.
//
// Shapes: any m, n, k >= 0 and batch, any layout; no alignment needed (loads are scalar).
// Launch geometry: 256 threads a block, one 128x128 tile of C a block, as 16 x 16 threads each
// computing 8 x 8 elements of C in registers. Grid (ceil(m/128), ceil(n/128), slices * batch): when
// gemm.cu splits k, a block sums its slice of k only and stores f32 partial sums, which the second
// pass (gemm_common.cuh) adds up, finishes and stores into C.
// A k step of 8: each thread loads 4 values of A's 128x8 slice and 4 of B's 8x128 slice, and the
// block keeps both as [k][128] in shared memory (A's slice transposed when A is stored [m, k]), so
// that a thread reads its 8 values of op(A) and 8 of op(B) for one k as four float4 loads; 8 + 8
// loads then feed 64 fused multiply-adds.
// Double buffering: two shared slices; the next step's values are loaded into registers before the
// math on the current slice and stored into the other slice after it, so the global loads' latency
// hides behind the 512 multiply-adds, with one barrier a step.
// A thread's 8 rows are two groups of 4, 64 apart (likewise its columns), not 8 in a row: a warp's
// float4 reads of one k then cover 16 distinct consecutive float4s of B (conflict-free) and 2 of A
// (broadcasts), where 8 in a row would make two threads of a phase hit the same banks.
// Edges: loads outside the matrices read as 0 and stores are predicated, so no size need be a multiple
// of anything.
//
// Tests: build/tests/test_cuda_gemm. Benchmark: build/bench/cuda_gemm (target: >= 70% of cublasSgemm).
#pragma once

#include "kernels/cuda/gemm_common.cuh"

namespace mg::kernels::cuda::simt_f32 {

constexpr int kTile = 128;  // C tile of a block: 128 x 128
constexpr int kStep = 8;  // k per step
constexpr int kThreads = 256;  // 16 x 16
constexpr int kPerThread = 8;  // C per thread: 8 x 8, as 2 x 2 groups of 4 x 4
constexpr int kGroup = 4;
constexpr int kHalf = kTile / 2;  // the distance between a thread's two groups
// The launch bounds' promise: 2 blocks an SM (<= 128 registers) unsplit; 1 for the kernel that sums a
// slice of k (split-K fills the GPU with it), whose partial-sum stores need about 140 registers: at
// 128 it spilled on sm_89 (scripts/check-sass).
constexpr int kBlocksPerSm = 2;
constexpr int kSplitBlocksPerSm = 1;

// The 4 values one thread loads of one operand slice: the slice is rows x [k0, k0 + 8) of op(X),
// where x is m (A) or n (B). A k-major operand is stored [k, x] (A transposed, B not): the thread
// takes 4 consecutive x of one k, so a warp reads 512 contiguous bytes. An x-major one is stored
// [x, k]: the thread takes 4 consecutive k of one x, a warp 16 rows of 32 bytes.
template <bool kMajor>
__device__ __forceinline__ void load_slice(const float* matrix, int xs, int k, int x0, int k0,
                                           float (&values)[kGroup]) {
  const int t = threadIdx.x;
#pragma unroll
  for (int i = 0; i < kGroup; ++i) {
    if constexpr (kMajor) {
      const int kk = k0 + t / 32, x = x0 + (t % 32) * kGroup + i;
      values[i] = kk < k && x < xs ? matrix[static_cast<std::int64_t>(kk) * xs + x] : 0.0f;
    } else {
      const int x = x0 + t / 2, kk = k0 + (t % 2) * kGroup + i;
      values[i] = x < xs && kk < k ? matrix[static_cast<std::int64_t>(x) * k + kk] : 0.0f;
    }
  }
}

// Stores them into the shared slice [kStep][kTile] at the places load_slice took them from.
template <bool kMajor>
__device__ __forceinline__ void store_slice(float (*slice)[kTile], const float (&values)[kGroup]) {
  const int t = threadIdx.x;
  if constexpr (kMajor) {
    *reinterpret_cast<float4*>(&slice[t / 32][(t % 32) * kGroup]) = make_float4(values[0], values[1], values[2],
                                                                                values[3]);
  } else {
#pragma unroll
    for (int i = 0; i < kGroup; ++i) slice[(t % 2) * kGroup + i][t / 2] = values[i];
  }
}

// kSplit: k is split (args.partial set). A template argument so that the unsplit kernel, the f32
// mainline, knows k_begin = 0 and has no second store path: at 128 registers a thread, the extra
// live values of a run-time split make ptxas spill.
// vector_store: the output's rows start on 16 bytes (n % 4 == 0; C, or the partial sums when k is
// split, aligned), so 4 columns go in one float4.
template <bool kTransposeA, bool kTransposeB, bool kSplit>
__global__ void __launch_bounds__(kThreads, kSplit ? kSplitBlocksPerSm : kBlocksPerSm)
    gemm_f32_kernel(GemmArgs<float, float> args, bool vector_store) {
  MG_SHARED_ALIGNED(16, float[2][kStep][kTile], a_slice);  // op(A)^T: [k][m]
  MG_SHARED_ALIGNED(16, float[2][kStep][kTile], b_slice);  // op(B): [k][n]
  constexpr bool kMajorA = kTransposeA, kMajorB = !kTransposeB;

  const int m = args.m, n = args.n, k = args.k;
  const int row0 = blockIdx.x * kTile, col0 = blockIdx.y * kTile;
  const GemmBlock block = kSplit ? args.block() : GemmBlock{static_cast<int>(blockIdx.z), 0, 0, k};
  const float* a = args.a_of(block.entry);
  const float* b = args.b_of(block.entry);
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;  // rows ty*4 + {0, 64}, columns tx*4 + {0, 64}

  // The block's steps start at its slice's k_begin (a multiple of kStep) and read up to k_end, which
  // is k or a multiple of kStep: the loads' bound stays the matrix's k.
  float sum[kPerThread][kPerThread] = {};
  float next_a[kGroup], next_b[kGroup];
  load_slice<kMajorA>(a, m, k, row0, block.k_begin, next_a);
  load_slice<kMajorB>(b, n, k, col0, block.k_begin, next_b);
  store_slice<kMajorA>(a_slice[0], next_a);
  store_slice<kMajorB>(b_slice[0], next_b);
  __syncthreads();

  const int steps = (block.k_end - block.k_begin + kStep - 1) / kStep;
  for (int step = 0; step < steps; ++step) {
    const int current = step % 2;
    const bool more = step + 1 < steps;
    if (more) {  // in flight during the math below
      load_slice<kMajorA>(a, m, k, row0, block.k_begin + (step + 1) * kStep, next_a);
      load_slice<kMajorB>(b, n, k, col0, block.k_begin + (step + 1) * kStep, next_b);
    }
#pragma unroll
    for (int kk = 0; kk < kStep; ++kk) {
      const float4 a0 = *reinterpret_cast<const float4*>(&a_slice[current][kk][ty * kGroup]);
      const float4 a1 = *reinterpret_cast<const float4*>(&a_slice[current][kk][kHalf + ty * kGroup]);
      const float4 b0 = *reinterpret_cast<const float4*>(&b_slice[current][kk][tx * kGroup]);
      const float4 b1 = *reinterpret_cast<const float4*>(&b_slice[current][kk][kHalf + tx * kGroup]);
      const float av[kPerThread] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[kPerThread] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < kPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) sum[i][j] = fmaf(av[i], bv[j], sum[i][j]);
    }
    // The other slice was last read in step - 1, which every thread finished before the barrier
    // that ended it; this step's barrier then publishes the new slice for step + 1.
    if (more) {
      store_slice<kMajorA>(a_slice[1 - current], next_a);
      store_slice<kMajorB>(b_slice[1 - current], next_b);
    }
    __syncthreads();
  }

  // Finished into C, or, when k is split, the raw sums into the block's slice of the partial sums.
  float* out = kSplit ? args.partial_of(block) : args.c_of(block.entry);
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int row = row0 + (i / kGroup) * kHalf + ty * kGroup + i % kGroup;
    if (row >= m) continue;
    float* c_row = out + static_cast<std::int64_t>(row) * n;
#pragma unroll
    for (int group = 0; group < 2; ++group) {
      const int col = col0 + group * kHalf + tx * kGroup;
      float v[kGroup];
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        const float value = sum[i][group * kGroup + j];
        v[j] = col + j >= n ? 0.0f : (kSplit ? value : args.finish(value, col + j));
      }
      if (vector_store && col + kGroup <= n) {
        *reinterpret_cast<float4*>(c_row + col) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
#pragma unroll
        for (int j = 0; j < kGroup; ++j)
          if (col + j < n) c_row[col + j] = v[j];
      }
    }
  }
}

template <bool kTransposeA, bool kTransposeB>
void launch_layout(const GemmArgs<float, float>& args, bool vector_store, cudaStream_t stream) {
  // Named for the emulator's messages, which quote the launch's first argument.
  const auto simt_gemm = args.partial ? gemm_f32_kernel<kTransposeA, kTransposeB, true>
                                      : gemm_f32_kernel<kTransposeA, kTransposeB, false>;
  MG_LAUNCH(simt_gemm, gemm_grid(args, kTile, kTile), kThreads, 0, stream)(args, vector_store);
  MG_CUDA_LAUNCHED();
}

inline void launch(const GemmArgs<float, float>& args, const GemmShape& shape, cudaStream_t stream) {
  const float* out = args.partial ? args.partial : args.c;
  const bool vector_store = shape.n % kGroup == 0 && aligned(out, 16);
  with_layout(shape, [&]<bool kTransposeA, bool kTransposeB>() {
    launch_layout<kTransposeA, kTransposeB>(args, vector_store, stream);
  });
}

}  // namespace mg::kernels::cuda::simt_f32
