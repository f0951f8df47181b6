// cuBLASLt's FP8 GEMM (cublaslt_fp8.h). cuBLASLt is column-major: mixgrad's row-major C [m, n] is its
// column-major C^T [n, m] = B A^T, with B [n, k] row-major read as the column-major k x n matrix
// transposed ("T") and A [m, k] as the column-major k x m one ("N"): the TN form Hopper's FP8 kernels
// require. So cuBLASLt's A is mixgrad's B and the other way round, scales included.
#include "bench/cublaslt_fp8.h"

#include <fmt/format.h>

namespace mg::bench {

namespace {

#define CUBLASLT_CHECK(call) \
  do { \
    const cublasStatus_t status_ = (call); \
    if (status_ != CUBLAS_STATUS_SUCCESS) \
      throw Error(fmt::format("{} failed: {} ({}:{})", #call, cublasGetStatusString(status_), __FILE__, __LINE__)); \
  } while (0)

constexpr std::int64_t kWorkspaceBytes = 32 << 20;  // as PyTorch gives cuBLASLt on Hopper

}  // namespace

CublasLtFp8::CublasLtFp8(const kernels::Fp8Tensor& a, const kernels::Fp8Tensor& b, Tensor& c, cudaStream_t stream)
    : a_codes_(a.codes.data_ptr()),
      b_codes_(b.codes.data_ptr()),
      a_scale_(static_cast<const float*>(a.scale_inv.data_ptr())),
      b_scale_(static_cast<const float*>(b.scale_inv.data_ptr())),
      c_(c.data_ptr()),
      workspace_(Tensor::empty({kWorkspaceBytes / 4}, {.dtype = DType::F32, .device = c.device()})),
      stream_(stream) {
  MG_CHECK(a.codes.dtype() == DType::E4M3 && b.codes.dtype() == DType::E4M3 && a.scale_inv.numel() == 1 &&
               b.scale_inv.numel() == 1 && c.dtype() == DType::BF16,
           "bench: the cuBLASLt FP8 peer takes E4M3 codes with per-tensor scales and a bf16 C");
  const std::uint64_t m = static_cast<std::uint64_t>(a.codes.shape()[0]),
                      k = static_cast<std::uint64_t>(a.codes.shape()[1]);
  const std::uint64_t n = static_cast<std::uint64_t>(b.codes.shape()[0]);
  CUBLASLT_CHECK(cublasLtCreate(&handle_));
  CUBLASLT_CHECK(cublasLtMatmulDescCreate(&operation_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(operation_, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose));
  CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(operation_, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep));
  CUBLASLT_CHECK(
      cublasLtMatmulDescSetAttribute(operation_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale_, sizeof b_scale_));
  CUBLASLT_CHECK(
      cublasLtMatmulDescSetAttribute(operation_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale_, sizeof a_scale_));
  CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&lt_a_, CUDA_R_8F_E4M3, k, n, static_cast<std::int64_t>(k)));
  CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&lt_b_, CUDA_R_8F_E4M3, k, m, static_cast<std::int64_t>(k)));
  CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&lt_c_, CUDA_R_16BF, n, m, static_cast<std::int64_t>(n)));
  cublasLtMatmulPreference_t preference = nullptr;
  CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const std::uint64_t workspace_bytes = kWorkspaceBytes;
  CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &workspace_bytes, sizeof workspace_bytes));
  int found = 0;
  const cublasStatus_t asked = cublasLtMatmulAlgoGetHeuristic(handle_, operation_, lt_a_, lt_b_, lt_c_, lt_c_,
                                                              preference, 1, &algorithm_, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  CUBLASLT_CHECK(asked);
  MG_CHECK(found > 0, "bench: cuBLASLt has no FP8 algorithm for {} x {} x {} on this GPU (it needs sm_89 or later)", m,
           n, k);
}

CublasLtFp8::~CublasLtFp8() {
  cublasLtMatrixLayoutDestroy(lt_c_);
  cublasLtMatrixLayoutDestroy(lt_b_);
  cublasLtMatrixLayoutDestroy(lt_a_);
  cublasLtMatmulDescDestroy(operation_);
  cublasLtDestroy(handle_);
}

void CublasLtFp8::run() {
  const float one = 1.0f, zero = 0.0f;
  CUBLASLT_CHECK(cublasLtMatmul(handle_, operation_, &one, b_codes_, lt_a_, a_codes_, lt_b_, &zero, c_, lt_c_, c_,
                                lt_c_, &algorithm_.algo, workspace_.data_ptr(), kWorkspaceBytes, stream_));
}

}  // namespace mg::bench
