// Rung 4 of the GEMM ladder (gemm_wgmma.cu) as gemm.cu sees it: whether the device runs it, which
// GEMMs it takes, and the one call that launches it. The translation unit is built for sm_90a alone
// (CMakeLists.txt): wgmma, setmaxnreg and TMA's tensor forms exist on Hopper's arch-specific target
// only, and sm_90a code runs on no other GPU, so every other device keeps rung 3.
#pragma once

#include <string>

#include "kernels/cuda/gemm_common.cuh"

namespace mg::kernels::cuda::wgmma_gemm {

constexpr int kTileM = 128;

#if defined(MG_CUDA_EMULATED) || defined(MG_WGMMA_RUNG)

// Whether the current device runs rung 4: compute capability exactly 9.0 and the sm_90a image in
// the build (asked of the runtime once per device).
bool available();

// Whether rung 4 takes this GEMM: f16 or bf16 operands, C (`out`, at `c`; null: a fresh tensor) f16/bf16
// or f32, no f16 accumulator, and every row of A, B and C starting on 16 bytes (TMA's rule for a
// tensor's strides and address).
bool takes(const Tensor& a, const Tensor& b, DType out, const void* c, const GemmShape& shape);

// C = epilogue(op(A) op(B)), unsplit (args.partial must be null): a persistent grid of at most one
// block an SM, each walking tiles of 128 x 256 (C f16/bf16) or 128 x 128 (C f32).
template <class In, class Out>
void launch(const GemmArgs<In, Out>& args, const GemmShape& shape, cudaStream_t stream);

// "wgmma 128x256x64, 3 stages" and the like, for the benchmark; the tile, for gemm.cu's plan.
std::string name(bool f32_out);
int tile_n(bool f32_out);

#else  // a build without sm_90 among its architectures: no rung 4

inline bool available() { return false; }
inline bool takes(const Tensor&, const Tensor&, DType, const void*, const GemmShape&) { return false; }
template <class In, class Out>
void launch(const GemmArgs<In, Out>&, const GemmShape&, cudaStream_t) {
  throw Error(
      "CUDA kernel gemm: rung 4 (wgmma) is not in this build; configure with 90 among CMAKE_CUDA_ARCHITECTURES");
}
inline std::string name(bool) { return "wgmma (not built)"; }
inline int tile_n(bool) { return 256; }

#endif

}  // namespace mg::kernels::cuda::wgmma_gemm
