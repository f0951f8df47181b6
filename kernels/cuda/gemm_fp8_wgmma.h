// Rung 4 of the FP8 GEMM (gemm_fp8_wgmma.cu) as gemm_fp8.cu sees it: Hopper's FP8 Tensor Cores
// (wgmma, QGMMA), whose accumulator is kernels/fp8.h's kHopperWgmmaFp8Accumulator. gemm_fp8.cu sends
// it the GEMMs that ask for that accumulator on a device where rung 4 runs (wgmma_gemm::available():
// exactly 9.0 and the sm_90a image in the build).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cuda/gemm_fp8_mma.h"

namespace mg::kernels::cuda::fp8_wgmma {

#if defined(MG_CUDA_EMULATED) || defined(MG_WGMMA_RUNG)

// What the rung takes: both operands K-major (A not transposed, B transposed: FP8 wgmma has no
// transpose), k > 0 and a multiple of 16, the codes, C and C's rows starting on 16 bytes (TMA's rules),
// scales per tensor (chunk >= k) or changing every 128 along k (DeepSeek-V3's blocks: one chunk a k
// step), and promotions at the k steps' ends: promote_every 0 (never) or a multiple of 128.
bool takes(bool transpose_a, bool transpose_b, std::int64_t chunk, int promote_every, std::int64_t m, std::int64_t n,
           std::int64_t k, const void* a, const void* b, const void* c, DType out);

// Queues the GEMM (args as rung 3's: gemm_fp8_mma.h) for the formats (fa, fb) and Out = f32, f16, bf16.
template <class Out>
void launch(DType fa, DType fb, const fp8_pipelined::Fp8MmaArgs<Out>& args, cudaStream_t stream);

// "fp8 wgmma 128x128x128, 6 stages, promoted every 128" and the like, for the benchmark and the tests.
std::string kernel_name(std::int64_t chunk, int promote_every, std::int64_t k, DType out);

#else  // a build without sm_90 among its architectures: no rung 4

inline bool takes(bool, bool, std::int64_t, int, std::int64_t, std::int64_t, std::int64_t, const void*, const void*,
                  const void*, DType) {
  return false;
}
template <class Out>
void launch(DType, DType, const fp8_pipelined::Fp8MmaArgs<Out>&, cudaStream_t) {
  throw Error(
      "kernels::fp8_gemm: rung 4 (wgmma) is not in this build; configure with 90 among CMAKE_CUDA_ARCHITECTURES");
}
inline std::string kernel_name(std::int64_t, int, std::int64_t, DType) { return "fp8 wgmma (not built)"; }

#endif

}  // namespace mg::kernels::cuda::fp8_wgmma
