// mixgrad's own CPU GEMM: packing, cache blocking and the fused epilogue around a microkernel
// (kernels/cpu/microkernel.h). kernels/cpu/gemm.cpp sends the f16 and bf16 GEMMs here (and f32 ones
// when MG_GEMM asks), one tile of C per call, on the thread pool.
//
// The structure is GotoBLAS's (and BLIS's), written to be read:
//
//   for each block of NC columns of C (jc)
//     for each block of KC steps of k (pc)           B's block packed once: KC x NC, micro-panels of NR columns
//       for each block of MC rows of C (ic)          A's block packed: MC x KC, micro-panels of MR rows
//         for each micro-panel of B (jr), of A (ir)  the microkernel: an MR x NR tile, KC steps of k
//
// B's packed block stays in the L2/L3 cache while every block of A passes over it; A's block stays in
// L2 while every micro-panel of B passes; the microkernel streams one micro-panel of each from L1.
// Packing converts as it copies: f16 is widened by F16C and bf16 by a shift (for the FMA kernels), or
// bf16 pairs are interleaved along k (for the dot kernel), so no widened copy of an operand is ever
// made. Edges are zero-padded in the panels, and k is padded to an even count for the dot kernel.
//
// The tile of C is kept in f32 for the whole of k: in registers inside a block of KC, and between
// blocks in C itself (f32 output) or in a per-thread f32 buffer (f16/bf16 output). After the last
// block the epilogue (bias, activation) is applied to the f32 tile and the result rounded once into
// C's dtype: one pass over C. Every element of C is a chain of f32 operations in k order that no
// blocking changes (microkernel.h), so the results are the same bits on any thread count.
//
// Tests: build/tests/test_gemm_packed. Benchmark: build/bench/matmul.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cpu/microkernel.h"
#include "kernels/gemm.h"
#include "kernels/window.h"

namespace mg::kernels::cpu {

// A matrix operand as the GEMM reads it. For op(A) the lines are its rows, for op(B) its columns; both
// are k long. Three ways to find element (line, k):
//   strided   data + line * line_stride + k * k_stride                       (a tensor, either layout)
//   runs      as strided, with k cut into runs of k_run elements whose starts are k_run_stride apart:
//             data + line * line_stride + (k / k_run) * k_run_stride + (k % k_run) * k_stride
//             (a convolution's dy [N, O, OH * OW] read as [O, N * OH * OW])
//   window    the implicit im2col of a convolution (kernels/conv.h) over data [N, C, H, W]: a position
//             (n, oh, ow) and a tap (c, kh, kw) give x[n, c, oh * stride_h - pad_h + kh, ow * stride_w -
//             pad_w + kw], 0 in the padding. With positions_along_k the lines are taps and k runs over
//             the positions of every image; else the lines are the positions of image `image` and k the taps.
// Packing gathers windows straight from the image: no im2col matrix is ever written.
struct GemmOperand {
  const void* data = nullptr;
  DType dtype = DType::F32;  // f32, f16 or bf16 (bf16 only, for a Bf16Dot kernel)
  std::int64_t line_stride = 0, k_stride = 0;
  std::int64_t k_run = 0, k_run_stride = 0;  // runs (k_run > 0)
  const Window2d* window = nullptr;  // window (non-null)
  bool positions_along_k = false;
  std::int64_t image = 0;
};

// One rectangle of C = act(op(A) op(B) + bias): rows [row0, row1), columns [col0, col1).
struct PackedGemm {
  const MicroKernel* kernel = nullptr;
  GemmOperand a, b;  // op(A): m lines; op(B): n lines; both k long
  std::int64_t k = 0;
  void* c = nullptr;  // C's element (0, 0); f32, f16 or bf16
  DType c_dtype = DType::F32;
  std::int64_t ldc = 0;  // elements from one row of C to the next
  const float* bias = nullptr;  // n values (one per column), or m with bias_per_row; or nullptr
  bool bias_per_row = false;  // a convolution's [O, OH * OW] output: one bias per output channel
  Activation activation = Activation::None;
};

// The whole GEMM of kernels/gemm.h (every product of the batch, the epilogue) on that microkernel,
// whatever kernels/cpu/blas_choice.h chose: how the tests hold every kernel to one contract. Requires
// what kernels::gemm requires, and a kernel whose arithmetic takes a's dtype (Bf16Dot: bf16 only).
void gemm_packed(const MicroKernel& kernel, const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& shape,
                 const GemmEpilogue& epilogue = {});

// The microkernel that multiplies operands of this dtype in this process (kernels/cpu/blas_choice.h),
// or nullptr for the library (f32 unless MG_GEMM names a kernel, f64) and "widen".
const MicroKernel* gemm_microkernel(DType dtype);
// The same for a convolution (kernels/cpu/conv_gemm.cpp), which runs on a microkernel in f32 too
// (AVX-512's FMA kernel): nullptr where none runs (f64, "widen", a CPU without AVX-512 unless MG_GEMM
// names a kernel).
const MicroKernel* convolution_microkernel(DType dtype);

// Computes rows [row0, row1) x columns [col0, col1) of C on the calling thread.
void packed_gemm_tile(const PackedGemm& gemm, std::int64_t row0, std::int64_t row1, std::int64_t col0,
                      std::int64_t col1);

}  // namespace mg::kernels::cpu
