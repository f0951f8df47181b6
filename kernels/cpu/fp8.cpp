// FP8 on the CPU: the amax of each block, quantisation into codes and back (kernels/fp8.h). The GEMM
// is kernels/cpu/gemm_fp8.cpp. Tests: build/tests/test_fp8_scaling.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/convert.h"
#include "core/factory.h"
#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/parallel.h"
#include "kernels/fp8.h"

namespace mg::kernels::cpu {

namespace {

// A 2-D tensor's rows and columns, and its blocks' extents with 0 made whole.
struct Grid {
  std::int64_t rows, cols, block_rows, block_cols, scale_cols;
  Grid(const Shape& shape, Fp8Blocks blocks)
      : rows(shape[0]),
        cols(shape[1]),
        block_rows(blocks.rows > 0 ? blocks.rows : std::max<std::int64_t>(rows, 1)),
        block_cols(blocks.cols > 0 ? blocks.cols : std::max<std::int64_t>(cols, 1)),
        scale_cols(fp8_block_count(cols, blocks.cols)) {}
  std::int64_t block(std::int64_t r, std::int64_t c) const { return r / block_rows * scale_cols + c / block_cols; }
};

// Row-parallel loops take whole block rows, so that no two chunks write one block's amax.
constexpr std::int64_t kGrainElements = 1 << 15;
template <class Body>
void for_block_rows(const Grid& g, Body body) {
  const std::int64_t grain = std::max<std::int64_t>(1,
                                                    kGrainElements / std::max<std::int64_t>(1, g.block_rows * g.cols));
  parallel_for(fp8_block_count(g.rows, g.block_rows), grain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> buffer(static_cast<std::size_t>(g.cols));
    for (std::int64_t r = begin * g.block_rows; r < std::min(g.rows, end * g.block_rows); ++r) body(r, buffer.data());
  });
}

}  // namespace

Tensor fp8_block_amax(const Tensor& x, Fp8Blocks blocks) {
  const Grid g(x.shape(), blocks);
  Tensor amax = zeros(fp8_scale_shape(x.shape(), blocks), {.dtype = DType::F32});
  float* out = amax.data<float>();
  for_block_rows(g, [&](std::int64_t r, float* buffer) {
    const float* row = values_at<float>(x, r * g.cols, g.cols, buffer);
    float* grid_row = out + r / g.block_rows * g.scale_cols;
    for (std::int64_t c0 = 0; c0 < g.cols; c0 += g.block_cols) {
      float& m = grid_row[c0 / g.block_cols];
      float local = m;
      bool nan = local != local;
      for (std::int64_t c = c0; c < std::min(g.cols, c0 + g.block_cols); ++c) {
        const float a = std::fabs(row[c]);
        local = std::max(local, a);
        nan |= a != a;
      }
      m = nan ? std::numeric_limits<float>::quiet_NaN() : local;
    }
  });
  return amax;
}

void fp8_quantize(const Tensor& x, const Tensor& scale, Fp8Blocks blocks, Tensor& codes, Tensor& codes_t,
                  Tensor& scale_inv) {
  const Grid g(x.shape(), blocks);
  const DType format = (codes.defined() ? codes : codes_t).dtype();
  const float* s = scale.data<float>();
  float* inv = scale_inv.data<float>();
  for (std::int64_t i = 0; i < scale_inv.numel(); ++i) inv[i] = 1.0f / s[i];
  auto* out = codes.defined() ? static_cast<std::uint8_t*>(codes.data_ptr()) : nullptr;
  auto* out_t = codes_t.defined() ? static_cast<std::uint8_t*>(codes_t.data_ptr()) : nullptr;
  parallel_for(g.rows, std::max<std::int64_t>(1, kGrainElements / std::max<std::int64_t>(1, g.cols)),
               [&](std::int64_t begin, std::int64_t end) {
                 std::vector<float> buffer(static_cast<std::size_t>(g.cols));
                 for (std::int64_t r = begin; r < end; ++r) {
                   const float* row = values_at<float>(x, r * g.cols, g.cols, buffer.data());
                   const float* srow = s + r / g.block_rows * g.scale_cols;
                   for (std::int64_t c0 = 0; c0 < g.cols; c0 += g.block_cols) {
                     const float sc = srow[c0 / g.block_cols];
                     for (std::int64_t c = c0; c < std::min(g.cols, c0 + g.block_cols); ++c) {
                       const std::uint8_t code = fp8::encode(row[c] * sc, format, fp8::Overflow::Saturate);
                       if (out) out[r * g.cols + c] = code;
                       if (out_t) out_t[c * g.rows + r] = code;  // the column-wise copy: x^T's codes
                     }
                   }
                 }
               });
}

void fp8_scales(const Tensor& amax, const Fp8ScaleRule& rule, Tensor& scale) {
  const float* a = amax.data<float>();
  float* s = scale.data<float>();
  for (std::int64_t i = 0; i < amax.numel(); ++i) s[i] = fp8_scale(a[i], rule, 1.0f);
}

void fp8_record_amax(Tensor& amax_history, Tensor& scale, int role, const Tensor& amax, const Fp8ScaleRule& rule,
                     bool most_recent) {
  const std::int64_t len = amax_history.size(1);
  kernels::fp8_record_amax(amax_history.data<float>() + role * len, len, amax.data<float>()[0], most_recent, rule,
                           scale.data<float>() + role);
}

void fp8_dequantize(const Fp8Tensor& x, Tensor& out) {
  const Grid g(x.codes.shape(), x.blocks);
  const DType format = x.codes.dtype();
  const auto* codes = static_cast<const std::uint8_t*>(x.codes.data_ptr());
  const float* inv = x.scale_inv.data<float>();
  float* values = out.data<float>();
  for_block_rows(g, [&](std::int64_t r, float*) {
    for (std::int64_t c = 0; c < g.cols; ++c)
      values[r * g.cols + c] = fp8::decode(codes[r * g.cols + c], format) * inv[g.block(r, c)];
  });
}

}  // namespace mg::kernels::cpu
