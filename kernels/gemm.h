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
//
// Epilogue (optional, fused into the store): C = act(op(A) op(B) + bias), with the bias added and the
// activation applied to the f32 (f64 for f64) sum, and the result rounded once into C's dtype: one
// GEMM where a layer would take a GEMM and two elementwise passes. mg::linear (and so conv2d) puts
// its bias here, with its own backward beside it in autograd/matmul.cpp.
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

// What the epilogue applies after the product; the default is none (C = op(A) op(B)).
enum class Activation : std::uint8_t { None, Relu, Gelu };  // Gelu: the exact erf GELU, as kernels/functors.h
struct GemmEpilogue {
  Tensor bias;  // undefined (no bias), or [n] in C's dtype or f32, on C's device: added to every row
  Activation activation = Activation::None;
};

// TF32 for f32 GEMMs on Tensor Cores (Ampere and later): the operands are rounded to 10 mantissa bits
// (relative error 2^-11 each) and the products accumulated in f32, ~7x the f32 rate of an H100. Off by
// default: fp32 means fp32. Like PyTorch's torch.backends.cuda.matmul.allow_tf32, it is one global
// switch, read when a GEMM is queued. The CPU ignores it.
void set_allow_tf32(bool allow);
bool allow_tf32();

void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& shape, const GemmEpilogue& epilogue = {});

namespace cpu {
// The two libraries that can multiply f32/f64 matrices on the CPU; kernels/cpu/blas_choice.h picks one
// per process (MG_GEMM=eigen|openblas overrides it).
enum class GemmLibrary : std::uint8_t { Eigen, OpenBlas };
void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& shape, const GemmEpilogue& epilogue = {});
// The same GEMM on a named library, whatever the choice: how the tests hold Eigen and OpenBLAS to one
// contract. GemmLibrary::OpenBlas in a build without it throws mg::Error.
void gemm_on(GemmLibrary library, const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& shape,
             const GemmEpilogue& epilogue = {});
// What multiplies f32/f64 matrices in this process, and why, in one line: "OpenBLAS 0.3.21 SkylakeX
// (AVX-512 kernels, one thread)", or "Eigen 3.4.0 AVX-512 (OpenBLAS 0.3.21 would run its generic
// Prescott kernels on this AVX-512 CPU; MG_GEMM=openblas forces it)". Makes the choice if no GEMM
// has yet; throws mg::Error for a bad MG_GEMM (kernels/cpu/blas_choice.h).
std::string gemm_backend();
}  // namespace cpu

// The CUDA backend (kernels/cuda/), in builds with MG_WITH_CUDA: same contract, tensors on one GPU.
namespace cuda {
void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& shape, const GemmEpilogue& epilogue = {});
// Which kernel cuda::gemm runs for these operands, with ", split-k S x K" when k is cut into S slices
// of K (kernels/cuda/gemm.cu decides; named for the benchmark and the tests).
std::string gemm_kernel_name(const Tensor& a, const Tensor& b, const GemmShape& shape);
}  // namespace cuda

}  // namespace mg::kernels
