// Rung 3 of the GEMM ladder (gemm_mma.cu) as gemm.cu sees it: its two tiles (mma_layout.h's
// configurations), its k step, its ways of filling a stage, and the calls that launch it.
// The rung is a translation unit of its own: about 90 kernels (tiles x layouts x dtypes x split),
// compiled beside gemm.cu rather than inside it.
#pragma once

#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/mma_layout.h"
#include "kernels/fp4_scale.h"

namespace mg::kernels::cuda::mma_pipelined {

using Large = mma_layout::LargeTile;
using Medium = mma_layout::MediumTile;
template <class T>
constexpr int kStepOf = mma_layout::kRowBytes / sizeof(T);  // k per step: 64 (f16/bf16) or 32 (f32)

enum class Tile { Large, Medium };
// How a stage is filled: cp.async of 16-byte chunks in the operands' own layouts (rows 16-byte
// aligned: gemm_common.cuh's rows_aligned), or loads through registers into K-major tiles (any
// alignment; f16/bf16 on the medium tile only), or FP4 codes decoded into bf16 in registers on the
// way (launch_fp4; the medium tile).
enum class Copy { Async, Registers, Fp4 };

// An FP4 operand as Copy::Fp4 reads it (kernels/fp4.h's Fp4Tensor): E2M1 codes [extent_x, extent_k],
// K-major, extent_k even; one scale code per block of block_rows x block_cols, block_cols a multiple
// of 8 (so a chunk of 8 values along k has one scale); the tensor's f32 factor. All on the device.
struct Fp4Source {
  const std::uint8_t* codes = nullptr;
  const std::uint8_t* scales = nullptr;
  const float* factor = nullptr;
  int extent_x = 0, extent_k = 0, block_rows = 1, block_cols = 8, scale_cols = 1;
  Fp4Format format = Fp4Format::Nv;
};
struct Fp4Operands {
  Fp4Source a, b;  // A [m, k] and B [n, k]
};

// Queues C = epilogue(op(A) op(B)) on rung 3 (gemm.cu splits k, when it does, by setting
// args.partial; never on the large tile). For (In, Out) = (f16, f16), (f16, f32), (bf16, bf16),
// (bf16, f32) and (f32, f32) (TF32).
template <class In, class Out>
void launch(Tile tile, Copy copy, const GemmArgs<In, Out>& args, const GemmShape& shape, cudaStream_t stream);

// Queues C = epilogue(decode(A) decode(B)^T * A's factor * B's factor) on the medium tile (Copy::Fp4):
// each thread loads its chunks' codes and their block's scale, decodes them into bf16 (exact:
// fp4_decode_value) and stores them into the K-major tiles, and the bf16 mainline multiplies. No decoded
// copy of an operand exists in global memory (ldmatrix has no 4-bit form: the decode happens between
// the global load and the shared store). args: C, m, n, k, the bias and activation; unsplit, batch 1;
// a and b unused. Out: bf16, f16 or f32.
template <class Out>
void launch_fp4(const GemmArgs<bf16, Out>& args, const Fp4Operands& operands, cudaStream_t stream);

}  // namespace mg::kernels::cuda::mma_pipelined
