// Stochastic rounding: x goes to one of the two values of a format that enclose it, the upper one with
// probability (x - lower) / (upper - lower), so that on average it is x itself: E[SR(x)] = x. Round to
// nearest drops every update smaller than half a step (the 2018 paper's lost updates, E2); rounded
// stochastically, an update a tenth of a step moves the weight one step a tenth of the time, and its
// sum over many steps survives. FP4 training rounds gradients this way (NVFP4, MXFP4), and bf16
// training without f32 master weights its weight updates (Zamirai et al. 2020).
//
// How, for a format of M mantissa bits and bias B (f16, bf16, E4M3, E5M2, E2M1), all in integers:
//   |x| = significand * 2^(e - 23)          f32's 24-bit significand (23 bits for an f32 subnormal)
//   step = 2^(g - M), g = max(e, 1 - B)      the format's spacing at |x|: its subnormals' below 2^(1-B)
//   kept = significand >> d, rest = the d bits cut off, d = 23 - M + (g - e)
//   result = (kept + 1) * step if a uniform random integer below 2^d is below rest, else kept * step
// The random integer is the top d bits of one 32-bit Philox word, so P(up) = rest / 2^d exactly: the
// rounding is exactly unbiased. Where more than 32 bits are cut off (|x| below 2^-8 of a step: tiny
// values rounded into f16's or E4M3's subnormals), rest's top 32 bits are compared, and such values
// round up less often than they should by under 2^-32.
// Only the two neighbours: kept * step <= |x| < (kept + 1) * step, and a value of the format (rest = 0)
// is returned unchanged. The ends: a finite x never becomes inf or NaN; a result past the format's
// largest finite value saturates to it (so x in (448, 480) gives 448 in E4M3: saturation is biased,
// which is why MXFP4 scales values by 3/4 first, autograd/fp8.cpp). +-inf stays +-inf where the format
// has one (f16, bf16, E5M2) and saturates where it does not (E4M3, E2M1); NaN stays NaN (E2M1, which
// has none, gets the zero of the other sign, encode()'s ml_dtypes rule).
//
// Which random word rounds which element is fixed by the run, not by the order of work: Philox 4x32-10
// keyed by the run's seed, its counter holding the element's block, the tensor and the step
// (RoundingStream). So the CPU and a GPU give the same bits, a run is reproducible with any number of
// threads, and a resumed run continues bit for bit from (seed, step). Tests: build/tests/test_stochastic_round.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/fp8.h"
#include "core/host_device.h"
#include "core/philox.h"

namespace mg::stochastic {

// The random words of one rounding: element i of tensor `tensor` at step `step` of a run seeded `seed`.
struct RoundingStream {
  std::uint64_t seed = 0;
  std::uint32_t step = 0;  // the optimizer's step, or any count the caller advances once a rounding
  std::uint32_t tensor = 0;  // which tensor of the step: a parameter's index, a layer's role
};

// The key's high word is tagged ("SR"), so these words are not mg::Generator's draws under the same
// seed (whose counters' upper words are 0) even at step 0 of tensor 0.
constexpr std::uint32_t kStreamTag = 0x53520000u;

// The words of elements 4 * block .. 4 * block + 3: one Philox call makes four (a loop over elements
// takes each block once).
MG_HOST_DEVICE inline philox::Block rounding_words(const RoundingStream& stream, std::uint64_t block) {
  const philox::Block counter{
      {static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32), stream.tensor, stream.step}};
  return philox::rounds(counter, static_cast<std::uint32_t>(stream.seed),
                        static_cast<std::uint32_t>(stream.seed >> 32) ^ kStreamTag);
}

// (The word is picked by comparisons, not by indexing the block with element % 4: a GPU keeps an array
// indexed at run time in local memory, and nvcc did so in kernels/cuda/fp4.cu's encode kernel.)
MG_HOST_DEVICE inline std::uint32_t rounding_word(const RoundingStream& stream, std::uint64_t element) {
  const philox::Block words = rounding_words(stream, element / 4);
  const std::uint64_t j = element % 4;
  return j == 0 ? words.word[0] : j == 1 ? words.word[1] : j == 2 ? words.word[2] : words.word[3];
}

// The formats rounded to: the low-precision compute dtypes and the signed coded ones.
MG_HOST_DEVICE constexpr bool rounds_to(DType format) {
  return format == DType::F16 || format == DType::BF16 || format == DType::E4M3 || format == DType::E5M2 ||
         format == DType::E2M1;
}

namespace detail {
// 2^p as an f32 for -149 <= p <= 127 (an f32 subnormal below -126).
MG_HOST_DEVICE inline float power_of_two(int p) {
  return fp8::detail::bits_float(p >= -126 ? static_cast<std::uint32_t>(p + 127) << 23 : 1u << (p + 149));
}
}  // namespace detail

// x rounded stochastically to a value of `format` (one of rounds_to's), returned as an f32 holding
// it exactly; `random` is the element's rounding_word.
MG_HOST_DEVICE inline float stochastic_round(float x, DType format, std::uint32_t random) {
  const DTypeInfo d = dtype_info(format);
  const std::uint32_t bits = fp8::detail::float_bits(x);
  const std::uint32_t sign = bits & 0x80000000u, a = bits & 0x7FFFFFFFu;
  const float max = static_cast<float>(d.max);
  if (a > 0x7F800000u) return x;  // NaN
  if (a == 0x7F800000u) return d.has_inf ? x : fp8::detail::bits_float(sign | fp8::detail::float_bits(max));
  const int biased = static_cast<int>(a >> 23);
  const int exponent = biased == 0 ? -126 : biased - 127;
  const std::uint64_t significand = biased == 0 ? a : (a & 0x7FFFFFu) | 0x800000u;
  const int grid = exponent > 1 - d.bias ? exponent : 1 - d.bias;
  const int dropped = 23 - d.mantissa_bits + (grid - exponent);  // at least 13 (f16), so the shifts are defined
  const std::uint64_t kept = dropped >= 32 ? 0 : significand >> dropped;
  const std::uint64_t rest = significand - (kept << (dropped >= 32 ? 0 : dropped));
  // (rest < 2^24: from 56 bits cut off its top 32 bits are 0, and a shift of 64 or more is undefined.)
  const bool up = dropped <= 32   ? (random >> (32 - dropped)) < rest
                  : dropped >= 56 ? false
                                  : random < (rest >> (dropped - 32));
  float value = static_cast<float>(kept + (up ? 1u : 0u)) * detail::power_of_two(grid - d.mantissa_bits);
  if (value > max) value = max;  // a finite x saturates
  return fp8::detail::bits_float(sign | fp8::detail::float_bits(value));
}

}  // namespace mg::stochastic
