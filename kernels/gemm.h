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
#include <memory>
#include <string>

#include "core/tensor.h"
#include "kernels/backends.h"

namespace mg::kernels {

namespace cpu {
struct PackedPanels;  // kernels/cpu/gemm_packed.h
}  // namespace cpu

struct GemmShape {
  std::int64_t batch = 1;
  std::int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false;
  bool transpose_b = false;
};

// What the epilogue applies after the product; the default is none (C = op(A) op(B)).
enum class Activation : std::uint8_t { None, Relu, Gelu };  // Gelu: the exact erf GELU, as kernels/pointwise.h
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

// How a GEMM of f16 operands accumulates its products: the paper's third technique (§3.3), and
// what happens without it. F32 is the contract above, and the only mode a training recipe uses. F16
// keeps the running sum of every element of C in f16, as a Tensor Core does with an f16 accumulator
// (WMMA's fragment<accumulator, ..., half>): the products of each block of kF16AccumulationBlock
// consecutive k are exact and summed in f32, that sum is added to the running sum, and the result is
// rounded to f16 (to nearest even; subnormals kept; past 65504 it is inf). It exists so that
// `mixgrad repro` (E7) can show what f32 accumulation prevents; no recipe selects it.
// Why blocks of 16: measured. On an H200 (scripts/gpu-check, 2026-11-28, bench/results/gpu_tests-
// h200-2026-11-28.txt) the WMMA kernel with a half accumulator sums 65536 f16 ones to 32768: the sum
// grows by exact blocks of 16 until the block is half the f16 spacing (32 above 2^15) and the tie
// keeps the even 32768. Blocks of 8, the A100's granularity in Fasi et al. ("Numerical behavior of
// NVIDIA tensor cores", PeerJ CS 2021; 4 on the V100 and T4), would stop at 16384. 16 is also the
// k of one mma.sync.m16n8k16 instruction, what a WMMA k-step compiles to on sm_80 and later: the
// accumulator is rounded to f16 between two instructions. Whether the hardware truncates when it
// aligns the summands of a block, as Fasi et al. found on older chips, is not pinned down: the
// random products of tests/test_gemm_accumulation.cpp hold it to one f16 spacing of this model.
// Like allow_tf32, one process-wide switch, read when a GEMM is queued; bf16, f32 and f64 GEMMs
// ignore it (no Tensor Core accumulates bf16 products in bf16). On the GPU the F16 mode runs the
// simple WMMA kernel (rung 1 of kernels/cuda/gemm.cu) with a half accumulator, never split along k.
enum class Accumulation : std::uint8_t { F32, F16 };
constexpr int kF16AccumulationBlock = 16;
void set_gemm_accumulation(Accumulation accumulation);
Accumulation gemm_accumulation();

// Sets the accumulation mode for a scope and restores the previous one when it ends:
//   { kernels::GemmAccumulationGuard f16(kernels::Accumulation::F16); ... the GEMMs queued here ... }
class GemmAccumulationGuard {
 public:
  explicit GemmAccumulationGuard(Accumulation accumulation) : previous_(gemm_accumulation()) {
    set_gemm_accumulation(accumulation);
  }
  ~GemmAccumulationGuard() { set_gemm_accumulation(previous_); }
  GemmAccumulationGuard(const GemmAccumulationGuard&) = delete;
  GemmAccumulationGuard& operator=(const GemmAccumulationGuard&) = delete;

 private:
  Accumulation previous_;
};

MG_KERNELS(void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& shape,
                     const GemmEpilogue& epilogue = {});)

// For a B multiplied many times with one shape (the LSTM's recurrent weight: 2T GEMMs per training
// step). prepare_gemm_b does B's share of a GEMM's work once: on a CPU microkernel it packs B into the
// kernel's micro-panels (bf16 pairs for the dot kernel, f32 for the FMA ones: kernels/cpu/gemm_packed.h),
// without one it widens an f16/bf16 B to f32. gemm_prepared_b multiplies with what it made instead of
// packing or widening B again. f16 and bf16 give gemm's bits (the panels hold what gemm would pack).
// An f32 B is packed for AVX-512's FMA kernel where the CPU has it, as a convolution's is, even where
// gemm's f32 runs on the library (which would pack B again on every call): the microkernel's bits, an
// f32 sum in k order. On a GPU, and for f64, there is nothing to prepare and gemm_prepared_b is gemm.
struct PreparedGemmB {
  GemmShape shape = {};  // the shape it was prepared for (batch 1; m is free)
  Tensor widened = {};  // the library's f32 copy of an f16/bf16 B
  std::shared_ptr<const cpu::PackedPanels> panels = {};  // a microkernel's panels of B
};
PreparedGemmB prepare_gemm_b(const Tensor& b, const GemmShape& shape);
// An mg::Error when prepared was made for another n, k or layout of B.
void gemm_prepared_b(const Tensor& a, const Tensor& b, const PreparedGemmB& prepared, Tensor& c,
                     const GemmShape& shape);

namespace cpu {
// The two libraries that can multiply f32/f64 matrices on the CPU; kernels/cpu/blas_choice.h picks one
// per process (MG_GEMM=eigen|openblas overrides it).
enum class GemmLibrary : std::uint8_t { Eigen, OpenBlas };
// The same GEMM on a named library, whatever the choice: how the tests hold Eigen and OpenBLAS to one
// contract. GemmLibrary::OpenBlas in a build without it throws mg::Error.
void gemm_on(GemmLibrary library, const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& shape,
             const GemmEpilogue& epilogue = {});
PreparedGemmB prepare_gemm_b(const Tensor& b, const GemmShape& shape);
void gemm_prepared_b(const Tensor& a, const Tensor& b, const PreparedGemmB& prepared, Tensor& c,
                     const GemmShape& shape);
// What multiplies f32/f64 matrices in this process, and why, in one line: "OpenBLAS 0.3.21 SkylakeX
// (AVX-512 kernels, one thread)", or "Eigen 3.4.0 AVX-512 (OpenBLAS 0.3.21 would run its generic
// Prescott kernels on this AVX-512 CPU; MG_GEMM=openblas forces it)". Makes the choice if no GEMM
// has yet; throws mg::Error for a bad MG_GEMM (kernels/cpu/blas_choice.h).
std::string gemm_backend();
// The "model name" of the first processor in /proc/cpuinfo ("AMD EPYC", "Intel(R) Xeon(R) Processor
// @ 2.80GHz"): a CPU timing means little without it.
std::string cpu_model();
}  // namespace cpu

// What the CUDA backend alone has (kernels/cuda/, in builds with MG_WITH_CUDA).
namespace cuda {
// Which kernel cuda::gemm runs for these operands and a fresh C of dtype `out` (F64, the default:
// the operands' dtype), with ", split-k S x K" when k is cut into S slices of K (kernels/cuda/gemm.cu
// decides; named for the benchmark and the tests).
std::string gemm_kernel_name(const Tensor& a, const Tensor& b, const GemmShape& shape, DType out = DType::F64);

// The rungs of the Tensor Core ladder (kernels/cuda/gemm.cu's header). A GEMM runs the rung measured
// fastest for it that takes its operands (Auto: rung 4, wgmma, on an H100 or H200 for f16 and bf16
// GEMMs whose rows are 16-byte aligned and that are large enough for it to pay, 8 waves of its tiles
// and k >= 1024; else rung 3, mma.sync, for every f16 and bf16 GEMM, and for f32 under TF32 when its
// rows are 16-byte aligned). Wgmma asks for rung 4 wherever it takes the operands (else Auto's
// choice), to measure or test it at any size. A lower rung can be asked for, to measure it (bench/cuda_gemm)
// or test it: MmaPipelined for rung 3, WmmaSimple or WmmaPipelined for f16 operands (rung 2 only
// where its alignment rule holds, else rung 1); bf16 and f32 have no WMMA rung left (its bf16 and TF32 fragment
// loads compile to generic LD on sm_90) and keep running rung 3 or the CUDA-core kernel. One
// process-wide switch, read when a GEMM is queued, like allow_tf32; gemm_kernel_name says what runs.
enum class GemmRung : std::uint8_t { Auto, WmmaSimple, WmmaPipelined, MmaPipelined, Wgmma };
void set_gemm_rung(GemmRung rung);
GemmRung gemm_rung();

// Sets the rung for a scope and restores the previous one when it ends.
class GemmRungGuard {
 public:
  explicit GemmRungGuard(GemmRung rung) : previous_(gemm_rung()) { set_gemm_rung(rung); }
  ~GemmRungGuard() { set_gemm_rung(previous_); }
  GemmRungGuard(const GemmRungGuard&) = delete;
  GemmRungGuard& operator=(const GemmRungGuard&) = delete;

 private:
  GemmRung previous_;
};
}  // namespace cuda

}  // namespace mg::kernels
