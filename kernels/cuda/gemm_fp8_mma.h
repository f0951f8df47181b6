// Rung 3 of the FP8 GEMM (gemm_fp8_mma.cu) as fp8.cu sees it: which GEMMs it takes, and the call that
// launches one. The rest go to fp8.cu's rung 1, which takes every shape, layout, block scaling and
// accumulator.
#pragma once

#include <cstdint>

#include "core/fp8.h"
#include "kernels/cuda/common.cuh"
#include "kernels/gemm.h"

namespace mg::kernels::cuda::fp8_pipelined {

// C [m, n] = act(A B^T * scale_a * scale_b + bias), A [m, k] and B [n, k] codes, both K-major.
template <class Out>
struct Fp8MmaArgs {
  const std::uint8_t* a;
  const std::uint8_t* b;
  Out* c;
  int m, n, k;
  const float* scale_a;  // one scale_inv per operand (per-tensor scaling)
  const float* scale_b;
  const float* bias;  // [n] in f32, or null
  Activation activation;
};

// What the rung takes: both operands K-major (A not transposed, B transposed), one scale each, the
// f32 accumulator (each instruction's sum promoted at once), k a multiple of 16 and the codes 16-byte
// aligned (cp.async of 16 bytes), and m and n whose tiles fit a grid.
bool takes(bool transpose_a, bool transpose_b, std::int64_t scales_a, std::int64_t scales_b, bool promote_each,
           std::int64_t m, std::int64_t n, std::int64_t k, const void* a, const void* b);

// Queues the GEMM for the formats (fa, fb) and Out = f32, f16 or bf16.
template <class Out>
void launch(fp8::Format fa, fp8::Format fb, const Fp8MmaArgs<Out>& args, cudaStream_t stream);

// The kernel's name in benchmark tables: "fp8 mma 128x128x128, 3 stages".
const char* kernel_name();

}  // namespace mg::kernels::cuda::fp8_pipelined
