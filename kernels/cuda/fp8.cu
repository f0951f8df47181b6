// FP8 on a GPU (contract: kernels/fp8.h; reference: kernels/cpu/fp8.cpp): the amax of each block, the
// scales it gives, and quantisation into E4M3/E5M2 codes and back.
//
// Quantisation is bit-identical to the CPU's: the same f32 product x * scale, then core/fp8.h's encode
// (saturating), compiled for the device. The amax is a maximum, exact in any order: each block's is
// the largest |x| as f32 bits, an unsigned maximum (for non-negative floats the order of the bit
// patterns is the order of the values, and a NaN's bits are above inf's, so a NaN wins as on the CPU).
//   amax        one warp per row of a block (row r, block column): lanes stride the columns, the warp
//               takes its maximum with xor shuffles, lane 0 folds it into the block's with atomicMax
//   quantize    32 x 32 tiles, one warp a tile row: the codes, and the column-wise copy (x^T's codes)
//               through shared memory; the first threads also write scale_inv = 1 / scale
//   scales      one thread per block's amax (kernels/fp8_scale.h); delayed scaling's history, one thread
//   dequantize  one thread per element: decode(code) * scale_inv
//
// The FP8 GEMM is gemm_fp8.cu.
//
// Tests: build/tests/test_cuda_fp8.
#include <algorithm>

#include "core/convert.h"
#include "core/factory.h"
#include "core/fp8.h"
#include "kernels/cuda/common.cuh"
#include "kernels/fp8.h"

namespace mg::kernels::cuda {

namespace {

constexpr int kThreads = 256;  // the elementwise kernels

// A 2-D tensor cut into scale blocks (kernels/cpu/fp8.cpp's Grid): extents of 0 made whole.
struct BlockGrid {
  std::int64_t rows, cols, block_rows, block_cols, scale_cols;
  __device__ std::int64_t block(std::int64_t r, std::int64_t c) const {
    return r / block_rows * scale_cols + c / block_cols;
  }
};

BlockGrid block_grid(const Shape& shape, Fp8Blocks blocks) {
  const std::int64_t rows = shape[0], cols = shape[1];
  return {rows, cols, blocks.rows > 0 ? blocks.rows : std::max<std::int64_t>(rows, 1),
          blocks.cols > 0 ? blocks.cols : std::max<std::int64_t>(cols, 1), fp8_block_count(cols, blocks.cols)};
}

// ---- amax, quantize, dequantize ------------------------------------------------------------------------

template <class In>
__global__ void __launch_bounds__(kThreads) amax_kernel(const In* x, BlockGrid g, unsigned* amax_bits) {
  const std::int64_t block_columns = (g.cols + g.block_cols - 1) / g.block_cols;
  const std::int64_t segments = g.rows * block_columns;  // (row, block column) pairs
  const int lane = threadIdx.x % 32;
  const std::int64_t warp = first_index() / 32, warps = grid_stride() / 32;
  for (std::int64_t s = warp; s < segments; s += warps) {  // the same s for the whole warp
    const std::int64_t r = s / block_columns, c0 = s % block_columns * g.block_cols;
    const std::int64_t c1 = min(g.cols, c0 + g.block_cols);
    unsigned m = 0;  // |x| as bits: +0
    for (std::int64_t c = c0 + lane; c < c1; c += 32)
      m = max(m, static_cast<unsigned>(__float_as_int(to_float(x[r * g.cols + c]))) & 0x7FFFFFFFu);
    for (int offset = 16; offset > 0; offset /= 2) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, offset));
    if (lane == 0) atomicMax(&amax_bits[g.block(r, c0)], m);
  }
}

// Quantisation by 32 x 32 tiles (one warp a row of the tile, 8 rows at a time): the codes in x's
// order, and the column-wise copy read back down the tile's columns from shared memory, so that both
// are written row by row (whole 32-byte sectors).
constexpr int kTile = 32;

template <class In>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const In* x, const float* scale, BlockGrid g, DType format, std::uint8_t* codes,
                    std::uint8_t* codes_t, float* scale_inv, std::int64_t scales) {
  MG_SHARED(std::uint8_t[kTile][kTile + 4], tile);  // + 4: a column's bytes spread over the banks
  for (std::int64_t i = first_index(); i < scales; i += grid_stride()) scale_inv[i] = 1.0f / scale[i];  // IEEE division
  const int lane = threadIdx.x % 32, row_step = kThreads / 32;
  const std::int64_t tile_cols = (g.cols + kTile - 1) / kTile, tiles = (g.rows + kTile - 1) / kTile * tile_cols;
  for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const std::int64_t r0 = t / tile_cols * kTile, c0 = t % tile_cols * kTile;
    for (int i = static_cast<int>(threadIdx.x) / 32; i < kTile; i += row_step) {
      const std::int64_t r = r0 + i, c = c0 + lane;
      if (r >= g.rows || c >= g.cols) continue;
      const float scaled = __fmul_rn(to_float(x[r * g.cols + c]), scale[g.block(r, c)]);
      const std::uint8_t code = fp8::encode(scaled, format, fp8::Overflow::Saturate);
      if (codes) codes[r * g.cols + c] = code;
      tile[i][lane] = code;
    }
    if (!codes_t) continue;  // the same for the whole block
    __syncthreads();
    for (int i = static_cast<int>(threadIdx.x) / 32; i < kTile; i += row_step) {
      const std::int64_t c = c0 + i, r = r0 + lane;  // row c of x^T
      if (r < g.rows && c < g.cols) codes_t[c * g.rows + r] = tile[lane][i];
    }
    __syncthreads();  // the tile is rewritten next round
  }
}

// Scales from amaxes (kernels/fp8_scale.h), one thread each; and delayed scaling's bookkeeping, one
// thread for the role's history row.
__global__ void __launch_bounds__(kThreads)
    scales_kernel(const float* amax, Fp8ScaleRule rule, float* scale, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) scale[i] = fp8_scale(amax[i], rule, 1.0f);
}

__global__ void record_amax_kernel(float* row, std::int64_t len, const float* amax, bool most_recent, Fp8ScaleRule rule,
                                   float* scale) {
  fp8_record_amax(row, len, *amax, most_recent, rule, scale);
}

__global__ void __launch_bounds__(kThreads)
    dequantize_kernel(const std::uint8_t* codes, const float* scale_inv, BlockGrid g, DType format, float* out) {
  for (std::int64_t i = first_index(); i < g.rows * g.cols; i += grid_stride())
    out[i] = __fmul_rn(fp8::decode(codes[i], format), scale_inv[g.block(i / g.cols, i % g.cols)]);
}

}  // namespace

Tensor fp8_block_amax(const Tensor& x, Fp8Blocks blocks) {
  Tensor amax = zeros(fp8_scale_shape(x.shape(), blocks), {.dtype = DType::F32, .device = x.device()});
  if (x.numel() == 0) return amax;
  mg::cuda::DeviceGuard guard(x.device().index);
  const BlockGrid g = block_grid(x.shape(), blocks);
  const std::int64_t segments = g.rows * fp8_block_count(g.cols, g.block_cols);
  visit_device_floating(x.dtype(), "fp8_block_amax", [&](auto in) {
    using In = decltype(in);
    MG_LAUNCH((amax_kernel<In>), blocks_for(segments * 32, kThreads), kThreads, 0, stream_of(x))
    (device_ptr<In>(x), g, device_ptr<unsigned>(amax));
    MG_CUDA_LAUNCHED();
  });
  return amax;
}

void fp8_quantize(const Tensor& x, const Tensor& scale, Fp8Blocks blocks, Tensor& codes, Tensor& codes_t,
                  Tensor& scale_inv) {
  mg::cuda::DeviceGuard guard(x.device().index);
  const BlockGrid g = block_grid(x.shape(), blocks);
  const std::int64_t tiles = fp8_block_count(g.rows, kTile) * fp8_block_count(g.cols, kTile);
  const auto code_ptr = [](Tensor& t) { return t.defined() ? static_cast<std::uint8_t*>(t.data_ptr()) : nullptr; };
  visit_device_floating(x.dtype(), "fp8_quantize", [&](auto in) {
    using In = decltype(in);
    MG_LAUNCH((quantize_kernel<In>), blocks_for(std::max(tiles, scale_inv.numel()) * kThreads, kThreads), kThreads, 0,
              stream_of(x))
    (device_ptr<In>(x), device_ptr<float>(scale), g, (codes.defined() ? codes : codes_t).dtype(), code_ptr(codes),
     code_ptr(codes_t), device_ptr<float>(scale_inv), scale_inv.numel());
    MG_CUDA_LAUNCHED();
  });
}

void fp8_scales(const Tensor& amax, const Fp8ScaleRule& rule, Tensor& scale) {
  if (amax.numel() == 0) return;
  mg::cuda::DeviceGuard guard(amax.device().index);
  MG_LAUNCH(scales_kernel, blocks_for(amax.numel(), kThreads), kThreads, 0, stream_of(amax))
  (device_ptr<float>(amax), rule, device_ptr<float>(scale), amax.numel());
  MG_CUDA_LAUNCHED();
}

void fp8_record_amax(Tensor& amax_history, Tensor& scale, int role, const Tensor& amax, const Fp8ScaleRule& rule,
                     bool most_recent) {
  mg::cuda::DeviceGuard guard(amax.device().index);
  const std::int64_t len = amax_history.size(1);
  MG_LAUNCH(record_amax_kernel, 1, 1, 0, stream_of(amax))
  (device_ptr<float>(amax_history) + role * len, len, device_ptr<float>(amax), most_recent, rule,
   device_ptr<float>(scale) + role);
  MG_CUDA_LAUNCHED();
}

void fp8_dequantize(const Fp8Tensor& x, Tensor& out) {
  if (x.codes.numel() == 0) return;
  mg::cuda::DeviceGuard guard(out.device().index);
  MG_LAUNCH(dequantize_kernel, blocks_for(x.codes.numel(), kThreads), kThreads, 0, stream_of(out))
  (static_cast<const std::uint8_t*>(x.codes.data_ptr()), device_ptr<float>(x.scale_inv),
   block_grid(x.codes.shape(), x.blocks), x.codes.dtype(), device_ptr<float>(out));
  MG_CUDA_LAUNCHED();
}

}  // namespace mg::kernels::cuda
