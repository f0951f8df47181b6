// FP4 on the CPU: block scales, codes and their decoding (kernels/fp4.h), with kernels/fp4_scale.h's
// rules, which the GPU's kernels (kernels/cuda/fp4.cu) run too. Each pair of elements (one byte of
// codes) is written by one iteration of the thread pool, whose chunks so never share a byte; within a
// chunk each run of elements of one block finds its scale once; a rounding word depends on the element
// alone.
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
    std::vector<std::uint8_t> code(static_cast<std::size_t>(2 * (end - begin)), 0);  // an odd tensor's last: 0
    const float* values = values_at<float>(x, first, count, buffer.data());
    // Stochastic rounding's words come four at a time (one Philox block): kept for the next three.
    std::uint64_t block = ~std::uint64_t{0};
    philox::Block words{};
    for (std::int64_t i = first; i < first + count;) {  // a run of one block at a time: its factor found once
      const std::int64_t stop = std::min(first + count, block_of.run_end(i));
      const float factor = fp4_encode_factor(s[block_of(i)], amax, rule);
      std::uint8_t* run = code.data() + (i - first);
      const float* in = values + (i - first);
      const std::int64_t length = stop - i;
      if (!rule.stochastic) {  // fp4_encode_value to nearest, in a loop the compiler vectorises
        for (std::int64_t e = 0; e < length; ++e) run[e] = e2m1_nearest(in[e] * factor);
      } else {
        for (std::int64_t e = 0; e < length; ++e) {
          const auto element = static_cast<std::uint64_t>(i + e);
          if (element / 4 != block) block = element / 4, words = stochastic::rounding_words(rule.stream, block);
          run[e] = fp4_encode_value(in[e], factor, rule, words.word[element % 4]);  // rounding_word's pick
        }
      }
      i = stop;
    }
    for (std::int64_t k = begin; k < end; ++k)
      out[k] = fp8::pack_codes(code[static_cast<std::size_t>(2 * (k - begin))],
                               code[static_cast<std::size_t>(2 * (k - begin) + 1)]);
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
      for (std::int64_t i = begin; i < end;) {  // a run of one block at a time
        const std::int64_t stop = std::min(end, block_of.run_end(i));
        const std::uint8_t scale = s[block_of(i)];
        for (; i < stop; ++i) values[i] = T(fp4_decode_value(fp8::load_code(codes, i, DType::E2M1), scale, x.format));
      }
    });
  });
}

}  // namespace mg::kernels::cpu
