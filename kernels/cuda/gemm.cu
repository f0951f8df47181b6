// CUDA GEMM (kernels/gemm.h): C[b] = epilogue(op(A[b]) op(B[b])), the host entry that picks a kernel
// and decides whether to split k.
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
//   f16 operands under kernels::Accumulation::F16 -> 1 with a half accumulator, never split (E7 of
//                         `mixgrad repro` only: kernels/gemm.h)
//   f32 operands       -> 2 in TF32 when kernels::allow_tf32() is on and they fit, else 3
// C is f16/bf16 (the operands' dtype) or f32; every kernel accumulates in f32, applies the epilogue
// (bias, activation: gemm_common.cuh) to the f32 sums and rounds once on store, like the CPU.
//
// Split-K, for a long k over few output tiles (the CNN's weight gradients: 64 x 288 over k = 25088,
// 32 x 9 over k = 100352 at batch 128), where one block per tile would leave most SMs idle and walk k
// alone. Every kernel above can sum a slice of k and store its f32 sums into scratch [slices, batch,
// m, n] (Tensor::empty on the device: the caching allocator); a second kernel adds the slices in
// order (deterministic: the same bits every run on a given GPU), applies the epilogue and rounds once
// (gemm_common.cuh). With blocks = tiles along m x tiles along n x batch, and SMs the device's count:
//   split only when blocks <= SMs / 2     a GPU at least half idle; above that, the scratch and the
//                                         second pass cost more than the idle SMs would give
//   slices = min(SMs x blocks an SM runs / blocks,   fill the GPU once (2 a SM for the 128x128
//                                                    kernels, 8 for the simple one), not more
//                k / 512,                            a slice of at least 512 (16 steps of rung 2, 32 of
//                                                    rung 1, 64 of rung 3), so its pipeline fill and its
//                                                    store of partial sums stay small beside its math
//                128)                                bounds the second pass's sum per element
//   k_slice = ceil(k / slices) rounded up to the kernel's k step (32 or 16 or 8), so no step straddles
//   two slices; then slices = ceil(k / k_slice), so none is empty. No split when that leaves < 2.
// E.g. on an H100 (132 SMs), f16: conv2's dW (3 tiles) takes 49 slices of 512, conv1's dW (1 tile of
// the simple kernel) 128 of 784; the MLP's dW (256 x 784 over k = 128) no split (k too short).
// A split adds the same f32 products in another order (each slice's, then the slices'); the test's
// error bound (k + 1 roundings of S) holds for any order. The slice count depends on the SM count, so
// two GPU models may differ in the last bits; one GPU gives the same bits every run.
//
// Tests: build/tests/test_cuda_gemm (every kernel, split or not, against kernels::cpu::gemm).
// Benchmark: build/bench/cuda_gemm (every kernel against cuBLAS; which kernel and split each shape takes).
#include <fmt/format.h>

#include <algorithm>

#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/gemm_f32.cuh"
#include "kernels/cuda/gemm_wmma.cuh"
#include "kernels/cuda/gemm_wmma_simple.cuh"

namespace mg::kernels::cuda {

#ifdef MG_CUDA_EMULATED
static_assert(nvcuda::wmma::kHalfAccumulatorBlock == kF16AccumulationBlock,
              "the emulator's f16 accumulator must round as kernels/gemm.h says the CPU does");
#endif

namespace {

enum class GemmKernel { WmmaSimple, WmmaSimpleF16Accumulator, WmmaPipelined, Tf32Pipelined, SimtF32 };

GemmKernel pick_kernel(const Tensor& a, const Tensor& b, const GemmShape& s) {
  if (a.dtype() == DType::F16 && gemm_accumulation() == Accumulation::F16) return GemmKernel::WmmaSimpleF16Accumulator;
  switch (a.dtype()) {
    case DType::F16:
      return wmma_pipelined::fits<__half>(a, b, s) ? GemmKernel::WmmaPipelined : GemmKernel::WmmaSimple;
    case DType::BF16:
      return wmma_pipelined::fits<bf16>(a, b, s) ? GemmKernel::WmmaPipelined : GemmKernel::WmmaSimple;
    case DType::F32:
      return allow_tf32() && wmma_pipelined::fits<float>(a, b, s) ? GemmKernel::Tf32Pipelined : GemmKernel::SimtF32;
    default:
      break;
  }
  throw Error(fmt::format("CUDA kernel gemm: needs f32, f16 or bf16 operands, got {}", a.dtype()));
}

// What split-K needs to know of a kernel: its output tile, its k step, how many blocks an SM runs.
struct Geometry {
  int tile_m, tile_n, k_step, blocks_per_sm;
};

Geometry geometry_of(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::WmmaSimple:
    case GemmKernel::WmmaSimpleF16Accumulator:
      return {wmma_simple::kTile, wmma_simple::kTile, wmma_simple::kStep, wmma_simple::kBlocksPerSm};
    case GemmKernel::WmmaPipelined:  // f16 and bf16 alike: 2-byte operands
      return {wmma_pipelined::kTileM, wmma_pipelined::kTileN, wmma_pipelined::kStepOf<__half>,
              wmma_pipelined::kBlocksPerSm};
    case GemmKernel::Tf32Pipelined:
      return {wmma_pipelined::kTileM, wmma_pipelined::kTileN, wmma_pipelined::kStepOf<float>,
              wmma_pipelined::kBlocksPerSm};
    case GemmKernel::SimtF32:
      return {simt_f32::kTile, simt_f32::kTile, simt_f32::kStep, simt_f32::kBlocksPerSm};
  }
  throw Error("CUDA kernel gemm: unknown kernel");
}

constexpr std::int64_t kMinSliceK = 512;  // the header's reasons; a multiple of every kernel's k step
constexpr std::int64_t kMaxSlices = 128;

// The current device's SM count, asked of the driver once per device.
int multiprocessor_count() {
  static OncePerDevice asked;
  static std::array<int, OncePerDevice::kMaxDevices> counts{};
  const int device = asked([](int index) {
    MG_CUDA_CHECK(
        cudaDeviceGetAttribute(&counts[static_cast<std::size_t>(index)], cudaDevAttrMultiProcessorCount, index));
  });
  return counts[static_cast<std::size_t>(device)];
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// A GEMM as it will run: which kernel, and k cut into `slices` runs of `k_slice` (slices 1: no split).
struct GemmPlan {
  GemmKernel kernel;
  int slices = 1;
  int k_slice = 0;  // when split
};

// The header's rule, for the current device (the caller's DeviceGuard makes it the tensors').
GemmPlan plan_gemm(const Tensor& a, const Tensor& b, const GemmShape& s) {
  GemmPlan plan{pick_kernel(a, b, s)};
  const Geometry g = geometry_of(plan.kernel);
  const std::int64_t sms = multiprocessor_count();
  const std::int64_t blocks = ceil_div(s.m, g.tile_m) * ceil_div(s.n, g.tile_n) * s.batch;
  // An f16 accumulator is never split: the slices' partial sums would be f32, which is not the
  // arithmetic it stands for.
  if (plan.kernel == GemmKernel::WmmaSimpleF16Accumulator || blocks == 0 || blocks * 2 > sms)
    return plan;  // 0: an empty C (only gemm_kernel_name asks then)
  const std::int64_t wanted = std::min({g.blocks_per_sm * sms / blocks, s.k / kMinSliceK, kMaxSlices});
  if (wanted < 2) return plan;
  const std::int64_t k_slice = ceil_div(ceil_div(s.k, wanted), g.k_step) * g.k_step;
  const std::int64_t slices = ceil_div(s.k, k_slice);
  if (slices < 2) return plan;
  plan.slices = static_cast<int>(slices);
  plan.k_slice = static_cast<int>(k_slice);
  return plan;
}

template <class In, class Out>
void launch_kernel(GemmKernel kernel, const GemmArgs<In, Out>& args, const GemmShape& s, cudaStream_t stream) {
  if constexpr (std::is_same_v<In, float>) {
    if (kernel == GemmKernel::Tf32Pipelined)
      wmma_pipelined::launch(args, s, stream);
    else
      simt_f32::launch(args, s, stream);
  } else {
    if (kernel == GemmKernel::WmmaPipelined)
      wmma_pipelined::launch(args, s, stream);
    else if (kernel == GemmKernel::WmmaSimple)
      wmma_simple::launch(args, s, stream);
    else if constexpr (std::is_same_v<In, __half>)
      wmma_simple::launch<In, Out, __half>(args, s, stream);
    else
      throw Error("CUDA kernel gemm: an f16 accumulator needs f16 operands");
  }
}

template <class In, class Out>
void run(const GemmPlan& plan, const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& s,
         const GemmEpilogue& epilogue, cudaStream_t stream) {
  GemmArgs<In, Out> args = make_gemm_args<In, Out>(a, b, c, s, epilogue);
  if (plan.slices == 1) {
    launch_kernel(plan.kernel, args, s, stream);
    return;
  }
  // Freed when this returns, while the kernels may still run: the allocator hands it out again only
  // to work queued later on the same stream (kernels/cuda/allocator.h).
  Tensor partial = Tensor::empty({plan.slices, s.batch, s.m, s.n}, {.dtype = DType::F32, .device = c.device()});
  args.slices = plan.slices;
  args.k_slice = plan.k_slice;
  args.partial = device_ptr<float>(partial);
  launch_kernel(plan.kernel, args, s, stream);
  launch_sum_slices(args, stream);
}

std::string kernel_name(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::WmmaSimple:
      return "wmma simple 32x32x16";
    case GemmKernel::WmmaSimpleF16Accumulator:
      return "wmma simple 32x32x16, f16 accumulator";
    case GemmKernel::WmmaPipelined:
      return "wmma 128x128x32, 4 stages";
    case GemmKernel::Tf32Pipelined:
      return "tf32 wmma 128x128x16, 4 stages";
    case GemmKernel::SimtF32:
      return "simt f32 128x128x8";
  }
  return "?";
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& s, const GemmEpilogue& epilogue) {
  if (c.numel() == 0) return;
  mg::cuda::DeviceGuard guard(c.device().index);
  const GemmPlan plan = plan_gemm(a, b, s);
  const cudaStream_t stream = stream_of(c);
  visit_device_floating(a.dtype(), "gemm", [&](auto in) {
    using In = decltype(in);
    if constexpr (std::is_same_v<In, float>) {
      run<float, float>(plan, a, b, c, s, epilogue, stream);
    } else {
      if (c.dtype() == DType::F32)
        run<In, float>(plan, a, b, c, s, epilogue, stream);
      else
        run<In, In>(plan, a, b, c, s, epilogue, stream);
    }
  });
}

std::string gemm_kernel_name(const Tensor& a, const Tensor& b, const GemmShape& shape) {
  mg::cuda::DeviceGuard guard(a.device().index);
  const GemmPlan plan = plan_gemm(a, b, shape);
  if (plan.slices == 1) return kernel_name(plan.kernel);
  return fmt::format("{}, split-k {} x {}", kernel_name(plan.kernel), plan.slices, plan.k_slice);
}

}  // namespace mg::kernels::cuda
