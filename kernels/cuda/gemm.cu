// CUDA GEMM (kernels/gemm.h): C[b] = epilogue(op(A[b]) op(B[b])), the host entry that picks a kernel
// and decides whether to split k.
//
// The kernel ladder, simplest first (each file opens with its tiles, launch geometry and why; each
// rung is the step after the one below it):
//   1. gemm_wmma_simple.cuh  f16 on Tensor Cores through WMMA: a 32x32 tile a block, one 16x16
//                            fragment a warp, operands copied element by element. Any shape. Runs
//                            kernels::Accumulation::F16 (a half accumulator, E7 of `mixgrad repro`).
//   2. gemm_wmma.cuh         f16 through WMMA, pipelined: 128x128 tiles, 8 warps of 64x32, a 4-stage
//                            cp.async pipeline, padded shared memory. Needs 16-byte-aligned rows.
//   3. gemm_mma.cu           f16, bf16 and TF32 through mma.sync and ldmatrix: swizzled shared memory,
//                            warps of 64x64, 128x256 or 128x128 tiles, 4 or 3 stages, fragments double
//                            buffered, blocks in L2-friendly order, the epilogue staged for 16-byte
//                            stores. cp.async where rows are 16-byte aligned, loads through registers
//                            otherwise (f16/bf16).
//   4. gemm_wgmma.cu         f16 and bf16 on an H100 or H200 (sm_90a only): wgmma from shared memory
//                            through descriptors, tiles brought by TMA onto mbarriers, a producer
//                            warpgroup and two consumer warpgroups, 128x256x64 tiles (C f32: 128x128),
//                            persistent, the epilogue stored by TMA. Needs 16-byte-aligned rows of A, B
//                            and C; never split.
//      gemm_f32.cuh          f32 on CUDA cores: 128x128x8 tiles, 8x8 elements a thread, double
//                            buffered. Any shape.
// Rungs 1 and 2 stay as the text a reader climbs and as what kernels::cuda::set_gemm_rung can ask
// for; their bf16 and TF32 versions are gone: WMMA's fragment loads of those types compile to generic
// LD + MOVM on sm_90 (no LDSM), which held bf16 to 23% of cuBLAS on an H200 (scripts/check-sass now
// fails any Tensor Core GEMM that reads shared memory through LD).
// Which one runs (GemmRung::Auto):
//   f16 under kernels::Accumulation::F16  -> 1 with a half accumulator, never split
//   f16, bf16 on compute capability 9.0   -> 4 when the rows of A, B and C are aligned, C has at least
//                                            8 x SMs of its tiles and k >= 1024; measured on an H200
//                                            (docs/results/gpu-bench.md, 2026-11-29), rung 4 beats rung
//                                            3 at 8192^3 (2048 tiles: 69-70% of cuBLAS against 58-67%)
//                                            and loses at 4096^3 (512 tiles: 50-52% against 59-61%) and
//                                            on every example model's shape (its 128x256 tile mostly
//                                            empty at n = 64, a short k never filling its pipeline).
//                                            GemmRung::Wgmma runs it wherever it takes the operands
//   f16, bf16                             -> 3: cp.async when the rows are aligned (128x256 tiles when
//                                            C has at least one per SM and the device's shared memory
//                                            holds their 192 KiB, else 128x128), else through
//                                            registers (128x128); the 128x256 tile is never split
//   f32                                   -> 3 in TF32 when kernels::allow_tf32() is on and the rows are
//                                            aligned, else the CUDA-core kernel
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
//   slices = min(SMs x blocks an SM runs / blocks,   fill the GPU once (2 a SM for rungs 2 and 3 where
//                                                    the SM's shared memory holds two, as an H100's
//                                                    does, else 1; 8 for rung 1; 1 for the CUDA-core
//                                                    kernel's split variant), not more
//                k / 512,                            a slice of at least 512 (8 steps of rung 3 in
//                                                    f16, 16 of rung 2), so its pipeline fill and its
//                                                    store of partial sums stay small beside its math
//                256)                                bounds the second pass: 256 slices of conv1's dW
//                                                    are 288 KiB of f32 to add
//   k_slice = ceil(k / slices) rounded up to the kernel's k step (64, 32, 16 or 8), so no step
//   straddles two slices; then slices = ceil(k / k_slice), so none is empty. No split when that
//   leaves < 2.
// Measured on the H200 with rungs 1 and 2 (docs/results/gpu-bench.md): splitting paid wherever it
// ran (conv2's dW 56% of cuBLAS with 49 slices, a 1024^3 product 57% against 38% unsplit at 2048^3);
// the one row it left slow, conv1's dW at 16%, was the 128-slice cap (k / 512 allowed 196), so the
// cap is now 256. E.g. on an H100 (132 SMs), f16: conv2's dW (3 tiles of 128x128) takes 49 slices of
// 512, conv1's dW (1 tile, rows of 9 unaligned: loads through registers) 196 of 512; the MLP's dW (256 x
// 784 over k = 128) no split (k too short).
// A split adds the same f32 products in another order (each slice's, then the slices'); the test's
// error bound (k + 1 roundings of S) holds for any order. The slice count depends on the SM count, so
// two GPU models may differ in the last bits; one GPU gives the same bits every run.
//
// Tests: build/tests/test_cuda_gemm (every kernel, split or not, against kernels::cpu::gemm).
// Benchmark: build/bench/cuda_gemm (every rung against cuBLAS; which kernel and split each shape takes).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>

#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/gemm_f32.cuh"
#include "kernels/cuda/gemm_mma.h"
#include "kernels/cuda/gemm_wmma.cuh"
#include "kernels/cuda/gemm_wgmma.h"
#include "kernels/cuda/gemm_wmma_simple.cuh"

namespace mg::kernels::cuda {

#ifdef MG_CUDA_EMULATED
static_assert(nvcuda::wmma::kHalfAccumulatorBlock == kF16AccumulationBlock,
              "the emulator's f16 accumulator must round as kernels/gemm.h says the CPU does");
#endif

namespace {

std::atomic<GemmRung> rung_setting{GemmRung::Auto};

enum class GemmKernel {
  WmmaSimple,
  WmmaSimpleF16Accumulator,
  WmmaPipelined,
  MmaLarge,  // rung 3, 128x256, cp.async
  MmaMedium,  // rung 3, 128x128, cp.async
  MmaAnyAlignment,  // rung 3, 128x128, loads through registers
  Wgmma,  // rung 4, sm_90a: 128x256 (C f32: 128x128), TMA, persistent
  SimtF32
};

// What the plan needs to know of the current device, asked of the driver once per device: its SM
// count, and its shared memory (a block's opt-in limit, an SM's whole), which differ by GPU: 227 and
// 228 KiB on an H100, 163 and 164 KiB on an A100, 99 and 100 KiB on an Ada GPU.
struct DeviceFacts {
  int multiprocessors, shared_per_block, shared_per_multiprocessor;
};

const DeviceFacts& device_facts() {
  static OncePerDevice asked;
  static std::array<DeviceFacts, OncePerDevice::kMaxDevices> facts{};
  const int device = asked([](int index) {
    DeviceFacts& f = facts[static_cast<std::size_t>(index)];
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&f.multiprocessors, cudaDevAttrMultiProcessorCount, index));
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&f.shared_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, index));
    MG_CUDA_CHECK(
        cudaDeviceGetAttribute(&f.shared_per_multiprocessor, cudaDevAttrMaxSharedMemoryPerMultiprocessor, index));
  });
  return facts[static_cast<std::size_t>(device)];
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Rung 3 with 16-byte-aligned rows: the large tile when C has at least one of them per SM (the GPU is
// filled once by the kernel that reuses each loaded operand most) and the device's shared memory holds
// its 192 KiB (not an Ada GPU's 99 KiB, nor an A100's 163), else the medium one (twice the blocks).
GemmKernel mma_tile_for(const GemmShape& s) {
  using mma_pipelined::Large;
  const DeviceFacts& device = device_facts();
  const std::int64_t large_tiles = ceil_div(s.m, Large::kTileM) * ceil_div(s.n, Large::kTileN) * s.batch;
  return large_tiles >= device.multiprocessors && Large::kSharedBytes <= device.shared_per_block
             ? GemmKernel::MmaLarge
             : GemmKernel::MmaMedium;
}

// The header's "which one runs", and the lower rungs when gemm_rung() asks for them.
GemmKernel pick_kernel(const Tensor& a, const Tensor& b, const GemmShape& s) {
  const GemmRung rung = gemm_rung();
  if (a.dtype() == DType::F16) {
    if (gemm_accumulation() == Accumulation::F16) return GemmKernel::WmmaSimpleF16Accumulator;
    if (rung == GemmRung::WmmaSimple) return GemmKernel::WmmaSimple;
    if (rung == GemmRung::WmmaPipelined)
      return rows_aligned<__half>(a, b, s) ? GemmKernel::WmmaPipelined : GemmKernel::WmmaSimple;
    return rows_aligned<__half>(a, b, s) ? mma_tile_for(s) : GemmKernel::MmaAnyAlignment;
  }
  if (a.dtype() == DType::BF16) return rows_aligned<bf16>(a, b, s) ? mma_tile_for(s) : GemmKernel::MmaAnyAlignment;
  if (a.dtype() == DType::F32)
    return allow_tf32() && rows_aligned<float>(a, b, s) ? mma_tile_for(s) : GemmKernel::SimtF32;
  throw Error(fmt::format("CUDA kernel gemm: needs f32, f16 or bf16 operands, got {}", a.dtype()));
}

// What split-K needs to know of a kernel: its output tile, its k step, how many blocks an SM runs.
struct Geometry {
  int tile_m, tile_n, k_step, blocks_per_sm;
};

// The blocks of a kernel an SM runs at once: what its launch bounds promise, or fewer where the SM's
// shared memory holds fewer (each block also takes 1 KiB the system reserves).
int blocks_per_sm(int promised, int shared_bytes) {
  const int fit = device_facts().shared_per_multiprocessor / (shared_bytes + 1024);
  return std::max(1, std::min(promised, fit));
}

template <class Cfg>
Geometry mma_geometry(DType dtype) {
  const int k_step = dtype == DType::F32 ? mma_pipelined::kStepOf<float> : mma_pipelined::kStepOf<__half>;
  return {Cfg::kTileM, Cfg::kTileN, k_step, blocks_per_sm(Cfg::kBlocksPerSm, Cfg::kSharedBytes)};
}

Geometry geometry_of(GemmKernel kernel, DType dtype) {
  switch (kernel) {
    case GemmKernel::WmmaSimple:
    case GemmKernel::WmmaSimpleF16Accumulator:
      return {wmma_simple::kTile, wmma_simple::kTile, wmma_simple::kStep, wmma_simple::kBlocksPerSm};
    case GemmKernel::WmmaPipelined:
      return {wmma_pipelined::kTileM, wmma_pipelined::kTileN, wmma_pipelined::kStep,
              blocks_per_sm(wmma_pipelined::kBlocksPerSm, wmma_pipelined::kSharedBytes)};
    case GemmKernel::MmaLarge:
      return mma_geometry<mma_pipelined::Large>(dtype);
    case GemmKernel::MmaMedium:
    case GemmKernel::MmaAnyAlignment:
      return mma_geometry<mma_pipelined::Medium>(dtype);
    case GemmKernel::Wgmma:  // never split: the plan asks only to size it
      return {wgmma_gemm::kTileM, wgmma_gemm::tile_n(false), 64, 1};
    case GemmKernel::SimtF32:  // its split variant's count: the plan asks only to split
      return {simt_f32::kTile, simt_f32::kTile, simt_f32::kStep, simt_f32::kSplitBlocksPerSm};
  }
  throw Error("CUDA kernel gemm: unknown kernel");
}

constexpr std::int64_t kMinSliceK = 512;  // the header's reasons; a multiple of every kernel's k step
constexpr std::int64_t kMaxSlices = 256;

// A GEMM as it will run: which kernel, and k cut into `slices` runs of `k_slice` (slices 1: no split).
struct GemmPlan {
  GemmKernel kernel;
  int slices = 1;
  int k_slice = 0;  // when split
};

// Rung 4 where the device runs it, it takes the operands, and the header's rule says it pays (or
// GemmRung::Wgmma asks for it).
bool wgmma_for(const Tensor& a, const Tensor& b, DType out, const void* c, const GemmShape& s) {
  const GemmRung rung = gemm_rung();
  if ((rung != GemmRung::Auto && rung != GemmRung::Wgmma) || !wgmma_gemm::available() ||
      !wgmma_gemm::takes(a, b, out, c, s))
    return false;
  if (rung == GemmRung::Wgmma) return true;
  const std::int64_t tiles = ceil_div(s.m, wgmma_gemm::kTileM) * ceil_div(s.n, wgmma_gemm::tile_n(out == DType::F32)) *
                             s.batch;
  return tiles >= 8 * device_facts().multiprocessors && s.k >= 1024;
}

// The header's rule, for the current device (the caller's DeviceGuard makes it the tensors'), for C
// of dtype `out` at `c` (null: a fresh tensor).
GemmPlan plan_gemm(const Tensor& a, const Tensor& b, DType out, const void* c, const GemmShape& s) {
  if (wgmma_for(a, b, out, c, s)) return {GemmKernel::Wgmma};
  GemmPlan plan{pick_kernel(a, b, s)};
  const Geometry g = geometry_of(plan.kernel, a.dtype());
  const std::int64_t sms = device_facts().multiprocessors;
  const std::int64_t blocks = ceil_div(s.m, g.tile_m) * ceil_div(s.n, g.tile_n) * s.batch;
  // An f16 accumulator is never split: the slices' partial sums would be f32, which is not the
  // arithmetic it stands for.
  if (plan.kernel == GemmKernel::WmmaSimpleF16Accumulator || blocks == 0 || blocks * 2 > sms)
    return plan;  // 0: an empty C (only gemm_kernel_name asks then); MmaLarge always returns here
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
  using mma_pipelined::Copy;
  using mma_pipelined::Tile;
  switch (kernel) {
    case GemmKernel::MmaLarge:
      return mma_pipelined::launch(Tile::Large, Copy::Async, args, s, stream);
    case GemmKernel::MmaMedium:
      return mma_pipelined::launch(Tile::Medium, Copy::Async, args, s, stream);
    case GemmKernel::MmaAnyAlignment:
      return mma_pipelined::launch(Tile::Medium, Copy::Registers, args, s, stream);
    case GemmKernel::Wgmma:
      if constexpr (!std::is_same_v<In, float>) return wgmma_gemm::launch(args, s, stream);
      break;
    case GemmKernel::SimtF32:
      if constexpr (std::is_same_v<In, float>) return simt_f32::launch(args, s, stream);
      break;
    case GemmKernel::WmmaPipelined:
      if constexpr (std::is_same_v<In, __half>) return wmma_pipelined::launch(args, s, stream);
      break;
    case GemmKernel::WmmaSimple:
      if constexpr (std::is_same_v<In, __half>) return wmma_simple::launch(args, s, stream);
      break;
    case GemmKernel::WmmaSimpleF16Accumulator:
      if constexpr (std::is_same_v<In, __half>) return wmma_simple::launch<In, Out, __half>(args, s, stream);
      break;
  }
  throw Error("CUDA kernel gemm: the plan names a kernel these operands have no instance of");
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

template <class Cfg>
std::string mma_name(DType dtype, const char* copies) {
  const bool tf32 = dtype == DType::F32;
  return fmt::format("{}mma {}x{}x{}, {} stages{}", tf32 ? "tf32 " : "", Cfg::kTileM, Cfg::kTileN,
                     tf32 ? mma_pipelined::kStepOf<float> : mma_pipelined::kStepOf<__half>, Cfg::kStages, copies);
}

std::string kernel_name(GemmKernel kernel, DType dtype, DType out) {
  switch (kernel) {
    case GemmKernel::WmmaSimple:
      return "wmma simple 32x32x16";
    case GemmKernel::WmmaSimpleF16Accumulator:
      return "wmma simple 32x32x16, f16 accumulator";
    case GemmKernel::WmmaPipelined:
      return "wmma 128x128x32, 4 stages";
    case GemmKernel::MmaLarge:
      return mma_name<mma_pipelined::Large>(dtype, "");
    case GemmKernel::MmaMedium:
      return mma_name<mma_pipelined::Medium>(dtype, "");
    case GemmKernel::MmaAnyAlignment:
      return mma_name<mma_pipelined::Medium>(dtype, ", any alignment");
    case GemmKernel::Wgmma:
      return wgmma_gemm::name(out == DType::F32);
    case GemmKernel::SimtF32:
      return "simt f32 128x128x8";
  }
  return "?";
}

}  // namespace

void set_gemm_rung(GemmRung rung) { rung_setting.store(rung, std::memory_order_relaxed); }
GemmRung gemm_rung() { return rung_setting.load(std::memory_order_relaxed); }

void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& s, const GemmEpilogue& epilogue) {
  if (c.numel() == 0) return;
  mg::cuda::DeviceGuard guard(c.device().index);
  const GemmPlan plan = plan_gemm(a, b, c.dtype(), c.data_ptr(), s);
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

std::string gemm_kernel_name(const Tensor& a, const Tensor& b, const GemmShape& shape, DType out) {
  mg::cuda::DeviceGuard guard(a.device().index);
  if (out == DType::F64) out = a.dtype();
  const GemmPlan plan = plan_gemm(a, b, out, nullptr, shape);
  const std::string name = kernel_name(plan.kernel, a.dtype(), out);
  if (plan.slices == 1) return name;
  return fmt::format("{}, split-k {} x {}", name, plan.slices, plan.k_slice);
}

}  // namespace mg::kernels::cuda
