// What the GEMM kernels of kernels/cuda/ share (gemm_wmma_simple.cuh, gemm_wmma.cuh, gemm_f32.cuh):
// the arguments of one launch, the epilogue every kernel applies to its f32 sums before the one
// rounding into C's dtype, the grid, and the name of the kernel a GEMM would run (for the benchmark).
//
// Shapes (kernels/gemm.h): A [batch, m, k] or [batch, k, m] (transpose_a), B [batch, k, n] or
// [batch, n, k] (transpose_b), C [batch, m, n]; every matrix row-major and contiguous.
// Grid of every kernel: x = tiles along m, y = tiles along n, z = the batch.
#pragma once

#include <cassert>
#include <climits>
#include <cstdint>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/functors.h"
#include "kernels/gemm.h"

namespace mg::kernels::cuda {

// One batched GEMM as a kernel takes it, by value. Sizes are int: the kernels index within a matrix
// in 32 bits and form row * leading-dimension offsets in 64 bits; make_gemm_args checks they fit.
template <class In, class Out>
struct GemmArgs {
  const In* a;  // [batch, m, k], or [batch, k, m] when transpose_a
  const In* b;  // [batch, k, n], or [batch, n, k] when transpose_b
  Out* c;       // [batch, m, n]
  int m, n, k;
  const void* bias;  // [n] in Out, or in f32 when bias_f32; null for none
  bool bias_f32;
  Activation activation;

  // The matrices of batch entry z.
  __device__ const In* a_of(int z) const { return a + static_cast<std::int64_t>(z) * m * k; }
  __device__ const In* b_of(int z) const { return b + static_cast<std::int64_t>(z) * k * n; }
  __device__ Out* c_of(int z) const { return c + static_cast<std::int64_t>(z) * m * n; }

  // The epilogue on the f32 sum of output column `col`: bias, then activation, in f32 (the CPU's
  // kernels/cpu/gemm.cpp applies the same functors), still unrounded.
  __device__ float finish(float sum, int col) const {
    if (bias) sum += bias_f32 ? static_cast<const float*>(bias)[col] : to_float(static_cast<const Out*>(bias)[col]);
    switch (activation) {
      case Activation::Relu: return functors::Relu{}(sum);
      case Activation::Gelu: return functors::Gelu{}(sum);
      default: return sum;
    }
  }
};

template <class In, class Out>
GemmArgs<In, Out> make_gemm_args(const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& s,
                                 const GemmEpilogue& epilogue) {
  MG_CHECK(s.m <= INT_MAX && s.n <= INT_MAX && s.k <= INT_MAX,
           "CUDA kernel gemm: m, n and k must each be below 2^31, got m {}, n {}, k {}; split the product", s.m, s.n,
           s.k);
  MG_CHECK(s.batch <= 65535, "CUDA kernel gemm: at most 65535 matrices a batch (the grid's z), got {}; split the "
           "batch into several calls", s.batch);
  const bool has_bias = epilogue.bias.defined();
  assert(!has_bias || (epilogue.bias.device() == c.device() && epilogue.bias.numel() == s.n &&
                       (epilogue.bias.dtype() == c.dtype() || epilogue.bias.dtype() == DType::F32)));
  return {device_ptr<In>(a), device_ptr<In>(b), device_ptr<Out>(c), static_cast<int>(s.m), static_cast<int>(s.n),
          static_cast<int>(s.k), has_bias ? epilogue.bias.data_ptr() : nullptr,
          has_bias && epilogue.bias.dtype() == DType::F32, epilogue.activation};
}

// x = tiles along m (gridDim.x has room for 2^31 - 1), y = tiles along n, z = batch entries.
inline dim3 gemm_grid(const GemmShape& s, int tile_m, int tile_n) {
  const std::int64_t tiles_m = (s.m + tile_m - 1) / tile_m, tiles_n = (s.n + tile_n - 1) / tile_n;
  MG_CHECK(tiles_n <= 65535, "CUDA kernel gemm: n = {} needs {} tiles of {} columns, above the grid's limit of "
           "65535; split the product along n", s.n, tiles_n, tile_n);
  return dim3(static_cast<unsigned>(tiles_m), static_cast<unsigned>(tiles_n), static_cast<unsigned>(s.batch));
}

// Which kernel kernels::cuda::gemm runs for these operands (gemm.cu decides; named for the benchmark).
std::string gemm_kernel_name(const Tensor& a, const Tensor& b, const GemmShape& shape);

}  // namespace mg::kernels::cuda
