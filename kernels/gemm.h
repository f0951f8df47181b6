// GEMM: C[b] = op(A[b]) * op(B[b]) for b in [0, batch), with op = identity or transpose.
//
// Layouts (row-major, contiguous; a transpose is a flag, never a copy):
//   A: [batch, m, k], or [batch, k, m] when transpose_a
//   B: [batch, k, n], or [batch, n, k] when transpose_b
//   C: [batch, m, n]
// So backward needs no transposed copies: dA = dC * B^T is (NT), dB = A^T * dC is (TN).
//
// Numerics (the Tensor Core contract, identical on CPU and GPU): f16/bf16 operands are multiplied
// exactly and accumulated in f32; the result is rounded once when stored into C's dtype (f16, bf16
// or f32). f32 and f64 multiply in their own precision. A and B share one dtype.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace mg::kernels {

struct GemmShape {
  std::int64_t batch = 1;
  std::int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false;
  bool transpose_b = false;
};

void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& shape);

namespace cpu {
void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& shape);
// What multiplies f32/f64 matrices in this build: "OpenBLAS <version> (one thread)" or "Eigen <version>".
std::string gemm_backend();
}  // namespace cpu

}  // namespace mg::kernels
