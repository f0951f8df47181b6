// CUDA GEMM (kernels/gemm.h): C[b] = epilogue(op(A[b]) op(B[b])), the host entry that picks a kernel.
//
// The kernel ladder, simplest first (each file opens with its tiles, launch geometry and why):
//   1. gemm_wmma_simple.cuh  f16/bf16 on Tensor Cores: a 32x32 tile a block, one 16x16 WMMA fragment
//                            a warp, operands copied element by element into shared memory. Any
//                            shape and alignment: the fallback of rung 2.
//   2. gemm_wmma.cuh         the fast one: 128x128 tiles, 8 warps of 64x32, a 4-stage cp.async
//                            pipeline, fragments loaded row- or col-major to match the operands'
//                            layouts. Needs every operand row to start on 16 bytes (leading
//                            dimensions a multiple of 8 f16/bf16 or 4 f32, aligned pointers); also
//                            the TF32 path for f32 operands.
//   3. gemm_f32.cuh          f32 on CUDA cores: 128x128x8 tiles, 8x8 elements a thread, double
//                            buffered. Any shape.
// Which one runs:
//   f16/bf16 operands  -> 2 when the operands fit its alignment rule, else 1 (e.g. n = 10 classes)
//   f32 operands       -> 2 in TF32 when kernels::allow_tf32() is on and they fit, else 3
// C is f16/bf16 (the operands' dtype) or f32; every kernel accumulates in f32, applies the epilogue
// (bias, activation: gemm_common.cuh) to the f32 sums and rounds once on store, like the CPU.
//
// Tests: build/tests/test_cuda_gemm (every kernel against kernels::cpu::gemm).
// Benchmark: build/bench/cuda_gemm (every kernel against cuBLAS, and which kernel each shape takes).
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/gemm_f32.cuh"
#include "kernels/cuda/gemm_wmma.cuh"
#include "kernels/cuda/gemm_wmma_simple.cuh"

namespace mg::kernels::cuda {

namespace {

enum class GemmKernel { WmmaSimple, WmmaPipelined, Tf32Pipelined, SimtF32 };

GemmKernel pick_kernel(const Tensor& a, const Tensor& b, const GemmShape& s) {
  switch (a.dtype()) {
    case DType::F16: return wmma_pipelined::fits<__half>(a, b, s) ? GemmKernel::WmmaPipelined : GemmKernel::WmmaSimple;
    case DType::BF16: return wmma_pipelined::fits<bf16>(a, b, s) ? GemmKernel::WmmaPipelined : GemmKernel::WmmaSimple;
    case DType::F32:
      return allow_tf32() && wmma_pipelined::fits<float>(a, b, s) ? GemmKernel::Tf32Pipelined : GemmKernel::SimtF32;
    default: break;
  }
  throw Error(fmt::format("CUDA kernel gemm: needs f32, f16 or bf16 operands, got {}", a.dtype()));
}

template <class In, class Out>
void run(GemmKernel kernel, const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& s,
         const GemmEpilogue& epilogue, cudaStream_t stream) {
  const GemmArgs<In, Out> args = make_gemm_args<In, Out>(a, b, c, s, epilogue);
  if constexpr (std::is_same_v<In, float>) {
    if (kernel == GemmKernel::Tf32Pipelined) wmma_pipelined::launch(args, s, stream);
    else simt_f32::launch(args, s, stream);
  } else {
    if (kernel == GemmKernel::WmmaPipelined) wmma_pipelined::launch(args, s, stream);
    else wmma_simple::launch(args, s, stream);
  }
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& s, const GemmEpilogue& epilogue) {
  if (c.numel() == 0) return;
  mg::cuda::DeviceGuard guard(c.device().index);
  const GemmKernel kernel = pick_kernel(a, b, s);
  const cudaStream_t stream = stream_of(c);
  visit_device_floating(a.dtype(), "gemm", [&](auto in) {
    using In = decltype(in);
    if constexpr (std::is_same_v<In, float>) {
      run<float, float>(kernel, a, b, c, s, epilogue, stream);
    } else {
      if (c.dtype() == DType::F32) run<In, float>(kernel, a, b, c, s, epilogue, stream);
      else run<In, In>(kernel, a, b, c, s, epilogue, stream);
    }
  });
}

std::string gemm_kernel_name(const Tensor& a, const Tensor& b, const GemmShape& shape) {
  switch (pick_kernel(a, b, shape)) {
    case GemmKernel::WmmaSimple: return "wmma simple 32x32x16";
    case GemmKernel::WmmaPipelined: return "wmma 128x128x32, 4 stages";
    case GemmKernel::Tf32Pipelined: return "tf32 wmma 128x128x16, 4 stages";
    case GemmKernel::SimtF32: return "simt f32 128x128x8";
  }
  return "?";
}

}  // namespace mg::kernels::cuda
