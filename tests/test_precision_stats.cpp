// amp::precision_stats and amp::lost_updates against hand-computed cases: a tensor with known zero,
// flushed, subnormal and overflowing shares in f16, bf16, E4M3 and E5M2 (with the per-tensor FP8
// scale, its margin and its power-of-two rounding), and an f16 weight's update with a known lost share.
#include <cmath>
#include <vector>

#include "amp/precision_stats.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;
using amp::Outcome;

TEST_CASE("precision_stats: zero, flushed, subnormal and overflow shares in f16 and bf16") {
  // f16: min subnormal 2^-24, min normal 2^-14, max 65504. bf16: min subnormal 2^-133, min normal
  // 2^-126, max about 3.39e38.
  const std::vector<double> values{0.0,      -0.0,  // zero
                                   0x1p-26,  // f16: flushed; bf16: normal
                                   0x1p-20,  // f16: subnormal
                                   70000.0,  // f16: overflow (>= 65520); bf16: normal
                                   1.0,      0.5,
                                   0x1p-130,  // f16: flushed; bf16: subnormal
                                   0x1p-140,  // f16 and bf16: flushed (below half of 2^-133)
                                   3.5e38};  // f16 and bf16 (and f32): overflow
  const amp::PrecisionStats s = amp::precision_stats(f64(values, {10}, false));
  CHECK(s.values.count == 10);
  CHECK(s.values.zero == 2);
  CHECK(s.zero_share() == doctest::Approx(0.2));
  CHECK(s.amax == 3.5e38);
  CHECK(s.count(DType::F16, Outcome::Flushed) == 3);
  CHECK(s.count(DType::F16, Outcome::Subnormal) == 1);
  CHECK(s.count(DType::F16, Outcome::Overflow) == 2);
  CHECK(s.count(DType::BF16, Outcome::Flushed) == 1);
  CHECK(s.count(DType::BF16, Outcome::Subnormal) == 1);
  CHECK(s.count(DType::BF16, Outcome::Overflow) == 1);
  CHECK(s.share(DType::F16, Outcome::Flushed) == doctest::Approx(0.3));
  // The f16 counts are GradientStats' own (amp/diagnostics.h): the same definition.
  CHECK(s.values.f16_flushed == 3);
  CHECK(s.values.f16_subnormal == 1);
  CHECK(s.values.f16_overflow == 2);
}

TEST_CASE("precision_stats: FP8 shares under the per-tensor scale, its margin and power-of-two rounding") {
  // amax 448: the E4M3 scale is 448 / 448 = 1, E5M2's 57344 / 448 = 128.
  // E4M3: min subnormal 2^-9, min normal 2^-6. 2^-10 is the tie between 0 and 2^-9: to even, 0.
  const Tensor t = f64({448.0, 1.0, 0x1p-9, 0x1p-10, 0x1p-7, 0.0}, {6}, false);
  const amp::PrecisionStats s = amp::precision_stats(t);
  CHECK(s.fp8_scale[0] == 1.0);
  CHECK(s.fp8_scale[1] == 128.0);
  CHECK(s.count(DType::E4M3, Outcome::Flushed) == 1);  // 2^-10
  CHECK(s.count(DType::E4M3, Outcome::Subnormal) == 2);  // 2^-9, 2^-7
  CHECK(s.count(DType::E4M3, Outcome::Overflow) == 0);  // amax lands on 448
  // x 128: 2^-10 -> 2^-3, all normal in E5M2 (min normal 2^-14).
  for (Outcome o : {Outcome::Flushed, Outcome::Subnormal, Outcome::Overflow}) CHECK(s.count(DType::E5M2, o) == 0);

  // A margin of -1 doubles the scale: 896 is past E4M3's 464 rounding edge (NaN: overflow), 2^-10
  // becomes the smallest subnormal, 2^-7 the smallest normal.
  const amp::PrecisionStats m = amp::precision_stats(t, {.margin = -1});
  CHECK(m.fp8_scale[0] == 2.0);
  CHECK(m.count(DType::E4M3, Outcome::Overflow) == 1);
  CHECK(m.count(DType::E4M3, Outcome::Flushed) == 0);
  CHECK(m.count(DType::E4M3, Outcome::Subnormal) == 2);  // 2^-9 (from 2^-10), 2^-8 (from 2^-9)

  // amax 300: 448 / 300 = 1.49..., rounded down to a power of two: 1.
  const Tensor u = f64({300.0, -2.0}, {2}, false);
  CHECK(amp::precision_stats(u).fp8_scale[0] == doctest::Approx(448.0 / 300.0));
  CHECK(amp::precision_stats(u, {.power_of_two = true}).fp8_scale[0] == 1.0);

  // merge: counts add, amax is the larger, the scale the smaller.
  amp::PrecisionStats both = s;
  both.merge(amp::precision_stats(u));
  CHECK(both.values.count == 8);
  CHECK(both.amax == 448.0);
  CHECK(both.count(DType::E4M3, Outcome::Subnormal) == 2);
  CHECK(both.fp8_scale[0] == 1.0);
}

TEST_CASE("precision_stats: all zeros have amax 0, scale 1 and no hazards; a non-floating tensor is refused") {
  const amp::PrecisionStats z = amp::precision_stats(zeros({4}));
  CHECK(z.amax == 0.0);
  CHECK(z.zero_share() == 1.0);
  CHECK(z.fp8_scale[0] == 1.0);
  for (DType f : amp::kAllFormats) CHECK(z.count(f, Outcome::Flushed) == 0);
  check_error([] { amp::precision_stats(zeros({2}, {.dtype = DType::I32})); }, "amp::precision_stats");
}

TEST_CASE("lost_updates: an f16 weight's SGD step with a known lost share, as the optimizer counts it") {
  // lr 1, no momentum: w - g. Below 1 the f16 ulp is 2^-11, below 2 it is 2^-10.
  //   1 - 2^-12: the tie between 1 and 1 - 2^-11, to even: 1 (lost)
  //   1 - 2^-9: representable (kept)
  //   1 - 0: the step does not mean to move it (not counted)
  //   2 - 2^-11: the tie between 2 and 2 - 2^-10, to even: 2 (lost)
  Tensor w = from_vector({1.0, 1.0, 1.0, 2.0}, {4}, {.dtype = DType::F16, .requires_grad = true});
  const std::vector<double> gradient{0x1p-12, 0x1p-9, 0.0, 0x1p-11};
  w.set_grad(from_vector(gradient, {4}, {.dtype = DType::F16}));
  const std::vector<double> before = w.to_vector<double>();
  optim::SGD sgd({w}, {.lr = 1.0});
  sgd.step();
  const amp::LostUpdates lost = amp::lost_updates(before, w.to_vector<double>(), gradient);
  CHECK(lost.meant == 3);
  CHECK(lost.lost == 2);
  CHECK(lost.fraction() == doctest::Approx(2.0 / 3.0));
  CHECK(amp::lost_update_fraction(sgd) == doctest::Approx(lost.fraction()));  // the optimizer's own count
  check_error([] { amp::lost_updates({1.0}, {1.0, 2.0}, {1.0}); }, "amp::lost_updates");
}
