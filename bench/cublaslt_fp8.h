// cuBLASLt's FP8 GEMM, the peer of mixgrad's FP8 GEMM in bench/cuda_gemm (issue 43): the same E4M3
// codes and per-tensor scales, C in bf16. Plain cuBLAS has no FP8; cuBLASLt's needs the "TN" form on
// Hopper (both operands K-major), which is how fp8_linear stores them anyway.
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "kernels/fp8.h"

namespace mg::bench {

// One shape's cuBLASLt FP8 GEMM, its descriptors and algorithm chosen once (the heuristic's first),
// so that run() queues only the kernel: C [m, n] (bf16, row-major) = (A [m, k] codes x a.scale_inv)
// (B [n, k] codes x b.scale_inv)^T, both E4M3 with per-tensor scales (1 x 1 scale_inv on the device).
class CublasLtFp8 {
 public:
  CublasLtFp8(const kernels::Fp8Tensor& a, const kernels::Fp8Tensor& b, Tensor& c, cudaStream_t stream);
  ~CublasLtFp8();
  CublasLtFp8(const CublasLtFp8&) = delete;
  CublasLtFp8& operator=(const CublasLtFp8&) = delete;
  void run();

 private:
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t operation_ = nullptr;
  cublasLtMatrixLayout_t lt_a_ = nullptr, lt_b_ = nullptr, lt_c_ = nullptr;
  cublasLtMatmulHeuristicResult_t algorithm_{};
  const void *a_codes_, *b_codes_;
  const float *a_scale_, *b_scale_;
  void* c_;
  Tensor workspace_;
  cudaStream_t stream_;
};

}  // namespace mg::bench
