// One warpgroup running one wgmma of wgmma.cuh, for tests/test_cuda_wgmma.cpp: the operands placed in
// shared memory where wgmma_layout.h's descriptors say (K-major or MN-major, the 128-byte swizzle),
// fenced for the async proxy, one m64n128k16, and D stored from where wgmma_layout.h's
// accumulator_cell says each thread holds it. On an H100 or H200 that checks the hardware against the
// layouts (which tests/test_wgmma_layout.cpp checks against CuTe); on the CUDA emulator, its model.
// Host C++ (no CUDA header); defined in wgmma_probe.cu, built for sm_90a with rung 4. Runs on the
// current device and waits for it.
#pragma once

#include <vector>

#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fp8.h"

namespace mg::kernels::cuda {

#if defined(MG_CUDA_EMULATED) || defined(MG_WGMMA_RUNG)

// D (64 x 128) = A (64 x 16) B (16 x 128), row-major values exact in `dtype` (f16 or bf16), A stored
// MN-major (M-major) when a_mn_major and B when b_mn_major; returns D row-major. An mg::Error on a
// device that is not compute capability 9.0, or in a build without sm_90.
std::vector<float> probe_wgmma(DType dtype, bool a_mn_major, bool b_mn_major, const std::vector<float>& a,
                               const std::vector<float>& b);

// The FP8 form (QGMMA), for what its accumulator keeps: D (64 x 128) = A (64 x 256 codes of fa) B^T (B:
// 128 x 256 codes of fb, [n][k]), as 8 m64n128k32 chained through D (the first from 0), both operands
// K-major. Returns D row-major.
std::vector<float> probe_wgmma_fp8(DType fa, DType fb, const std::vector<std::uint8_t>& a,
                                   const std::vector<std::uint8_t>& b);

#else  // a build without sm_90 among its architectures

inline std::vector<float> probe_wgmma(DType, bool, bool, const std::vector<float>&, const std::vector<float>&) {
  throw Error("probe_wgmma: this build has no sm_90a code; configure with 90 among CMAKE_CUDA_ARCHITECTURES");
}
inline std::vector<float> probe_wgmma_fp8(DType, DType, const std::vector<std::uint8_t>&,
                                          const std::vector<std::uint8_t>&) {
  throw Error("probe_wgmma_fp8: this build has no sm_90a code; configure with 90 among CMAKE_CUDA_ARCHITECTURES");
}

#endif

}  // namespace mg::kernels::cuda
