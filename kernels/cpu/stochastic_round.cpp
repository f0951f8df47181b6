// CPU stochastic rounding (kernels/stochastic_round.h): each element rounds alone with its own Philox
// word, so chunks of the thread pool change nothing; E2M1's chunks are whole bytes (pairs).
// Tests: build/tests/test_stochastic_round.
#include "core/scalar_types.h"
#include "kernels/cpu/parallel.h"
#include "kernels/stochastic_round.h"

namespace mg::kernels::cpu {

void stochastic_round(const Tensor& x, Tensor& out, const stochastic::RoundingStream& stream) {
  const float* in = x.data<float>();
  const DType format = out.dtype();
  auto rounded = [&](std::int64_t i) {
    return stochastic::stochastic_round(in[i], format,
                                        stochastic::rounding_word(stream, static_cast<std::uint64_t>(i)));
  };
  constexpr std::int64_t kGrain = 16 * 1024;
  auto* codes = static_cast<std::uint8_t*>(out.data_ptr());
  if (format == DType::E2M1) {  // pairs: element 2k in the low nibble
    parallel_for(x.numel() / 2, kGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t k = begin; k < end; ++k)
        codes[k] = fp8::pack_codes(fp8::encode(rounded(2 * k), format, fp8::Overflow::Saturate),
                                   fp8::encode(rounded(2 * k + 1), format, fp8::Overflow::Saturate));
    });
  } else if (is_fp8(format)) {  // the rounded value is a value of the format: its code, exactly
    parallel_for(x.numel(), kGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) codes[i] = fp8::encode(rounded(i), format, fp8::Overflow::Saturate);
    });
  } else {
    visit_floating(format, "stochastic_round", [&](auto zero) {
      using T = decltype(zero);
      T* values = out.data<T>();
      parallel_for(x.numel(), kGrain, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) values[i] = T(rounded(i));  // exact: a value of T
      });
    });
  }
}

}  // namespace mg::kernels::cpu
