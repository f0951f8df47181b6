// Rung 4 of the GEMM ladder: Hopper's wgmma, fed by TMA through mbarriers, for f16 and bf16 on an
// H100 or H200 (sm_90a). What changes from rung 3 (gemm_mma.cu), and why:
//   - One instruction for a warpgroup (4 warps): wgmma.m64n256k16 multiplies 64 x 16 by 16 x 256
//     straight from shared memory, through descriptors (wgmma_layout.h), with no ldmatrix and no
//     operand registers; it runs asynchronously, so the warpgroup issues a k step of 4 as one group
//     and waits only for the group before it (one in flight), then hands that group's stage back.
//   - TMA copies a whole tile with one instruction from one thread (cp.async.bulk.tensor), swizzled
//     as the descriptors expect, zeros outside the tensor (any m, n, k: no edge code), and counts its
//     bytes on an mbarrier: a stage is full when its bytes have landed. (Any m, n, k whose rows start
//     on 16 bytes: TMA's rule for a tensor's strides.)
//   - Warp specialisation: warpgroup 0 is the producer (one thread issues every copy; setmaxnreg
//     gives its registers to the others), warpgroups 1 and 2 are consumers of 64 x 256 each. Stage s
//     has two mbarriers: full[s] (the producer's expect_tx, then TMA's bytes) and empty[s] (each of
//     the 8 consumer warps arrives when its wgmma have read the stage). Each side keeps a phase bit
//     that flips every time it wraps around the stages: a wait names the parity it expects.
//   - Persistent: a block an SM walks tiles (blockIdx.x, + gridDim.x, ...) in rung 3's L2-friendly
//     order; the producer runs ahead into the next tile while the consumers finish this one.
//   - The epilogue: each consumer warp finishes its 16 x 256 sums (16 x 128 for C f32) (bias, activation, one rounding,
//     gemm_common.cuh), stages them in shared memory as 128-byte swizzled rows, and one lane stores
//     them with TMA (clipped to C). Those staging writes are ordinary stores that TMA reads through
//     the async proxy: fence.proxy.async between the two, and the previous tile's stores must have
//     read the staging (bulk wait) before it is written again.
// Tiles 128 x 256 x 64 in 3 stages (C f16/bf16: 144 KiB of stages + 64 KiB of staging), 128 x 128 x
// 64 in 4 for C f32 (128 + 64 KiB). Operands: A K-major ([m][k]) or M-major ([k][m], transpose_a),
// B N-major ([k][n]) or K-major ([n][k], transpose_b): TMA boxes of 128 bytes a row (K-major: a
// row per m or n, 128 or 256 of them; MN-major: 64 rows of k, one box per 64 of m or n) and wgmma's
// transpose bits cover all four layouts.
// Tests: build/tests/test_cuda_gemm (on the emulator, CI), test_cuda_wgmma (the instructions);
// scripts/check-sass requires HGMMA here. Benchmark: build/bench/cuda_gemm.
#include "kernels/cuda/gemm_wgmma.h"

#include <array>

#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/mma_layout.h"
#include "kernels/cuda/tma_maps.h"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/wgmma_layout.h"
#include "kernels/cuda/wgmma_pipeline.cuh"

namespace mg::kernels::cuda::wgmma_gemm {

namespace {

using namespace wgmma_pipeline;
constexpr int kTileK = 64;  // 128 bytes of 16-bit k: one swizzled row
constexpr int kRowBytes = wgmma_layout::kRowBytes;
constexpr int kBlockBytes = 64 * kRowBytes;  // a 64 x 64 box of 16-bit elements (MN-major tiles' mn block)
constexpr int kStepsPerTile = kTileK / 16;  // wgmma k16 instructions a k step

template <class Out>
struct Config {
  static constexpr int kTileN = sizeof(Out) == 4 ? 128 : 256;
  static constexpr int kStages = sizeof(Out) == 4 ? 4 : 3;
  static constexpr int kStageA = kTileM * kRowBytes, kStageB = kTileN * kRowBytes;
  static constexpr int kStageBytes = kStageA + kStageB;
  // The epilogue's staging: each consumer warp's 16 rows, in chunks 128 bytes wide.
  static constexpr int kChunkColumns = kRowBytes / static_cast<int>(sizeof(Out));
  static constexpr int kWarpStaging = wgmma_pipeline::kStagingBytes<Out, kTileN>;
  static constexpr int kStagingBytes = kConsumerWarps * kWarpStaging;
  static constexpr int kBarrierOffset = kStages * kStageBytes + kStagingBytes;
  // + the mbarriers, + 1 KiB to align the start to the 128-byte swizzle's period.
  static constexpr int kSharedBytes = kBarrierOffset + 2 * kStages * 8 + 1024;
};

template <class In, class Out>
struct Params {
  CUtensorMap a, b, c;
  GemmArgs<In, Out> args;
  int tiles_m, tiles_n, tiles, k_steps;
};

// The tile `t` of the persistent walk: batch entry, then rung 3's order within the entry.
struct TilePlace {
  int entry, m0, n0;
};
template <class In, class Out>
__device__ TilePlace place(const Params<In, Out>& p, int t, int tile_n) {
  const int per_entry = p.tiles_m * p.tiles_n;
  const mma_layout::Cell cell = mma_layout::block_tile(t % per_entry, p.tiles_m, p.tiles_n);
  return {t / per_entry, cell.row * kTileM, cell.column * tile_n};
}

template <class In, class Out, bool kTransposeA, bool kTransposeB>
__global__ void __launch_bounds__(kThreads, 1) gemm_wgmma_kernel(const __grid_constant__ Params<In, Out> p) {
  using C = Config<Out>;
  MG_DYNAMIC_SHARED(unsigned char, raw);
  // The tiles start on the 128-byte swizzle's period (1024 bytes) of the shared window.
  unsigned char* const shared = hopper::align_to_swizzle_period(raw);
  const std::uint32_t base = hopper::window_address(shared);
  auto* const full = reinterpret_cast<std::uint64_t*>(shared + C::kBarrierOffset);
  std::uint64_t* const empty = full + C::kStages;

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  init_barriers(full, empty, C::kStages);
  __syncthreads();

  if (warpgroup == 0) {  // the producer
    hopper::set_max_registers<kProducerRegisters, false>();
    if (threadIdx.x != 0) return;
    Ring<C::kStages> ring;
    for (int t = static_cast<int>(blockIdx.x); t < p.tiles; t += static_cast<int>(gridDim.x)) {
      const TilePlace at = place(p, t, C::kTileN);
      for (int step = 0; step < p.k_steps; ++step) {
        const int stage = ring.stage;
        hopper::mbarrier_wait(&empty[stage], ring.phase ^ 1);  // passes at once on the first round
        hopper::mbarrier_arrive_expect_tx(&full[stage], C::kStageBytes);
        unsigned char* const a = shared + stage * C::kStageBytes;
        unsigned char* const b = a + C::kStageA;
        const int k0 = step * kTileK;
        if constexpr (kTransposeA) {  // [k][m]: two 64-wide blocks of m
          for (int i = 0; i < kTileM / 64; ++i)
            hopper::tma_load(a + i * kBlockBytes, &p.a, at.m0 + 64 * i, k0, at.entry, &full[stage]);
        } else {
          hopper::tma_load(a, &p.a, k0, at.m0, at.entry, &full[stage]);
        }
        if constexpr (kTransposeB) {
          hopper::tma_load(b, &p.b, k0, at.n0, at.entry, &full[stage]);
        } else {  // [k][n]: 64-wide blocks of n
          for (int i = 0; i < C::kTileN / 64; ++i)
            hopper::tma_load(b + i * kBlockBytes, &p.b, at.n0 + 64 * i, k0, at.entry, &full[stage]);
        }
        ring.advance();
      }
    }
    return;
  }

  // A consumer: rows 64 (warpgroup - 1) to 64 warpgroup - 1 of each tile.
  hopper::set_max_registers<kConsumerRegisters, true>();
  const int consumer = warpgroup - 1;
  const int warp = static_cast<int>(threadIdx.x) / 32 % 4, lane = static_cast<int>(threadIdx.x) % 32;
  unsigned char* const staging = shared + C::kStages * C::kStageBytes + (4 * consumer + warp) * C::kWarpStaging;
  Ring<C::kStages> ring;
  float sums[C::kTileN / 2];
  for (int t = static_cast<int>(blockIdx.x); t < p.tiles; t += static_cast<int>(gridDim.x)) {
    const TilePlace at = place(p, t, C::kTileN);
    int previous = -1;  // the stage of the group still in flight
    for (int step = 0; step < p.k_steps; ++step) {
      const int stage = ring.stage;
      hopper::mbarrier_wait(&full[stage], ring.phase);
      const std::uint32_t a = base + static_cast<std::uint32_t>(stage * C::kStageBytes + consumer * 64 * kRowBytes);
      const std::uint32_t b = base + static_cast<std::uint32_t>(stage * C::kStageBytes + C::kStageA);
      wgmma::fence_operands(sums);
      wgmma::fence();
#pragma unroll
      for (int k = 0; k < kStepsPerTile; ++k) {
        const std::uint64_t desc_a = wgmma_layout::encode(
            wgmma_layout::tile_descriptor(a, !kTransposeA, k, kBlockBytes));
        const std::uint64_t desc_b = wgmma_layout::encode(
            wgmma_layout::tile_descriptor(b, kTransposeB, k, kBlockBytes));
        wgmma::mma<In, C::kTileN, kTransposeA, !kTransposeB>(sums, desc_a, desc_b, step > 0 || k > 0);
      }
      wgmma::commit();
      // One group stays in flight: this step's runs while the previous step's stage is handed back.
      wgmma::wait<1>();
      wgmma::fence_operands(sums);
      if (previous >= 0) release(&empty[previous], lane);  // this warp's reads of it are done
      previous = stage;
      ring.advance();
    }
    wgmma::wait<0>();
    wgmma::fence_operands(sums);
    if (previous >= 0) release(&empty[previous], lane);
    if (p.k_steps == 0) {
#pragma unroll
      for (float& s : sums) s = 0.0f;
    }

    // The epilogue (wgmma_pipeline.cuh): bias, activation, one rounding, stored by TMA.
    store_rows<Out, C::kTileN>(sums, staging, &p.c, at.m0 + 64 * consumer + 16 * warp, at.n0, at.entry, p.args.n, lane,
                               [&](float sum, int column) { return p.args.finish(sum, column); });
  }
  if (lane == 0) hopper::bulk_wait_read<0>();  // the staging must outlive the stores' reads
}

// ---- the host side ----------------------------------------------------------------------------------

template <class In, class Out, bool kTransposeA, bool kTransposeB>
void launch_layout(const GemmArgs<In, Out>& args, cudaStream_t stream) {
  using C = Config<Out>;
  Params<In, Out> p{};
  constexpr const char* kWhat = "CUDA kernel gemm (rung 4)";
  p.a = kTransposeA ? tma::matrix_map(args.a, args.batch, args.k, args.m, kTileK, 64, kWhat)
                    : tma::matrix_map(args.a, args.batch, args.m, args.k, kTileM, kTileK, kWhat);
  p.b = kTransposeB ? tma::matrix_map(args.b, args.batch, args.n, args.k, C::kTileN, kTileK, kWhat)
                    : tma::matrix_map(args.b, args.batch, args.k, args.n, kTileK, 64, kWhat);
  p.c = tma::matrix_map(args.c, args.batch, args.m, args.n, wgmma_layout::kStagingRows, C::kChunkColumns, kWhat);
  p.args = args;
  p.tiles_m = static_cast<int>((args.m + kTileM - 1) / kTileM);
  p.tiles_n = static_cast<int>((args.n + C::kTileN - 1) / C::kTileN);
  const std::int64_t tiles = std::int64_t{p.tiles_m} * p.tiles_n * args.batch;
  MG_CHECK(tiles <= INT_MAX, "CUDA kernel gemm (rung 4): {} tiles exceed the kernel's int count", tiles);
  p.tiles = static_cast<int>(tiles);
  p.k_steps = static_cast<int>((args.k + kTileK - 1) / kTileK);
  int multiprocessors = 0, device = 0;
  MG_CUDA_CHECK(cudaGetDevice(&device));
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
  static OncePerDevice opted_in;
  opted_in([&](int) {
    MG_CUDA_CHECK(cudaFuncSetAttribute(gemm_wgmma_kernel<In, Out, kTransposeA, kTransposeB>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSharedBytes));
  });
  const int blocks = static_cast<int>(std::min<std::int64_t>(tiles, multiprocessors));
  MG_LAUNCH((gemm_wgmma_kernel<In, Out, kTransposeA, kTransposeB>), blocks, kThreads, C::kSharedBytes, stream)(p);
  MG_CUDA_LAUNCHED();
}

}  // namespace

bool available() {
  static OncePerDevice asked;
  static std::array<bool, OncePerDevice::kMaxDevices> runs{};
  const int device = asked([](int index) {
    int major = 0, minor = 0;
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index));
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index));
    cudaFuncAttributes attributes{};
    const bool image = cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(
                                                              &gemm_wgmma_kernel<__half, __half, false, false>)) ==
                       cudaSuccess;
    (void)cudaGetLastError();  // no image is an answer, not an error to keep
    runs[static_cast<std::size_t>(index)] = major == 9 && minor == 0 && image;
  });
  return runs[static_cast<std::size_t>(device)];
}

bool takes(const Tensor& a, const Tensor& b, DType out, const void* c, const GemmShape& s) {
  if (a.dtype() != DType::F16 && a.dtype() != DType::BF16) return false;
  if (gemm_accumulation() == Accumulation::F16 || s.k == 0) return false;  // k = 0: no tensor map of A
  const std::int64_t out_bytes = out == DType::F32 ? 4 : 2;
  return rows_aligned<__half>(a, b, s) && (s.n * out_bytes) % 16 == 0 && reinterpret_cast<std::uintptr_t>(c) % 16 == 0;
}

template <class In, class Out>
void launch(const GemmArgs<In, Out>& args, const GemmShape& shape, cudaStream_t stream) {
  MG_CHECK(args.partial == nullptr, "CUDA kernel gemm (rung 4): k is never split on this rung");
  with_layout(shape, [&]<bool kTransposeA, bool kTransposeB>() {
    launch_layout<In, Out, kTransposeA, kTransposeB>(args, stream);
  });
}

std::string name(bool f32_out) {
  return f32_out
             ? fmt::format("wgmma {}x{}x{}, {} stages", kTileM, Config<float>::kTileN, kTileK, Config<float>::kStages)
             : fmt::format("wgmma {}x{}x{}, {} stages", kTileM, Config<__half>::kTileN, kTileK,
                           Config<__half>::kStages);
}
int tile_n(bool f32_out) { return f32_out ? Config<float>::kTileN : Config<__half>::kTileN; }

template void launch(const GemmArgs<__half, __half>&, const GemmShape&, cudaStream_t);
template void launch(const GemmArgs<__half, float>&, const GemmShape&, cudaStream_t);
template void launch(const GemmArgs<bf16, bf16>&, const GemmShape&, cudaStream_t);
template void launch(const GemmArgs<bf16, float>&, const GemmShape&, cudaStream_t);

}  // namespace mg::kernels::cuda::wgmma_gemm
