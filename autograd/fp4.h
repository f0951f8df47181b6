// FP4 training: how the `nvfp4` and `mxfp4` recipes quantise the operands of a Linear's three GEMMs and
// multiply them. mg::fp8_linear (autograd/fp8.h) runs the layer, the same structure for FP8 and FP4; this
// file is what differs.
//
//   GEMM                       operands (K-major)            NVFP4 blocks           MXFP4 blocks   rounding
//   y  = x W^T                 x [rows, in], W [out, in]      x 1x16, W 16x16 (2-D)  1x32           nearest
//   dx = dy W                  dy [rows, out], W^T [in, out]  dy 1x16, W^T 16x16     1x32           dy stochastic
//   dW = dy^T x                dy^T [out, rows'], x^T [in, rows']  1x16              1x32           dy^T stochastic
//
// - Two-level scales (NVFP4) or E8M0 scales (MXFP4): kernels/fp4_scale.h.
// - 2-D weight blocks (NVFP4, weight_blocks_2d): a 16 x 16 block has one scale, so W's codes for the
//   forward and W^T's for dx are each other's transposes and the two passes see one weight. Off: 1 x 16
//   along each GEMM's reduction, as for activations.
// - The Hadamard transform (mg::hadamard, 16 x 16) on both operands of dW = dy^T x, along the rows (the
//   batch): (dy^T M)(x^T M)^T = dy^T x, while an outlier of the batch is spread over its 16-row block
//   before the block's scale is chosen. Its signs are random from the options' seed (fixed for the run),
//   all +1 (deterministic), or no transform (HadamardMode).
// - Padding: rows' is rows rounded up to the block (16 or 32, and 16 for the transform): zero rows,
//   which add nothing to dW, so that a last batch or a data-parallel shard of any size trains.
// - An odd reduction (k) gets one zero column in both operands: E2M1 codes are two a byte, and a tensor
//   of them must end on a whole byte.
// - Stochastic rounding (stochastic_gradients) of dy and dy^T only, from the stream (seed, step of the
//   layer, 4 * layer + 0 for dy, + 1 for dy^T); everything else to nearest.
// - The GEMM (fp4_matmul, kernels::fp4_gemm): both operands decoded into bf16, exactly (kernels/fp4.h;
//   on the CPU inside the bf16 GEMM's packing), products summed in f32, then the two tensors' factors
//   and the bias on the f32 sum, rounded once into the output's dtype. An FP4 Tensor Core computes the
//   same; no CPU and no Hopper GPU has one.
//
// What stays in higher precision, as the NVFP4 paper keeps it: every op that is not a Linear (autocast's
// bf16 and f32 lists), the optimizer (f32 parameters and state), and the last bf16_last_layers Linears
// of the model (the head, by default), marked by amp::Recipe::prepare.
#pragma once

#include <cstdint>

#include "autograd/fp8.h"
#include "kernels/fp4.h"

namespace mg {

// Where a quantisation's stochastic words come from (Fp4State, read once a forward).
struct Fp4Stream {
  std::uint64_t seed = 0;
  std::uint32_t step = 0;
  std::uint32_t layer = 0;
};

// x [r, c] (f32, f16 or bf16) quantised as operand `role` of the GEMM that reduces it along its columns,
// or along its rows (reduce_rows: the codes of x^T, [c, r']); for the weight gradient's operands (x and
// dy reduced along their rows) padded and transformed as above. options.scaling: Nvfp4 or Mxfp4.
kernels::Fp4Tensor fp4_quantize_operand(const Tensor& x, Fp8Role role, bool reduce_rows, const Fp8Options& options,
                                        const Fp4Stream& stream);

// c [m, n] = a [m, k] . b [n, k]^T * a's and b's tensor factors (+ bias [n]), rounded into `out`'s dtype
// once; both operands K-major, as every GEMM of fp8_linear reads them. Not recorded on the tape.
Tensor fp4_matmul(const kernels::Fp4Tensor& a, const kernels::Fp4Tensor& b, DType out, const Tensor& bias = {});

// The rows' of the weight gradient's operands: rows rounded up to the blocks and the transform.
std::int64_t fp4_padded_rows(std::int64_t rows, const Fp8Options& options);

}  // namespace mg
