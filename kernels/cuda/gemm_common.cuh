// What the GEMM kernels of kernels/cuda/ share (gemm_wmma_simple.cuh, gemm_wmma.cuh, gemm_mma.cu,
// gemm_wgmma.cu, gemm_f32.cuh):
// the arguments of one launch, the epilogue every kernel applies to its f32 sums before the one
// rounding into C's dtype, split-K's second pass and the grid. (The name of the kernel a GEMM would
// run, for the benchmark, is kernels/gemm.h's.)
//
// Shapes (kernels/gemm.h): A [batch, m, k] or [batch, k, m] (transpose_a), B [batch, k, n] or
// [batch, n, k] (transpose_b), C [batch, m, n]; every matrix row-major and contiguous.
// Grid: x = tiles along m, y = tiles along n (rung 3: x = the tile's number in its L2-friendly order,
// y = 1), z = slice * batch + batch entry (one slice, z = the entry, unless gemm.cu splits k; its
// header says when).
// Split-K: the block of slice s sums k in [s * k_slice, min(k, (s + 1) * k_slice)) and stores those
// f32 sums unfinished into partial [slices, batch, m, n]; sum_slices_kernel (one thread an element
// of C, grid-stride) then adds the slices in order 0, 1, ..., applies the epilogue and rounds once.
// k_slice is a multiple of the kernel's k step, so no step straddles two slices: a kernel's zero-fill
// at k (the matrix's) is still the only edge it needs along k.
// Tests: build/tests/test_cuda_gemm. Benchmark: build/bench/cuda_gemm.
#pragma once

#include <array>
#include <cassert>
#include <climits>
#include <cstdint>
#include <mutex>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/pointwise.h"
#include "kernels/gemm.h"

namespace mg::kernels::cuda {

// The largest m, n or k: a tile's last index (row0 + 127, k0 + 31, ...) and rounding k up to a
// step ((k + step - 1) / step) must not overflow the kernels' int arithmetic.
constexpr std::int64_t kMaxGemmDim = INT_MAX - 256;

// What one block of a launch works on (GemmArgs::block()).
struct GemmBlock {
  int entry;  // batch entry
  int slice;  // slice of k (0 when k is not split)
  int k_begin, k_end;  // the k it sums: [k_begin, k_end)
};

// One batched GEMM as a kernel takes it, by value. Sizes are int: the kernels index within a matrix
// in 32 bits and form row * leading-dimension offsets in 64 bits; make_gemm_args checks they fit.
template <class In, class Out>
struct GemmArgs {
  const In* a;  // [batch, m, k], or [batch, k, m] when transpose_a
  const In* b;  // [batch, k, n], or [batch, n, k] when transpose_b
  Out* c;  // [batch, m, n]
  int batch, m, n, k;
  const void* bias;  // [n] in Out, or in f32 when bias_f32; null for none
  bool bias_f32;
  Activation activation;
  // Split-K (gemm.cu decides): slices of k_slice along k, each block's f32 sums into `partial`
  // [slices, batch, m, n]. Unsplit: slices 1, k_slice k, partial null, and blocks finish into C.
  int slices, k_slice;
  float* partial;

  // The matrices of batch entry z.
  __device__ const In* a_of(int z) const { return a + static_cast<std::int64_t>(z) * m * k; }
  __device__ const In* b_of(int z) const { return b + static_cast<std::int64_t>(z) * k * n; }
  __device__ Out* c_of(int z) const { return c + static_cast<std::int64_t>(z) * m * n; }
  __device__ float* partial_of(const GemmBlock& block) const {
    return partial + (static_cast<std::int64_t>(block.slice) * batch + block.entry) * m * n;
  }

  // The calling block's batch entry and run of k, from blockIdx.z = slice * batch + entry.
  __device__ GemmBlock block() const {
    const int entry = blockIdx.z % batch, slice = blockIdx.z / batch;
    const int k_begin = slice * k_slice;  // < k: gemm.cu makes no empty slice
    return {entry, slice, k_begin, k_begin + min(k_slice, k - k_begin)};
  }

  // The epilogue on the f32 sum of output column `col`: bias, then activation, in f32 (the CPU's
  // kernels/cpu/gemm.cpp applies the same functors), still unrounded.
  __device__ float finish(float sum, int col) const {
    if (bias) sum += bias_f32 ? static_cast<const float*>(bias)[col] : to_float(static_cast<const Out*>(bias)[col]);
    switch (activation) {
      case Activation::Relu:
        return functors::Relu{}(sum);
      case Activation::Gelu:
        return functors::Gelu{}(sum);
      default:
        return sum;
    }
  }

  // Stores the block's f32 sum of element (row, col): finished and rounded once into C, or, when k
  // is split (kSplit: partial is set), as it is into the block's slice of `partial`, for
  // sum_slices_kernel to finish.
  template <bool kSplit>
  __device__ void store(const GemmBlock& block, int row, int col, float sum) const {
    const std::int64_t at = static_cast<std::int64_t>(row) * n + col;
    if constexpr (kSplit)
      partial_of(block)[at] = sum;
    else
      c_of(block.entry)[at] = from_float<Out>(finish(sum, col));
  }
  // The same, split or not decided at run time (where the branch costs no registers that matter).
  __device__ void store(const GemmBlock& block, int row, int col, float sum) const {
    if (partial)
      store<true>(block, row, col, sum);
    else
      store<false>(block, row, col, sum);
  }
};

template <class In, class Out>
GemmArgs<In, Out> make_gemm_args(const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& s,
                                 const GemmEpilogue& epilogue) {
  MG_CHECK(s.m <= kMaxGemmDim && s.n <= kMaxGemmDim && s.k <= kMaxGemmDim,
           "CUDA kernel gemm: m, n and k must each be at most 2^31 - 257, got m {}, n {}, k {}; split the product", s.m,
           s.n, s.k);
  MG_CHECK(s.batch <= 65535,
           "CUDA kernel gemm: at most 65535 matrices a batch (the grid's z), got {}; split the "
           "batch into several calls",
           s.batch);
  const bool has_bias = epilogue.bias.defined();
  assert(!has_bias || (epilogue.bias.device() == c.device() && epilogue.bias.numel() == s.n &&
                       (epilogue.bias.dtype() == c.dtype() || epilogue.bias.dtype() == DType::F32)));
  return {device_ptr<In>(a),
          device_ptr<In>(b),
          device_ptr<Out>(c),
          static_cast<int>(s.batch),
          static_cast<int>(s.m),
          static_cast<int>(s.n),
          static_cast<int>(s.k),
          has_bias ? epilogue.bias.data_ptr() : nullptr,
          has_bias && epilogue.bias.dtype() == DType::F32,
          epilogue.activation,
          /*slices=*/1,
          /*k_slice=*/static_cast<int>(s.k),
          /*partial=*/nullptr};
}

// x = tiles along m (gridDim.x has room for 2^31 - 1), y = tiles along n, z = slices x batch entries.
template <class In, class Out>
dim3 gemm_grid(const GemmArgs<In, Out>& args, int tile_m, int tile_n) {
  const std::int64_t tiles_m = (args.m + std::int64_t{tile_m} - 1) / tile_m;
  const std::int64_t tiles_n = (args.n + std::int64_t{tile_n} - 1) / tile_n;
  const std::int64_t z = std::int64_t{args.slices} * args.batch;
  MG_CHECK(tiles_n <= 65535,
           "CUDA kernel gemm: n = {} needs {} tiles of {} columns, above the grid's limit of "
           "65535; split the product along n",
           args.n, tiles_n, tile_n);
  MG_CHECK(z <= 65535, "CUDA kernel gemm: {} slices of k x {} batch entries exceed the grid's limit of 65535",
           args.slices, args.batch);
  return dim3(static_cast<unsigned>(tiles_m), static_cast<unsigned>(tiles_n), static_cast<unsigned>(z));
}

// ---- split-K's second pass -------------------------------------------------------------------------

constexpr int kSumThreads = 256;

// C = epilogue(partial[0] + partial[1] + ... + partial[slices - 1]), added in that order whatever the
// grid, so a split GEMM gives the same bits on every run; one thread an element of C, consecutive
// threads consecutive elements (coalesced in partial and C).
template <class In, class Out>
__global__ void __launch_bounds__(kSumThreads) sum_slices_kernel(GemmArgs<In, Out> args) {
  const std::int64_t count = static_cast<std::int64_t>(args.batch) * args.m * args.n;  // of C, and of a slice
  const float* __restrict__ partial = args.partial;
  Out* __restrict__ c = args.c;
  for (std::int64_t i = first_index(); i < count; i += grid_stride()) {
    float sum = partial[i];
    // Unrolled so that several slices' loads are in flight at once; the additions stay in order.
#pragma unroll 8
    for (int slice = 1; slice < args.slices; ++slice) sum += partial[slice * count + i];
    c[i] = from_float<Out>(args.finish(sum, static_cast<int>(i % args.n)));
  }
}

template <class In, class Out>
void launch_sum_slices(const GemmArgs<In, Out>& args, cudaStream_t stream) {
  const std::int64_t count = static_cast<std::int64_t>(args.batch) * args.m * args.n;
  MG_LAUNCH((sum_slices_kernel<In, Out>), blocks_for(count, kSumThreads), kSumThreads, 0, stream)(args);
  MG_CUDA_LAUNCHED();
}

// ---- host helpers ------------------------------------------------------------------------------------

// Whether every row of both operands starts on 16 bytes, as the cp.async kernels need (a 16-byte copy
// must not straddle two rows): the leading dimension of A (k, or m when transposed) and of B (n, or
// k when transposed) a multiple of 16 bytes, and A and B 16-byte aligned.
template <class In>
bool rows_aligned(const Tensor& a, const Tensor& b, const GemmShape& s) {
  constexpr std::int64_t kElements = 16 / sizeof(In);
  const std::int64_t lda = s.transpose_a ? s.m : s.k, ldb = s.transpose_b ? s.k : s.n;
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  return lda % kElements == 0 && ldb % kElements == 0 && aligned(a.data_ptr()) && aligned(b.data_ptr());
}

// Calls fn.template operator()<kTransposeA, kTransposeB>() with the shape's layout as template
// arguments: how a kernel file instantiates one kernel per layout, so that the transposes cost
// nothing at run time.
template <class Fn>
void with_layout(const GemmShape& shape, Fn&& fn) {
  if (!shape.transpose_a && !shape.transpose_b)
    fn.template operator()<false, false>();
  else if (!shape.transpose_a)
    fn.template operator()<false, true>();
  else if (!shape.transpose_b)
    fn.template operator()<true, false>();
  else
    fn.template operator()<true, true>();
}

// Runs fn(device) once per device (the current one) for the life of the process, and returns that
// device's index: for per-device settings and facts, such as a kernel's shared-memory opt-in or the
// SM count, which last but must not cost a driver call on every launch. Thread-safe (what fn writes
// is visible to every later caller); when fn throws, the next call tries again.
class OncePerDevice {
 public:
  static constexpr int kMaxDevices = 64;

  template <class Fn>
  int operator()(Fn&& fn) {
    int device = 0;
    MG_CUDA_CHECK(cudaGetDevice(&device));
    MG_CHECK(device >= 0 && device < kMaxDevices, "CUDA kernel gemm: device {} is beyond the {} this build tracks",
             device, kMaxDevices);
    std::call_once(done_[static_cast<std::size_t>(device)], std::forward<Fn>(fn), device);
    return device;
  }

 private:
  std::array<std::once_flag, kMaxDevices> done_;
};

}  // namespace mg::kernels::cuda
