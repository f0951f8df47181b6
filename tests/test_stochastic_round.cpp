// Stochastic rounding (core/stochastic_round.h, kernels/stochastic_round.h) on the CPU, for f16, bf16,
// E4M3, E5M2 and E2M1: only the two neighbours of x (found here from the formats' own values, not the
// rounding code), exact values unchanged, unbiased within a stated statistical bound, saturation and
// specials, and the stream: the same (seed, step, tensor) gives the same bits with 1 or 2 threads, and
// another gives other bits. The GPU's bits: tests/test_cuda_stochastic_round.cpp.
#include "tests/testing.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <cmath>
#include <limits>
#include <vector>

#include "core/philox.h"
#include "core/stochastic_round.h"
#include "kernels/stochastic_round.h"
#include "kernels/threads.h"

using namespace mg;
using stochastic::RoundingStream;

namespace {

constexpr DType kFormats[] = {DType::F16, DType::BF16, DType::E4M3, DType::E5M2, DType::E2M1};

float sr(float x, DType format, std::uint32_t random) { return stochastic::stochastic_round(x, format, random); }

// Every finite non-negative value of a format, ascending, from its codes or bit patterns (not from
// the rounding under test).
std::vector<float> magnitudes(DType format) {
  std::vector<float> values;
  if (format == DType::F16 || format == DType::BF16) {
    for (std::uint32_t bits = 0; bits < 0x8000u; ++bits) {
      const float v = format == DType::BF16 ? std::bit_cast<float>(bits << 16)
                                            : static_cast<float>(std::bit_cast<half>(static_cast<std::uint16_t>(bits)));
      if (std::isfinite(v)) values.push_back(v);
    }
  } else {
    const int codes = 1 << (dtype_info(format).bits - 1);
    for (int code = 0; code < codes; ++code) {
      const float v = fp8::decode(static_cast<std::uint8_t>(code), format);
      if (std::isfinite(v)) values.push_back(v);
    }
  }
  std::sort(values.begin(), values.end());
  return values;
}

// The two values of the format around |x| (lower <= |x| < upper), with x's sign.
std::pair<float, float> neighbours(float x, const std::vector<float>& values) {
  const auto above = std::upper_bound(values.begin(), values.end(), std::fabs(x));
  REQUIRE(above != values.begin());
  const float lower = *(above - 1), upper = above == values.end() ? lower : *above;
  return {std::copysign(lower, x), std::copysign(upper, x)};
}

// Inputs across a format's range: every value, the midpoints and quarter points between neighbours,
// and random f32s within the range.
std::vector<float> inputs(const std::vector<float>& values, std::size_t stride) {
  std::vector<float> xs;
  for (std::size_t i = 0; i + 1 < values.size(); i += stride) {
    const float a = values[i], b = values[i + 1];
    for (const float t : {0.0f, 0.25f, 0.5f, 0.9f}) {
      xs.push_back(a + (b - a) * t);
      xs.push_back(-(a + (b - a) * t));
    }
  }
  std::uint64_t state = 12345;
  for (int i = 0; i < 2000; ++i) {
    state = state * 6364136223846793005u + 1442695040888963407u;
    const float u = static_cast<float>(state >> 40) * 0x1p-24f;
    xs.push_back((i % 2 ? 1.0f : -1.0f) * values.back() * u * u * u);
  }
  return xs;
}

std::uint32_t word(std::uint64_t i) { return stochastic::rounding_word({.seed = 7, .step = 3, .tensor = 1}, i); }

}  // namespace

TEST_CASE("stochastic rounding: only the two neighbours; a value of the format unchanged") {
  for (const DType format : kFormats) {
    CAPTURE(format);
    const std::vector<float> values = magnitudes(format);
    const std::size_t stride = values.size() > 4096 ? 61 : 1;
    int checked = 0;
    for (const float x : inputs(values, stride)) {
      CAPTURE(x);
      const auto [lower, upper] = neighbours(x, values);
      for (std::uint64_t i = 0; i < 8; ++i) {
        const float r = sr(x, format, word(i * 977 + static_cast<std::uint64_t>(checked)));
        CHECK((r == lower || r == upper));
      }
      if (x == lower) CHECK(sr(x, format, 0) == x);  // exact: unchanged even by the word most likely to round up
      // The extreme words: 0 rounds up whatever is cut off, all ones never does.
      if (x != lower) CHECK(sr(x, format, 0) == upper);
      CHECK(sr(x, format, 0xFFFFFFFFu) == lower);
      ++checked;
    }
    CHECK(checked > 100);
  }
}

TEST_CASE("stochastic rounding: unbiased, E[SR(x)] = x within 5 standard errors") {
  // N draws of one x: each is lower or upper, upper with p = (x - lower) / step, so their mean has a
  // standard error of step * sqrt(p (1 - p) / N) <= step / (2 sqrt(N)). The words are fixed (seeded),
  // so the test cannot flake; 5 standard errors bound a correct rounding's mean with margin, while a
  // round to nearest (off by up to step / 2) or a bias of 1/64 of a step fails it.
  constexpr std::uint64_t kDraws = 1 << 16;
  for (const DType format : kFormats) {
    CAPTURE(format);
    const std::vector<float> values = magnitudes(format);
    for (const std::size_t index : {std::size_t{1}, values.size() / 3, values.size() - 2}) {
      for (const float t : {0.1f, 0.5f, 0.7f, 0.99f}) {
        const float lower = values[index], upper = values[index + 1];
        const float x = lower + (upper - lower) * t;
        CAPTURE(x);
        double sum = 0;
        for (std::uint64_t i = 0; i < kDraws; ++i) sum += sr(x, format, word(i));
        const double mean = sum / kDraws, step = upper - lower;
        const double p = (static_cast<double>(x) - lower) / step;
        CHECK(std::fabs(mean - x) <= 5 * step * std::sqrt(p * (1 - p) / kDraws) + 1e-12 * step);
      }
    }
  }
  // A value far below a step (more than 32 bits cut off: 2^-40 into f16, whose step there is 2^-24)
  // rounds up about 2^-16 of the time: its mean too.
  double sum = 0;
  for (std::uint64_t i = 0; i < (1u << 22); ++i) sum += sr(0x1p-40f, DType::F16, word(i));
  CHECK(std::fabs(sum / (1u << 22) - 0x1p-40) <= 5 * 0x1p-24 * std::sqrt(0x1p-16 / (1u << 22)));
}

TEST_CASE("stochastic rounding: saturation and specials") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::uint32_t r : {0u, 0x80000000u, 0xFFFFFFFFu}) {
    CAPTURE(r);
    // Finite inputs never become inf: past the largest value they saturate (biased, which is the point
    // of MXFP4's 3/4 scaling).
    CHECK(sr(460.0f, DType::E4M3, r) == 448.0f);
    CHECK(sr(-1e10f, DType::E4M3, r) == -448.0f);
    CHECK(sr(7.0f, DType::E2M1, r) == 6.0f);
    CHECK(sr(65519.0f, DType::F16, r) == 65504.0f);
    CHECK(sr(std::numeric_limits<float>::max(), DType::BF16, r) == std::bit_cast<float>(0x7F7F0000u));
    CHECK(sr(60000.0f, DType::E5M2, r) == 57344.0f);
    // inf stays where the format has one, saturates where it has not; NaN stays NaN; -0 stays -0.
    CHECK(sr(inf, DType::F16, r) == inf);
    CHECK(sr(-inf, DType::BF16, r) == -inf);
    CHECK(sr(inf, DType::E5M2, r) == inf);
    CHECK(sr(-inf, DType::E4M3, r) == -448.0f);
    CHECK(sr(inf, DType::E2M1, r) == 6.0f);
    for (const DType format : kFormats) CHECK(std::isnan(sr(nan, format, r)));
    CHECK(std::signbit(sr(-0.0f, DType::BF16, r)));
    CHECK(sr(-0.0f, DType::BF16, r) == 0.0f);
  }
  // Subnormals of the format: 2^-25 is half of f16's smallest subnormal, 0 or 2^-24; an f32 subnormal
  // rounds into bf16's subnormals.
  CHECK(sr(0x1p-25f, DType::F16, 0) == 0x1p-24f);
  CHECK(sr(0x1p-25f, DType::F16, 0xFFFFFFFFu) == 0.0f);
  CHECK(sr(0x1.8p-134f, DType::BF16, 0) == 0x1p-133f);
  CHECK(sr(0x1.8p-134f, DType::BF16, 0xFFFFFFFFu) == 0.0f);
  // Under 2^-32 of a step (the smallest f32 against f16's 2^-24) never rounds up, even with word 0.
  CHECK(sr(0x1p-149f, DType::F16, 0) == 0.0f);
  CHECK(sr(-0x1p-100f, DType::E4M3, 0) == 0.0f);
  CHECK(sr(0.3f, DType::E2M1, 0) == 0.5f);
  CHECK(sr(0.3f, DType::E2M1, 0xFFFFFFFFu) == 0.0f);
}

TEST_CASE("stochastic rounding: tensors, the stream's bits, and the argument checks") {
  std::vector<double> xs(40002);  // even: E2M1 packs pairs
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(static_cast<double>(i)) * 5.0;
  const Tensor x = from_vector(xs, {static_cast<std::int64_t>(xs.size())});
  const RoundingStream stream{.seed = 42, .step = 9, .tensor = 2};
  for (const DType format : kFormats) {
    CAPTURE(format);
    Tensor out = Tensor::empty(x.shape(), {.dtype = format});
    kernels::stochastic_round(x, out, stream);
    // Element i is SR(x[i]) with word i of the stream, wherever the thread pool cut the work.
    const std::vector<double> got = out.to(DType::F64).to_vector<double>();
    int wrong = 0;
    for (std::size_t i = 0; i < xs.size(); ++i)
      wrong += got[i] != sr(static_cast<float>(xs[i]), format, stochastic::rounding_word(stream, i));
    CHECK(wrong == 0);
    // One thread: the same bits. Another step: other bits.
    const int threads = num_threads();
    set_num_threads(1);
    Tensor serial = Tensor::empty(x.shape(), {.dtype = format});
    kernels::stochastic_round(x, serial, stream);
    set_num_threads(threads);
    CHECK(std::memcmp(serial.data_ptr(), out.data_ptr(), out.nbytes()) == 0);
    Tensor next = Tensor::empty(x.shape(), {.dtype = format});
    kernels::stochastic_round(x, next, {.seed = 42, .step = 10, .tensor = 2});
    CHECK(std::memcmp(next.data_ptr(), out.data_ptr(), out.nbytes()) != 0);
  }
  // The words are not mg::Generator's under the same seed, and differ by tensor and seed.
  int same = 0;
  for (std::uint64_t i = 0; i < 64; ++i) {
    same += stochastic::rounding_word({.seed = 5}, i) == philox::random_word(5, 0, i);
    same += stochastic::rounding_word({.seed = 5}, i) == stochastic::rounding_word({.seed = 5, .tensor = 1}, i);
    same += stochastic::rounding_word({.seed = 5}, i) == stochastic::rounding_word({.seed = 6}, i);
  }
  CHECK(same == 0);
  Tensor e2m1 = Tensor::empty({4}, {.dtype = DType::E2M1});
  testing::check_error([&] { kernels::stochastic_round(x.to(DType::BF16), e2m1, stream); }, "x must be f32");
  Tensor wide = Tensor::empty(x.shape(), {.dtype = DType::F32});
  testing::check_error([&] { kernels::stochastic_round(x, wide, stream); }, "writes f16, bf16, e4m3, e5m2 or e2m1");
  testing::check_error([&] { kernels::stochastic_round(x, e2m1, stream); }, "must have one shape and device");
}
