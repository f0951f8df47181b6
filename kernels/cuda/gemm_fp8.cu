// The FP8 GEMM on a GPU (contract: kernels/fp8.h; reference: kernels/cpu/gemm_fp8.cpp), on the Tensor
// Cores' FP8 instruction (mma_fp8.cuh), from the codes and scales fp8.cu makes.
//
// A GEMM that asks for wgmma's accumulator (kernels/fp8.h's kHopperWgmmaFp8Accumulator) on an H100 or
// H200 runs on rung 4 (gemm_fp8_wgmma.cu: Hopper's FP8 wgmma, QGMMA, with DeepSeek-V3's promotion), or
// is refused where rung 4 does not take it (Plan, below). Otherwise:
// K-major operands (fp8_linear's GEMMs in every recipe) run on rung 3 (gemm_fp8_mma.cu: cp.async,
// ldmatrix, the same sums) where it takes them (gemm_fp8_mma.h says what it takes); the rest on rung
// 1, the simple version here (one warp per 16x8 tile of C, fragments loaded straight from global
// memory, no shared memory; the operands are read once per warp that needs them):
//   grid (ceil(m / 32), ceil(n / 16)), 128 threads: 4 warps, 2 x 2 over the block's 32x16 tile of C.
//   Each warp walks k as the CPU's Limited model does (kernels/cpu/gemm_fp8.cpp, limited_chunk_sum):
//     for each chunk [k0, k1) of k over which both operands' scales are constant:
//       running = promoted = 0                           (the lane's 4 elements of the tile)
//       for each group [g, min(g + 32, k1)):             one mma.sync, codes past k1 loaded as 0
//         running = mma(A[:, g..], B[g.., :], running)   the Tensor Core's own, limited accumulator
//         if (promote_every and the chunk's products so far are a multiple of it):
//           promoted += running, running = 0            promotion into f32 registers (DeepSeek-V3)
//       acc = fmaf(promoted + running, scale_a * scale_b, acc)
//   then the epilogue (bias, relu/gelu: kernels/pointwise.h's functors) and one rounding into C.
//   The scales are applied once per chunk, to the sum of its promoted parts, because that is what the
//   CPU does: an fmaf at every promotion would round in another order, and bit equality with the CPU
//   is what the tests hold. (GELU's erfcf is the device's: on a GPU a few ulps from glibc's.)
//   The operands are stored either way (GemmShape's transposes): each lane reads its codes where they
//   are, so a transpose costs nothing but uncoalesced byte loads. Codes outside the matrices (rows
//   past m, columns past n, k past the chunk's end) are loaded as 0 and add nothing.
//
// The accumulator. The CPU's F32 contract (every product added in f32) was taken not to be something
// FP8 Tensor Cores can give. What one mma.sync keeps depends on the GPU (kernels/fp8.h,
// mma_sync_fp8_accumulator): on Ada (sm_89) the FP8 Tensor Cores, modelled with 14 significant bits
// (assumed); on Hopper the instruction becomes f16 conversions and f32 HMMA, and an H200 summed in f32.
// The emulator computes the model of the compute capability it reports (mma_fp8.cuh). On the GPU:
//   F32      = promotion after every instruction: each mma starts from 0 and its 32 products go to the
//              f32 sum; equal to the CPU's Limited model with the device's accumulator and
//              promote_every = 32, not to its F32 microkernel (a few f32 ulps apart: the test holds both);
//   Limited  = the instruction chained through promote_every / 32 mma.sync before each promotion: on
//              the emulator equal bit for bit to the CPU's Limited model with the same promote_every.
// The mantissa bits, rounding and group of a Limited accumulator are the device's; a request for
// others is refused. So is a GPU older than sm_89.
//
// Tests: build/tests/test_cuda_fp8_gemm.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <climits>

#include "core/convert.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/gemm_fp8_mma.h"
#include "kernels/cuda/gemm_fp8_wgmma.h"
#include "kernels/cuda/gemm_wgmma.h"
#include "kernels/cuda/mma_fp8.cuh"
#include "kernels/fp8.h"
#include "kernels/pointwise.h"

namespace mg::kernels::cuda {

namespace {

constexpr int kGemmThreads = 128;  // 4 warps
constexpr int kTileM = 32, kTileN = 16;  // C per block: 2 x 2 warps of 16 x 8
constexpr int kGroup = 32;  // products per mma.sync: m16n8k32's k

// One operand as the GEMM walks it: element (line, k) of op(X), [lines, k] (lines: A's rows i or B's
// columns j), stored [lines, k] or, k_major, [k, lines]; and the scale of its block. The same numbers
// as kernels/cpu/gemm_fp8.cpp's CodeOperand.
struct Fp8Operand {
  const std::uint8_t* codes;
  const float* scale_inv;
  std::int64_t line_stride, k_stride;
  std::int64_t block_lines, block_k, scale_stride_line, scale_stride_k;
  __device__ std::uint8_t code(int line, int k) const { return codes[line * line_stride + k * k_stride]; }
  __device__ float scale(int line, int k) const {
    return scale_inv[line / block_lines * scale_stride_line + k / block_k * scale_stride_k];
  }
};

Fp8Operand fp8_operand(const Fp8Tensor& x, bool k_major, std::int64_t lines, std::int64_t k) {
  const std::int64_t stored_cols = k_major ? lines : k;
  const std::int64_t block_rows = x.blocks.rows > 0 ? x.blocks.rows : std::max<std::int64_t>(1, k_major ? k : lines);
  const std::int64_t block_cols = x.blocks.cols > 0 ? x.blocks.cols : std::max<std::int64_t>(1, stored_cols);
  const std::int64_t scale_cols = fp8_block_count(stored_cols, x.blocks.cols);
  return {static_cast<const std::uint8_t*>(x.codes.data_ptr()),
          device_ptr<float>(x.scale_inv),
          k_major ? 1 : k,
          k_major ? lines : 1,
          k_major ? block_cols : block_rows,
          k_major ? block_rows : block_cols,
          k_major ? 1 : scale_cols,
          k_major ? scale_cols : 1};
}

template <class Out>
struct Fp8GemmArgs {
  Fp8Operand a, b;  // op(A) [m, k], op(B)^T [n, k]
  Out* c;  // [m, n]
  int m, n, k;
  int chunk;  // k of constant scales: every chunk starts at a multiple of it
  int promote_every;  // products between promotions: 32 for F32, 0 for never
  const float* bias;  // [n] in f32, or null
  Activation activation;
};

// The lane's codes of one instruction's A: rows row0 + 0..15 of op(A), k = g + 0..31, 0 where k >= k_end.
__device__ __forceinline__ Fp8FragmentA load_a(const Fp8Operand& a, int lane, int row0, int m, int g, int k_end) {
  Fp8FragmentA f;
  for (int reg = 0; reg < 4; ++reg) {
    const int row = row0 + fp8_a_row(lane, reg);
    std::uint32_t word = 0;
    for (int byte = 0; byte < 4; ++byte) {
      const int k = g + fp8_a_k(lane, reg, byte);
      if (row < m && k < k_end) word |= static_cast<std::uint32_t>(a.code(row, k)) << (8 * byte);
    }
    f.x[reg] = word;
  }
  return f;
}

// The lane's codes of one instruction's B: columns col0 + 0..7 of op(B), k = g + 0..31.
__device__ __forceinline__ Fp8FragmentB load_b(const Fp8Operand& b, int lane, int col0, int n, int g, int k_end) {
  Fp8FragmentB f;
  const int col = col0 + fp8_b_column(lane);
  for (int reg = 0; reg < 2; ++reg) {
    std::uint32_t word = 0;
    for (int byte = 0; byte < 4; ++byte) {
      const int k = g + fp8_b_k(lane, reg, byte);
      if (col < n && k < k_end) word |= static_cast<std::uint32_t>(b.code(col, k)) << (8 * byte);
    }
    f.x[reg] = word;
  }
  return f;
}

template <DType kA, DType kB, class Out>
__global__ void __launch_bounds__(kGemmThreads) fp8_gemm_kernel(Fp8GemmArgs<Out> args) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row0 = blockIdx.x * kTileM + warp / 2 * 16, col0 = blockIdx.y * kTileN + warp % 2 * 8;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // the lane's four elements of C, in f32
  for (int k0 = 0; k0 < args.k; k0 += args.chunk) {
    const int k1 = min(args.k, k0 + args.chunk);
    Fp8FragmentC running = {}, promoted = {};
    for (int g = k0; g < k1; g += kGroup) {
      const Fp8FragmentA a = load_a(args.a, lane, row0, args.m, g, k1);
      const Fp8FragmentB b = load_b(args.b, lane, col0, args.n, g, k1);
      mma_fp8<kA, kB>(running, a, b, running);
      const int done = min(k1, g + kGroup) - k0;  // the chunk's products so far
      if (args.promote_every > 0 && done % args.promote_every == 0)
        for (int e = 0; e < 4; ++e) promoted.x[e] += running.x[e], running.x[e] = 0.0f;
    }
    for (int e = 0; e < 4; ++e) {
      const int row = row0 + fp8_c_row(lane, e), col = col0 + fp8_c_column(lane, e);
      if (row >= args.m || col >= args.n) continue;  // no scale there; never stored
      const float scale = __fmul_rn(args.a.scale(row, k0), args.b.scale(col, k0));
      acc[e] = fmaf(promoted.x[e] + running.x[e], scale, acc[e]);
    }
  }
  // The epilogue, as kernels/cpu/gemm_fp8.cpp's store_row: + bias (+0 without one, as there), activation,
  // one rounding into C.
  for (int e = 0; e < 4; ++e) {
    const int row = row0 + fp8_c_row(lane, e), col = col0 + fp8_c_column(lane, e);
    if (row >= args.m || col >= args.n) continue;
    float v = acc[e] + (args.bias ? args.bias[col] : 0.0f);
    if (args.activation == Activation::Relu) v = functors::Relu{}(v);
    if (args.activation == Activation::Gelu) v = functors::Gelu{}(v);
    args.c[static_cast<std::int64_t>(row) * args.n + col] = from_float<Out>(v);
  }
}

template <DType kA, DType kB, class Out>
void launch_gemm(const Fp8GemmArgs<Out>& args, cudaStream_t stream) {
  const dim3 grid((args.m + kTileM - 1) / kTileM, (args.n + kTileN - 1) / kTileN);
  MG_LAUNCH((fp8_gemm_kernel<kA, kB, Out>), grid, kGemmThreads, 0, stream)(args);
  MG_CUDA_LAUNCHED();
}

template <class Out>
void launch_gemm(DType fa, DType fb, const Fp8GemmArgs<Out>& args, cudaStream_t stream) {
  with_fp8_formats(fa, fb, [&]<DType kA, DType kB>() { launch_gemm<kA, kB>(args, stream); });
}

// FP8 mma.sync needs sm_89 (Ada) or later: the current device's compute capability (asked once),
// after checking it is at least that.
int require_fp8_tensor_cores(const Device& device) {
  static OncePerDevice asked;
  static std::array<int, OncePerDevice::kMaxDevices> capability{};
  const int index = asked([](int i) {
    int major = 0, minor = 0;
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, i));
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, i));
    capability[static_cast<std::size_t>(i)] = major * 10 + minor;
  });
  const int cc = capability[static_cast<std::size_t>(index)];
  if (cc >= 89) return cc;
  cudaDeviceProp properties{};
  MG_CUDA_CHECK(cudaGetDeviceProperties(&properties, index));
  throw Error(fmt::format("kernels::fp8_gemm: {} ({}) has compute capability {}.{}; the FP8 GEMM runs on FP8 Tensor "
                          "Cores (mma.sync with e4m3/e5m2 operands), which need sm_89 or later (Ada, Hopper). "
                          "Dequantize the operands (kernels::fp8_dequantize) and use kernels::gemm on this GPU",
                          device, properties.name, cc / 10, cc % 10));
}

// Whether two Limited accumulators are the same hardware's (all but promote_every, the kernel's choice).
bool same_model(const Fp8Accumulator& x, const Fp8Accumulator& y) {
  return x.mantissa_bits == y.mantissa_bits && x.rounding == y.rounding && x.group == y.group;
}

// Whether a GEMM asks for wgmma's own accumulator on a device whose FP8 wgmma runs (rung 4:
// gemm_fp8_wgmma.cu; compute capability exactly 9.0 and the sm_90a image in the build). On Ada the same
// bits are mma.sync's (kAdaFp8Accumulator), and rungs 1 and 3 run them. Operands still on the CPU (a
// benchmark or a test asking for the kernel's name) are asked about the current device.
bool asks_for_wgmma(const Fp8Accumulator& accumulator, const Device& operands) {
  if (!accumulator.limited || !same_model(accumulator, kHopperWgmmaFp8Accumulator)) return false;
  int current = 0;
  MG_CUDA_CHECK(cudaGetDevice(&current));
  const Device device = operands.is_cuda() ? operands : Device::cuda(current);
  mg::cuda::DeviceGuard guard(device.index);
  return require_fp8_tensor_cores(device) == 90 && wgmma_gemm::available();
}

// How a GEMM runs, worked out once: both operands as the GEMM walks them, the k of constant scales of
// both (kernels::fp8_gemm checked that their blocks nest; at least 1), the products between promotions
// (rung 1's promote_every: 32 for F32), and the rung: 4 (gemm_fp8_wgmma.cu) for wgmma's accumulator,
// where it takes the GEMM (fp8_gemm refuses the rest); otherwise 3 (gemm_fp8_mma.cu) for K-major
// operands with the scale chunks and promotions its kernels compile (one chunk, MX's 32, DeepSeek-V3's
// 128), and rung 1 above for the rest.
struct Plan {
  Fp8Operand a, b;
  std::int64_t chunk;
  int promote_every;
  bool wgmma, rung4, rung3;
  Plan(const Fp8Tensor& ta, const Fp8Tensor& tb, const GemmShape& s, const Fp8Accumulator& accumulator, DType out,
       const void* c)
      : a(fp8_operand(ta, s.transpose_a, s.m, s.k)),
        b(fp8_operand(tb, !s.transpose_b, s.n, s.k)),
        chunk(std::max<std::int64_t>(1, std::min(a.block_k, b.block_k))),
        promote_every(accumulator.limited ? accumulator.promote_every : kGroup),
        wgmma(asks_for_wgmma(accumulator, ta.codes.device())),
        rung4(wgmma && ta.scale_inv.numel() <= INT_MAX && tb.scale_inv.numel() <= INT_MAX &&
              fp8_wgmma::takes(s.transpose_a, s.transpose_b, chunk, promote_every, s.m, s.n, s.k, ta.codes.data_ptr(),
                               tb.codes.data_ptr(), c, out)),
        rung3(!wgmma && ta.scale_inv.numel() <= INT_MAX &&
              tb.scale_inv.numel() <= INT_MAX &&  // rung 3's offsets are int
              fp8_pipelined::takes(s.transpose_a, s.transpose_b, std::min(chunk, s.k), promote_every, s.m, s.n, s.k,
                                   ta.codes.data_ptr(), tb.codes.data_ptr())) {}
};

// A K-major operand's scales as rung 3 reads them.
fp8_pipelined::Fp8ScaleGrid scale_grid(const Fp8Operand& x) {
  const auto narrow = [](std::int64_t v) { return static_cast<int>(std::min<std::int64_t>(v, INT_MAX)); };
  return {x.scale_inv, narrow(x.block_lines), narrow(x.block_k), narrow(x.scale_stride_line)};
}

}  // namespace

std::string fp8_gemm_kernel_name(const Fp8Tensor& a, const Fp8Tensor& b, const GemmShape& s,
                                 const Fp8Accumulator& accumulator, DType out) {
  const Plan plan(a, b, s, accumulator, out, nullptr);
  if (plan.rung4) return fp8_wgmma::kernel_name(plan.chunk, plan.promote_every, s.k, out);
  if (plan.wgmma) return "none: wgmma's accumulator, and rung 4 does not take this GEMM";
  if (plan.rung3) return fp8_pipelined::kernel_name(std::min(plan.chunk, s.k), plan.promote_every, s.k);
  return fmt::format("fp8 mma {}x{} from global memory (rung 1)", kTileM, kTileN);
}

Fp8Accumulator fp8_mma_accumulator(const Device& device) {
  mg::cuda::DeviceGuard guard(device.index);
  return mma_sync_fp8_accumulator(require_fp8_tensor_cores(device));
}

void fp8_gemm(const Fp8Tensor& a, const Fp8Tensor& b, Tensor& c, const GemmShape& s, const Fp8Accumulator& accumulator,
              const GemmEpilogue& epilogue) {
  MG_CHECK(s.m <= kMaxGemmDim && s.n <= kMaxGemmDim && s.k <= kMaxGemmDim,
           "kernels::fp8_gemm: m {}, n {}, k {} is beyond the GPU's FP8 GEMM (m, n and k below 2^31 - 256)", s.m, s.n,
           s.k);
  if (c.numel() == 0) return;
  mg::cuda::DeviceGuard guard(c.device().index);
  const Fp8Accumulator own = fp8_mma_accumulator(c.device());
  const auto rounding = [](Fp8Rounding r) { return r == Fp8Rounding::Truncate ? "truncation" : "to nearest"; };
  const Plan plan(a, b, s, accumulator, c.dtype(), c.data_ptr());
  if (accumulator.limited && !plan.wgmma)
    MG_CHECK(same_model(accumulator, own),
             "kernels::fp8_gemm: on {} the Limited accumulator is the Tensor Core's own ({} mantissa bits, {}, "
             "{} products a group: kernels::cuda::fp8_mma_accumulator; on compute capability 9.0 also wgmma's, "
             "kernels::kHopperWgmmaFp8Accumulator, where rung 4 is built: 90 among CMAKE_CUDA_ARCHITECTURES); only "
             "promote_every can be chosen, got mantissa_bits {}, {}, group {}",
             c.device(), own.mantissa_bits, rounding(own.rounding), own.group, accumulator.mantissa_bits,
             rounding(accumulator.rounding), accumulator.group);
  MG_CHECK(
      !plan.wgmma || plan.rung4,
      "kernels::fp8_gemm: the Limited accumulator asked for ({} mantissa bits, {}, groups of {}) is wgmma's on {}, "
      "which only rung 4 runs: K-major operands (A [m, k] not transposed, B [n, k] transposed), k > 0 and a "
      "multiple of 16, the codes, C and its rows on 16 bytes, scales per tensor or changing every 128 of k, "
      "promote_every 0 or a multiple of 128; got m {}, n {}, k {}, transpose_a {}, transpose_b {}, scales every {} "
      "of k, promote_every {}, C {}. For other GEMMs ask for mma.sync's accumulator "
      "(kernels::cuda::fp8_mma_accumulator), which rungs 1 and 3 run",
      accumulator.mantissa_bits, rounding(accumulator.rounding), accumulator.group, c.device(), s.m, s.n, s.k,
      s.transpose_a, s.transpose_b, std::min(plan.chunk, s.k), accumulator.promote_every, c.dtype());
  Tensor bias = epilogue.bias.defined() ? epilogue.bias.to(DType::F32) : Tensor();  // exact, on the device
  const Fp8Operand &oa = plan.a, &ob = plan.b;
  if (plan.rung4 || plan.rung3) {  // rungs 4 and 3 take the same arguments
    visit_device_floating(c.dtype(), "fp8_gemm", [&](auto out) {
      using Out = decltype(out);
      const fp8_pipelined::Fp8MmaArgs<Out> args{oa.codes,
                                                ob.codes,
                                                device_ptr<Out>(c),
                                                static_cast<int>(s.m),
                                                static_cast<int>(s.n),
                                                static_cast<int>(s.k),
                                                scale_grid(oa),
                                                scale_grid(ob),
                                                static_cast<int>(std::min(plan.chunk, s.k)),
                                                plan.promote_every,
                                                bias.defined() ? device_ptr<float>(bias) : nullptr,
                                                epilogue.activation};
      const DType fa = a.codes.dtype(), fb = b.codes.dtype();
      if (plan.rung4)
        fp8_wgmma::launch(fa, fb, args, stream_of(c));
      else
        fp8_pipelined::launch(fa, fb, args, stream_of(c));
    });
    return;
  }
  // Rung 1's grid has n / 16 blocks along y (rung 3's one dimension takes any n above).
  MG_CHECK((s.n + kTileN - 1) / kTileN <= 65535,
           "kernels::fp8_gemm: n = {} is beyond rung 1 of the FP8 GEMM (at most 65535 x {}), which takes this GEMM "
           "({}); K-major operands (A [m, k] and B [n, k], transpose_b) with k a multiple of 16 run on rung 3, which "
           "takes any n",
           s.n, kTileN, fp8_gemm_kernel_name(a, b, s, accumulator, c.dtype()));
  visit_device_floating(c.dtype(), "fp8_gemm", [&](auto out) {
    using Out = decltype(out);
    const Fp8GemmArgs<Out> args{oa,
                                ob,
                                device_ptr<Out>(c),
                                static_cast<int>(s.m),
                                static_cast<int>(s.n),
                                static_cast<int>(s.k),
                                static_cast<int>(std::min<std::int64_t>(plan.chunk, INT_MAX)),
                                plan.promote_every,
                                bias.defined() ? device_ptr<float>(bias) : nullptr,
                                epilogue.activation};
    launch_gemm(a.codes.dtype(), b.codes.dtype(), args, stream_of(c));
  });
}

}  // namespace mg::kernels::cuda
