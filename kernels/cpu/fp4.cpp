// FP4 on the CPU: block scales, codes and their decoding (kernels/fp4.h), with kernels/fp4_scale.h's
// rules, which the GPU's kernels (kernels/cuda/fp4.cu) run too. Each pair of elements (one byte of
// codes) is written by one iteration that finds each element's block: chunks of the thread pool never
// share a byte, and a rounding word depends on the element alone.
// Tests: build/tests/test_fp4_quantize.
#include <algorithm>
#include <vector>

#include "core/scalar_types.h"
#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/parallel.h"
#include "kernels/fp4.h"

namespace mg::kernels::cpu {

namespace {

constexpr std::int64_t kGrainPairs = 8 * 1024;

}  // namespace

void fp4_scales(const Tensor& block_amax, const Tensor& tensor_amax, const Fp4Rule& rule, Tensor& scales,
                Tensor& tensor_factor) {
  const float* a = block_amax.data<float>();
  const float amax = tensor_amax.data<float>()[0];
  auto* s = static_cast<std::uint8_t*>(scales.data_ptr());
  for (std::int64_t b = 0; b < block_amax.numel(); ++b) s[b] = fp4_block_scale(a[b], amax, rule.format);
  tensor_factor.data<float>()[0] = fp4_tensor_factor(amax, rule);
}

void fp4_encode(const Tensor& x, const Tensor& scales, const Tensor& tensor_amax, Fp8Blocks blocks, const Fp4Rule& rule,
                Tensor& codes) {
  const Fp4BlockIndex block_of(x.shape(), blocks);
  const std::int64_t n = x.numel();
  const auto* s = static_cast<const std::uint8_t*>(scales.data_ptr());
  const float amax = tensor_amax.data<float>()[0];
  auto* out = static_cast<std::uint8_t*>(codes.data_ptr());
  parallel_for((n + 1) / 2, kGrainPairs, [&](std::int64_t begin, std::int64_t end) {
    const std::int64_t first = 2 * begin, count = std::min(n, 2 * end) - first;
    std::vector<float> buffer(static_cast<std::size_t>(count));
    const float* values = values_at<float>(x, first, count, buffer.data());
    auto code = [&](std::int64_t i) {
      if (i >= n) return std::uint8_t{0};  // the high nibble of an odd tensor's last byte
      const float factor = fp4_encode_factor(s[block_of(i)], amax, rule);
      return fp4_encode_value(values[i - first], factor, rule, static_cast<std::uint64_t>(i));
    };
    for (std::int64_t k = begin; k < end; ++k) out[k] = fp8::pack_codes(code(2 * k), code(2 * k + 1));
  });
}

void fp4_decode(const Fp4Tensor& x, Tensor& out) {
  const Fp4BlockIndex block_of(x.codes.shape(), x.blocks);
  const auto* codes = static_cast<const std::uint8_t*>(x.codes.data_ptr());
  const auto* s = static_cast<const std::uint8_t*>(x.scales.data_ptr());
  visit_floating(out.dtype(), "fp4_decode", [&](auto zero) {
    using T = decltype(zero);
    T* values = out.data<T>();
    parallel_for(out.numel(), 2 * kGrainPairs, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i)
        values[i] = T(fp4_decode_value(fp8::load_code(codes, i, DType::E2M1), s[block_of(i)], x.format));
    });
  });
}

}  // namespace mg::kernels::cpu
