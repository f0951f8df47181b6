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
// Tests: build/tests/test_gemm_packed. Benchmark: build/bench/matmul (FP8 and FP4: build/bench/fp8_gemm).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cpu/microkernel.h"
#include "kernels/fp4_scale.h"
#include "kernels/gemm.h"
#include "kernels/window.h"

namespace mg::kernels {
struct Fp4Tensor;  // kernels/fp4.h
}  // namespace mg::kernels

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
//
// An FP8 or FP4 operand (dtype E4M3, E5M2 or E2M1) is strided over its codes (E2M1: two a byte, the
// strides count elements) and decoded as it is packed (gemm_pack.h): every FP8 value and every E2M1
// value times its E4M3 or E8M0 block scale is exactly a bf16 value (kernels/fp4_scale.h), so the bf16
// microkernel multiplies exactly what an FP8 or FP4 Tensor Core would. FP8 values are packed unscaled
// (their scales multiply each chunk's sum: PackedGemm::k_chunk); E2M1 values with their block's scale.

// Where the scale of element (line, k) of a blocked operand is: data[at(line, k)].
struct BlockGrid {
  const void* data = nullptr;  // f32 (an FP8 operand's scale_inv) or scale codes (an FP4 operand's)
  std::int64_t block_lines = 1, block_k = 1, line_stride = 0, k_stride = 0;
  std::int64_t at(std::int64_t line, std::int64_t k) const {
    return line / block_lines * line_stride + k / block_k * k_stride;
  }
};

struct GemmOperand {
  const void* data = nullptr;
  DType dtype = DType::F32;  // f32, f16 or bf16 (bf16 only, for a Bf16Dot kernel); E4M3, E5M2, E2M1 codes
  std::int64_t line_stride = 0, k_stride = 0;
  std::int64_t k_run = 0, k_run_stride = 0;  // runs (k_run > 0)
  const Window2d* window = nullptr;  // window (non-null)
  bool positions_along_k = false;
  std::int64_t image = 0;
  BlockGrid fp4_scales = {};  // E2M1: the block scale codes, E4M3 (Fp4Format::Nv) or E8M0 (Fp4Format::Mx)
  Fp4Format fp4_format = Fp4Format::Nv;
};

// op(B) packed once for many GEMMs of one shape (kernels::prepare_gemm_b): for each block of k that
// packed_gemm_tile cuts (k_block_size), every micro-panel of B, one after another; a tile then finds
// the block it would have packed at (jc, pc) instead of packing it.
struct PackedPanels {
  const MicroKernel* kernel = nullptr;
  std::int64_t n = 0, k = 0, block_k = 0;
  std::vector<std::uint32_t> entries = {};  // 4 bytes an entry: an f32, or a pair of bf16
  std::vector<std::int64_t> block_start = {};  // where each block of k starts in `entries`
  // The micro-panels of columns [jc, ...) for the block of k starting at pc (jc a multiple of NR).
  const std::byte* block(std::int64_t jc, std::int64_t pc) const;
};
// B (n lines of k, as GemmOperand's op(B)) packed for `kernel`, for GEMMs without FP8 chunks.
PackedPanels pack_panels(const MicroKernel& kernel, const GemmOperand& b, std::int64_t n, std::int64_t k);
// The length of packed_gemm_tile's blocks of k: as few as KC allows, all of one even size (784 is two
// blocks of 392, not 384, 384 and a last one of 16 that would pay a block's overheads for 2% of the
// work); with FP8 chunks (k_chunk > 0), as many whole chunks as fit.
std::int64_t k_block_size(const MicroKernel& kernel, std::int64_t k, std::int64_t k_chunk);

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
  // The scales of FP8 operands (kernels/fp8.h), where they change along k or across lines: C's f32 sum
  // is, chunk after chunk of k_chunk steps of k, sum = fma(the chunk's sum, a_scale * b_scale, sum),
  // with a_scale of (row, chunk) and b_scale of (column, chunk) from these f32 grids. 0: no chunks.
  std::int64_t k_chunk = 0;
  BlockGrid a_scales = {}, b_scales = {};
  float alpha = 1.0f;  // multiplies the sum before the bias: operands' per-tensor scales (FP8, FP4)
  const PackedPanels* b_panels = nullptr;  // b packed already (no FP8 chunks), or nullptr: pack it
};

// The whole GEMM of kernels/gemm.h (every product of the batch, the epilogue) on that microkernel,
// whatever kernels/cpu/blas_choice.h chose: how the tests hold every kernel to one contract. Requires
// what kernels::gemm requires, and a kernel whose arithmetic takes a's dtype (Bf16Dot: bf16 only).
// b_panels: B packed already (batch 1), or nullptr.
void gemm_packed(const MicroKernel& kernel, const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& shape,
                 const GemmEpilogue& epilogue = {}, const PackedPanels* b_panels = nullptr);

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

// The microkernel of the FP8 and FP4 GEMMs: the bf16 dot product where the CPU has it and it outruns the
// FMA (MicroCpu::bf16_dot_pays; every FP8 value, and every FP4 value times its block scale, is a bf16
// value), else the best FMA kernel (on f32 panels).
const MicroKernel& code_gemm_microkernel();

// An FP4 operand [lines, k] (k along its rows) as the packed GEMM walks it: its codes and its grid of
// scale codes (kernels/cpu/gemm_fp4.cpp).
GemmOperand fp4_gemm_operand(const Fp4Tensor& x);

// All m x n of one product on the thread pool, in gemm_packed's tiles (a function of the shape alone:
// the same bits on any thread count). The FP8 and FP4 GEMMs (kernels/cpu/gemm_fp8.cpp, gemm_fp4.cpp).
void packed_gemm_parallel(const PackedGemm& gemm, std::int64_t m, std::int64_t n);

}  // namespace mg::kernels::cpu
