// Rung 3 of the FP8 GEMM (gemm_fp8_mma.cu) as fp8.cu sees it: which GEMMs it takes, and the call that
// launches one. The rest go to gemm_fp8.cu's rung 1, which takes every shape, layout, block scaling and
// accumulator.
#pragma once

#include <cstdint>
#include <string>

#include "core/fp8.h"
#include "kernels/cuda/common.cuh"
#include "kernels/gemm.h"
#include "kernels/pointwise.h"

namespace mg::kernels::cuda::fp8_pipelined {

// One K-major operand's scale_inv (kernels/fp8.h's blocks): [ceil(lines / block_lines), ceil(k / block_k)],
// row-major with `columns` columns. Per-tensor scaling is one block of every line and all of k.
struct Fp8ScaleGrid {
  const float* scale_inv;
  int block_lines, block_k, columns;
};

// C [m, n] = act(sum over chunks of (A B^T)_chunk * scale_a * scale_b + bias), A [m, k] and B [n, k]
// codes, both K-major; a chunk is `chunk` codes of k over which neither operand's scale changes.
template <class Out>
struct Fp8MmaArgs {
  const std::uint8_t* a;
  const std::uint8_t* b;
  Out* c;
  int m, n, k;
  Fp8ScaleGrid scale_a, scale_b;
  int chunk;  // min of the operands' block_k, at most k
  int promote_every;  // products between promotions into f32: 32 (every instruction; the F32 accumulator), a
      // multiple of 32, or 0 for never (Limited, kernels/fp8.h)
  const float* bias;  // [n] in f32, or null
  Activation activation;

  // The epilogue on the f32 sum of column `column`, as the CPU's (kernels/cpu/gemm_fp8.cpp, store_row)
  // and rung 1's: + bias (+0 without one), the activation; then the caller rounds once into C.
  __device__ float finish(float sum, int column) const {
    float v = sum + (bias ? bias[column] : 0.0f);
    if (activation == Activation::Relu) v = functors::Relu{}(v);
    if (activation == Activation::Gelu) v = functors::Gelu{}(v);
    return v;
  }
};

// What the rung takes: both operands K-major (A not transposed, B transposed), k a multiple of 16 and
// the codes 16-byte aligned (cp.async of 16 bytes), m and n whose tiles fit a grid, chunks its kernels
// compile (all of k, or 32 or 128 codes), and promotions at instruction boundaries that the lane's two
// sets of sums can hold: promote_every a multiple of 32 (or 0), and with more than one chunk either
// every instruction (32) or only at the chunks' ends (a multiple of the chunk, or 0).
bool takes(bool transpose_a, bool transpose_b, std::int64_t chunk, int promote_every, std::int64_t m, std::int64_t n,
           std::int64_t k, const void* a, const void* b);

// Queues the GEMM for the formats (fa, fb) and Out = f32, f16 or bf16.
template <class Out>
void launch(DType fa, DType fb, const Fp8MmaArgs<Out>& args, cudaStream_t stream);

// The name in benchmark tables of the kernel that runs these sums: "fp8 mma 128x128x128, 3 stages" (one
// chunk, promoted after every instruction), or "fp8 mma 64x128x128, 3 stages" followed by ", promoted
// every 128" (or ", never promoted") for a carried accumulator and ", scales every 32" (or 128) for
// block or MX scales.
std::string kernel_name(std::int64_t chunk, int promote_every, std::int64_t k);

}  // namespace mg::kernels::cuda::fp8_pipelined
