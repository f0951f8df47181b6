// Rung 3 of the GEMM ladder (gemm_mma.cu) as gemm.cu sees it: its two tiles (mma_layout.h's
// configurations), its k step, its two ways of filling a stage, and the one call that launches it.
// The rung is a translation unit of its own: about 90 kernels (tiles x layouts x dtypes x split),
// compiled beside gemm.cu rather than inside it.
#pragma once

#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/mma_layout.h"

namespace mg::kernels::cuda::mma_pipelined {

using Large = mma_layout::LargeTile;
using Medium = mma_layout::MediumTile;
template <class T>
constexpr int kStepOf = mma_layout::kRowBytes / sizeof(T);  // k per step: 64 (f16/bf16) or 32 (f32)

enum class Tile { Large, Medium };
// How a stage is filled: cp.async of 16-byte chunks in the operands' own layouts (rows 16-byte
// aligned: gemm_common.cuh's rows_aligned), or loads through registers into K-major tiles (any
// alignment; f16/bf16 on the medium tile only).
enum class Copy { Async, Registers };

// Queues C = epilogue(op(A) op(B)) on rung 3 (gemm.cu splits k, when it does, by setting
// args.partial; never on the large tile). For (In, Out) = (f16, f16), (f16, f32), (bf16, bf16),
// (bf16, f32) and (f32, f32) (TF32).
template <class In, class Out>
void launch(Tile tile, Copy copy, const GemmArgs<In, Out>& args, const GemmShape& shape, cudaStream_t stream);

}  // namespace mg::kernels::cuda::mma_pipelined
