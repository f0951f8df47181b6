#include "tools/repro/fp8_effect.h"

#include <algorithm>
#include <cmath>

#include "core/convert.h"
#include "core/error.h"
#include "core/factory.h"

namespace mg::tools::repro {

namespace {

// A scale computed in f32 from an amax (max / amax) can put the amax itself an ulp above the max once
// multiplied back; that is rounding, not saturation.
constexpr double kSaturationSlack = 1.0 + 0x1p-20;

// The block of element (r, c) in the scale grid of `q` (a block extent of 0 is the whole dimension).
struct BlockGrid {
  std::int64_t block_rows, block_cols, scale_cols;
  BlockGrid(const Shape& shape, kernels::Fp8Blocks blocks)
      : block_rows(blocks.rows > 0 ? blocks.rows : std::max<std::int64_t>(shape[0], 1)),
        block_cols(blocks.cols > 0 ? blocks.cols : std::max<std::int64_t>(shape[1], 1)),
        scale_cols(kernels::fp8_block_count(shape[1], blocks.cols)) {}
  std::int64_t at(std::int64_t r, std::int64_t c) const { return r / block_rows * scale_cols + c / block_cols; }
};

}  // namespace

double Fp8Effect::relative_error() const { return value_squares > 0 ? std::sqrt(error_squares / value_squares) : 0.0; }

void Fp8Effect::merge(const Fp8Effect& o) {
  values += o.values;
  nonzero += o.nonzero;
  flushed += o.flushed;
  subnormal += o.subnormal;
  saturated += o.saturated;
  error_squares += o.error_squares;
  value_squares += o.value_squares;
  element_errors += o.element_errors;
}

Fp8Effect fp8_effect(const Tensor& x, const kernels::Fp8Tensor& q) {
  MG_CHECK(x.dim() == 2 && x.shape() == q.codes.shape() && x.device().is_cpu(),
           "repro::fp8_effect: needs a 2-D tensor on the CPU and its codes of the same shape, got {} and {}", x.shape(),
           q.codes.shape());
  const Tensor values = x.to(DType::F32), dequantized = kernels::fp8_dequantize(q);
  const DType format = q.codes.dtype();
  const fp8::FormatInfo info = fp8::format_info(format);
  const double min_normal = std::ldexp(1.0, 1 - info.bias);
  const BlockGrid grid(x.shape(), q.blocks);
  const float *v = values.data<float>(), *d = dequantized.data<float>(), *inv = q.scale_inv.data<float>();
  Fp8Effect e;
  const std::int64_t rows = x.size(0), cols = x.size(1);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const double value = v[r * cols + c], result = d[r * cols + c];
      if (!std::isfinite(value)) continue;
      ++e.values;
      e.error_squares += (value - result) * (value - result);
      e.value_squares += value * value;
      if (value == 0) continue;
      ++e.nonzero;
      e.element_errors += std::fabs(value - result) / std::fabs(value);
      const double scale_inv = inv[grid.at(r, c)], code_value = std::fabs(result) / scale_inv;
      e.flushed += result == 0;
      e.subnormal += result != 0 && code_value < min_normal;
      e.saturated += std::fabs(value) / scale_inv > info.max * kSaturationSlack;
    }
  return e;
}

Fp8Effect fp8_effect_of(const Tensor& x, Fp8Role role, const Fp8Options& options) {
  Fp8Options measured = options;
  if (measured.scaling == Fp8Scaling::Delayed) measured.scaling = Fp8Scaling::Current;
  const Tensor values = x.to(DType::F32);
  return fp8_effect(values, fp8_quantize_operand(values, role, false, measured, nullptr));
}

Fp8Effect fp8_effect_with_scale(const Tensor& x, float scale, DType format) {
  const Tensor values = x.to(DType::F32);
  return fp8_effect(values, kernels::fp8_quantize(values, full({1, 1}, scale), {0, 0}, format));
}

}  // namespace mg::tools::repro
