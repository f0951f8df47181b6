// CPU stochastic rounding (kernels/stochastic_round.h): each element rounds alone with its own Philox
// word, so chunks of the thread pool change nothing; E2M1's chunks are whole bytes (pairs). One Philox
// call makes the words of four consecutive elements.
// Tests: build/tests/test_stochastic_round.
#include "core/scalar_types.h"
#include "kernels/cpu/parallel.h"
#include "kernels/stochastic_round.h"

namespace mg::kernels::cpu {

namespace {

// Element i's word, with one Philox call per block of four elements (rounding_words): a loop over
// consecutive elements keeps the block it last made.
class Words {
 public:
  explicit Words(const stochastic::RoundingStream& stream) : stream_(stream) {}
  std::uint32_t operator()(std::int64_t i) {
    const auto element = static_cast<std::uint64_t>(i);
    if (element / 4 != block_) words_ = stochastic::rounding_words(stream_, block_ = element / 4);
    return words_.word[element % 4];
  }

 private:
  stochastic::RoundingStream stream_;
  std::uint64_t block_ = ~std::uint64_t{0};
  philox::Block words_{};
};

}  // namespace

void stochastic_round(const Tensor& x, Tensor& out, const stochastic::RoundingStream& stream) {
  const float* in = x.data<float>();
  const DType format = out.dtype();
  // Each chunk of the thread pool keeps its own block of words.
  auto rounded = [&](Words& words, std::int64_t i) { return stochastic::stochastic_round(in[i], format, words(i)); };
  constexpr std::int64_t kGrain = 16 * 1024;
  auto* codes = static_cast<std::uint8_t*>(out.data_ptr());
  if (format == DType::E2M1) {  // pairs: element 2k in the low nibble
    parallel_for(x.numel() / 2, kGrain, [&](std::int64_t begin, std::int64_t end) {
      Words words(stream);
      for (std::int64_t k = begin; k < end; ++k)
        codes[k] = fp8::pack_codes(fp8::encode(rounded(words, 2 * k), format, fp8::Overflow::Saturate),
                                   fp8::encode(rounded(words, 2 * k + 1), format, fp8::Overflow::Saturate));
    });
  } else if (is_fp8(format)) {  // the rounded value is a value of the format: its code, exactly
    parallel_for(x.numel(), kGrain, [&](std::int64_t begin, std::int64_t end) {
      Words words(stream);
      for (std::int64_t i = begin; i < end; ++i)
        codes[i] = fp8::encode(rounded(words, i), format, fp8::Overflow::Saturate);
    });
  } else {
    visit_floating(format, "stochastic_round", [&](auto zero) {
      using T = decltype(zero);
      T* values = out.data<T>();
      parallel_for(x.numel(), kGrain, [&](std::int64_t begin, std::int64_t end) {
        Words words(stream);
        for (std::int64_t i = begin; i < end; ++i) values[i] = T(rounded(words, i));  // exact: a value of T
      });
    });
  }
}

}  // namespace mg::kernels::cpu
