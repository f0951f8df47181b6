// DType properties and conversions: the rounding rules every AMP phenomenon rests on.
// Covers f16 and bf16 edge cases (subnormals, ties to even, overflow to inf, NaN), the F16C bulk
// path against the portable one bit for bit, single rounding from f64, and float -> i32.
#include <bit>
#include <cmath>
#include <limits>

#include "tests/testing.h"

using namespace mg;

namespace {

// f32 -> dtype -> f32 through the bulk converter (the F16C path for f16: counts of 8 or more).
float round_trip(float x, DType dtype) {
  std::vector<float> in(16, x), back(16);
  std::vector<std::uint16_t> stored(16);
  convert(in.data(), DType::F32, stored.data(), dtype, 16);
  convert(stored.data(), dtype, back.data(), DType::F32, 16);
  return back[3];
}
float through_f16(float x) { return round_trip(x, DType::F16); }
float through_bf16(float x) { return round_trip(x, DType::BF16); }

std::uint16_t bits(half h) { return std::bit_cast<std::uint16_t>(h); }
std::uint16_t bits(bfloat16 b) { return std::bit_cast<std::uint16_t>(b); }

}  // namespace

TEST_CASE("dtype: sizes, names, eps and max") {
  CHECK(dtype_size(DType::F32) == 4);
  CHECK(dtype_size(DType::F16) == 2);
  CHECK(dtype_size(DType::BF16) == 2);
  CHECK(dtype_size(DType::F64) == 8);
  CHECK(dtype_size(DType::I32) == 4);
  CHECK(dtype_name(DType::BF16) == "bf16");
  CHECK(fmt::format("{}", DType::F16) == "f16");
  CHECK(dtype_eps(DType::F16) == std::ldexp(1.0, -10));
  CHECK(dtype_eps(DType::BF16) == std::ldexp(1.0, -7));
  CHECK(dtype_eps(DType::F32) == std::numeric_limits<float>::epsilon());
  CHECK(dtype_max(DType::F16) == 65504.0);
  CHECK(dtype_max(DType::BF16) == static_cast<double>(std::bit_cast<float>(0x7F7F0000u)));
  CHECK(dtype_max(DType::I32) == 2147483647.0);
  CHECK(is_floating(DType::BF16));
  CHECK_FALSE(is_floating(DType::I32));
  CHECK_THROWS_AS(dtype_eps(DType::I32), Error);
}

// A value of `dtype` (converted from f64, rounded to nearest even) as its bits, in the low bits. A packed
// dtype (E2M1) converts whole bytes: the value twice, and the first element's bits kept.
static std::uint64_t bits_of(double value, DType dtype) {
  const double values[2] = {value, value};
  std::uint64_t bits = 0;
  convert(values, DType::F64, &bits, dtype, packed_group(dtype));
  const int width = dtype_info(dtype).bits;
  return width >= 64 ? bits : bits & ((std::uint64_t{1} << width) - 1);
}

static double value_of(std::uint64_t bits, DType dtype) {
  double values[2] = {};
  convert(&bits, dtype, values, DType::F64, packed_group(dtype));
  return values[0];
}

TEST_CASE("dtype: every row of MG_DTYPES is what its format does") {
  for (const DType dtype : all_dtypes()) {
    CAPTURE(dtype);
    const DTypeInfo d = dtype_info(dtype);
    CHECK(dtype_name(dtype) == d.name);
    CHECK(dtype_bytes(dtype, 4) == 4 * static_cast<std::size_t>(d.bits) / 8);
    // Every row converts to and from f32 (a host type, or the codec of core/fp8.h) and prints; E8M0,
    // powers of two alone, has no 0.
    const std::vector<double> two = dtype == DType::E8M0 ? std::vector<double>{0.5, 1} : std::vector<double>{0, 1};
    const Tensor small = from_vector(two, {2}).to(dtype);
    CHECK(small.to(DType::F32).to_vector<double>() == two);
    CHECK(to_string(small).ends_with(fmt::format("dtype={})", dtype)));
    if (!is_floating(dtype)) {
      CHECK(nonfinite_from(dtype) == 0);  // an integer is always finite
      CHECK_THROWS_AS(dtype_min_normal(dtype), Error);
      continue;
    }
    // The extremes survive a round trip; halfway below the smallest subnormal rounds to zero (a tie,
    // to the even 0); the smallest normal is 2^mantissa smallest subnormals.
    for (const double v : {d.max, -d.max, d.min_normal, d.min_subnormal})
      if (d.has_sign || v > 0) CHECK(value_of(bits_of(v, dtype), dtype) == v);
    // Halfway below the smallest subnormal rounds to zero, where there is a zero (E8M0 has none).
    if (dtype != DType::F64 && d.mantissa_bits > 0) CHECK(value_of(bits_of(d.min_subnormal / 2, dtype), dtype) == 0.0);
    CHECK(d.min_normal == std::ldexp(d.min_subnormal, d.mantissa_bits));
    CHECK(dtype_eps(dtype) == std::ldexp(1.0, -d.mantissa_bits));
    // The inf and NaN patterns NonfiniteTrace compares with: max below them, NaN (and inf) at or above.
    // A format with neither (E2M1) has nothing non-finite: every pattern is a value, NaN becomes one.
    const std::uint64_t mask = magnitude_mask(dtype), from = nonfinite_from(dtype);
    if (!d.has_inf && !d.has_nan) {
      CHECK(from == 0);
      CHECK_FALSE(std::isnan(value_of(bits_of(std::nan(""), dtype), dtype)));
      CHECK(value_of(bits_of(INFINITY, dtype), dtype) == d.max);  // saturates
      continue;
    }
    CHECK((bits_of(d.max, dtype) & mask) < from);
    if (d.has_sign) CHECK((bits_of(-d.max, dtype) & mask) < from);
    CHECK((bits_of(std::nan(""), dtype) & mask) >= from);
    if (d.has_inf) CHECK((bits_of(INFINITY, dtype) & mask) == from);
    CHECK(std::isnan(value_of(magnitude_mask(dtype), dtype)) == d.has_nan);  // all ones: NaN where there is one
  }
  CHECK(dtype_info(DType::E4M3).has_inf == false);
  CHECK(nonfinite_from(DType::E5M2) == 0x7Cu);
  CHECK(nonfinite_from(DType::F16) == 0x7C00u);
  CHECK(magnitude_mask(DType::F64) == 0x7FFFFFFFFFFFFFFFu);
  CHECK(dtype_names() == "f32, f16, bf16, f64, i32, e4m3, e5m2, i64, u8, bool, e2m1 and e8m0");
  CHECK(dtype_names(true) ==
        R"("F32", "F16", "BF16", "F64", "I32", "F8_E4M3", "F8_E5M2", "I64", "U8", "BOOL", "F4" and "F8_E8M0")");
  CHECK(is_fp8(DType::E4M3));
  CHECK(is_fp8(DType::E5M2));
  CHECK_FALSE(is_fp8(DType::F16));
  CHECK_FALSE(is_fp8(DType::E8M0));  // a scale, not an FP8 GEMM operand
  CHECK(is_coded(DType::E2M1));
  CHECK(is_coded(DType::E8M0));
  CHECK_FALSE(is_coded(DType::U8));
  CHECK(packed_group(DType::E2M1) == 2);
  CHECK(packed_group(DType::E8M0) == 1);
  CHECK(dtype_bytes(DType::E2M1, 6) == 3);
  testing::check_error([] { dtype_bytes(DType::E2M1, 3); }, "end inside a byte");
  testing::check_error([] { dtype_size(DType::E2M1); }, "packs 2 elements a byte");
  CHECK(dtype_min_normal(DType::BF16) == 0x1p-126);
  CHECK(dtype_min_subnormal(DType::F16) == 0x1p-24);
  testing::check_error([] { dtype_bytes(DType::F16, -1); }, "negative count");
  testing::check_error([] { dtype_size(static_cast<DType>(200)); }, "unknown dtype tag 200");
  CHECK(dtype_name(static_cast<DType>(200)) == "unknown");
}

TEST_CASE("dtype: f16 rounding edge cases") {
  const float smallest_subnormal = std::ldexp(1.0f, -24);
  CHECK(through_f16(smallest_subnormal) == smallest_subnormal);  // 2^-24 survives
  CHECK(bits(half(smallest_subnormal)) == 0x0001);
  CHECK(through_f16(std::ldexp(1.0f, -25)) == 0.0f);  // tie between 0 and 2^-24: even is 0
  CHECK(through_f16(1.5f * std::ldexp(1.0f, -25)) == smallest_subnormal);  // above the tie: up
  CHECK(through_f16(std::ldexp(1.0f, -14)) == std::ldexp(1.0f, -14));  // min normal
  CHECK(bits(half(std::ldexp(1.0f, -14))) == 0x0400);
  CHECK(through_f16(3.0f * std::ldexp(1.0f, -24)) == 3.0f * std::ldexp(1.0f, -24));  // subnormals are kept
  CHECK(through_f16(65504.0f) == 65504.0f);  // max, exact
  CHECK(through_f16(65519.0f) == 65504.0f);  // below the tie: down
  CHECK(std::isinf(through_f16(65520.0f)));  // the tie rounds to even: inf
  CHECK(std::isinf(through_f16(1e6f)));
  CHECK(std::isinf(through_f16(-INFINITY)));
  CHECK(through_f16(-INFINITY) < 0);
  CHECK(std::isnan(through_f16(NAN)));
  CHECK(std::signbit(through_f16(-0.0f)));
  CHECK(through_f16(1.0f + std::ldexp(1.0f, -11)) == 1.0f);  // tie at 1: to even (1.0)
  CHECK(through_f16(1.0f + 3.0f * std::ldexp(1.0f, -11)) == 1.0f + std::ldexp(1.0f, -9));  // tie: to even (up)
  CHECK(through_f16(2049.0f) == 2048.0f);  // above 2048 the spacing is 2: 2048 + 1 is lost
}

TEST_CASE("dtype: bf16 rounding edge cases") {
  CHECK(through_bf16(1.0f + std::ldexp(1.0f, -8)) == 1.0f);  // tie: to even
  CHECK(through_bf16(1.0f + 3.0f * std::ldexp(1.0f, -8)) == 1.0f + std::ldexp(1.0f, -6));
  CHECK(through_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 1.0f + std::ldexp(1.0f, -7));
  const float bf16_max = std::bit_cast<float>(0x7F7F0000u);
  CHECK(through_bf16(bf16_max) == bf16_max);
  CHECK(std::isinf(through_bf16(std::numeric_limits<float>::max())));  // above max + half ulp: inf
  CHECK(through_bf16(std::ldexp(1.0f, -133)) == std::ldexp(1.0f, -133));  // smallest subnormal
  CHECK(through_bf16(std::ldexp(1.0f, -134)) == 0.0f);  // tie: to even (0)
  CHECK(through_bf16(1.5f * std::ldexp(1.0f, -134)) == std::ldexp(1.0f, -133));
  CHECK(through_bf16(std::ldexp(1.0f, -100)) == std::ldexp(1.0f, -100));  // f32's range: no underflow
  CHECK(std::isnan(through_bf16(NAN)));
  // A NaN whose payload lies only in the low bits must stay NaN, not become inf.
  CHECK(std::isnan(through_bf16(std::bit_cast<float>(0x7F800001u))));
  CHECK(std::isinf(through_bf16(INFINITY)));
  CHECK(bits(bfloat16(1.0f)) == 0x3F80);
}

TEST_CASE("dtype: the F16C bulk path matches the portable path bit for bit") {
  // Every f16 value to f32. The only allowed difference: F16C (like a GPU) returns signalling NaNs
  // quieted; both paths still give NaN.
  std::vector<half> all(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) all[i] = std::bit_cast<half>(static_cast<std::uint16_t>(i));
  std::vector<float> fast(65536), portable(65536);
  convert(all.data(), DType::F16, fast.data(), DType::F32, 65536);
  detail::f16_to_f32_portable(all.data(), portable.data(), 65536);
  int mismatches = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    bool both_nan = std::isnan(fast[i]) && std::isnan(portable[i]);
    if (!both_nan && std::bit_cast<std::uint32_t>(fast[i]) != std::bit_cast<std::uint32_t>(portable[i])) ++mismatches;
  }
  CHECK(mismatches == 0);

  // f32 -> f16 over random bit patterns and every exact tie in the subnormal and normal range.
  std::vector<float> inputs;
  Generator generator(7);
  Tensor random_bits = randint(0, std::int64_t{1} << 32, {1 << 16}, generator, {.dtype = DType::F64});
  for (double v : random_bits.to_vector<double>())
    inputs.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(v)));
  for (int e = -26; e <= 16; ++e)
    for (float m : {1.0f, 1.5f, 1.25f, 1.0009765625f, 1.00048828125f}) inputs.push_back(std::ldexp(m, e));
  std::vector<half> h_fast(inputs.size()), h_portable(inputs.size());
  convert(inputs.data(), DType::F32, h_fast.data(), DType::F16, static_cast<std::int64_t>(inputs.size()));
  detail::f32_to_f16_portable(inputs.data(), h_portable.data(), static_cast<std::int64_t>(inputs.size()));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    bool both_nan = std::isnan(static_cast<float>(h_fast[i])) && std::isnan(static_cast<float>(h_portable[i]));
    INFO("input bits " << std::bit_cast<std::uint32_t>(inputs[i]));
    CHECK((both_nan || bits(h_fast[i]) == bits(h_portable[i])));
  }
}

TEST_CASE("dtype: f64 rounds to f16 and bf16 once, not through f32") {
  // 1 + 2^-11 + 2^-40 is just above the f16 tie between 1 and 1 + 2^-10, so it rounds up. Through f32
  // it would first become exactly the tie (2^-40 is below f32's precision) and then round to 1.
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  CHECK(static_cast<float>(scalar_cast<half>(x)) == 1.0f + std::ldexp(1.0f, -10));
  CHECK(static_cast<float>(half(static_cast<float>(x))) == 1.0f);  // the double rounding we avoid
  const double y = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  CHECK(static_cast<float>(scalar_cast<bfloat16>(y)) == 1.0f + std::ldexp(1.0f, -7));
  Tensor t = from_vector({x, -x, 65520.0, std::ldexp(1.0, -25), std::ldexp(1.0, -25) * 1.0000001}, {5},
                         {.dtype = DType::F64});
  std::vector<double> h = t.to(DType::F16).to_vector<double>();
  CHECK(h[0] == 1.0 + std::ldexp(1.0, -10));
  CHECK(h[1] == -(1.0 + std::ldexp(1.0, -10)));
  CHECK(std::isinf(h[2]));
  CHECK(h[3] == 0.0);
  CHECK(h[4] == std::ldexp(1.0, -24));
}

TEST_CASE("dtype: float to i32 truncates toward zero and saturates") {
  Tensor t = from_vector({2.7, -2.7, 1e10, -1e10, NAN, 0.0}, {6});
  CHECK(t.to(DType::I32).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{2, -2, 2147483647, -2147483647 - 1, 0, 0});
  Tensor labels = from_vector({3, -1, 7}, {3}, {.dtype = DType::I32});
  CHECK(labels.to(DType::F16).to_vector<double>() == std::vector<double>{3, -1, 7});
}

TEST_CASE("dtype: casts between every pair keep exactly representable values") {
  const std::vector<double> values{0.0, 1.0, -2.5, 0.375, 1024.0, -0.0};
  for (DType from : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (DType to : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
      INFO(dtype_name(from) << " -> " << dtype_name(to));
      Tensor t = from_vector(values, {6}, {.dtype = from});
      CHECK(t.to(to).dtype() == to);
      CHECK(t.to(to).to_vector<double>() == values);
    }
  }
}

TEST_CASE("dtype: i32 rounds to f16 and bf16 once") {
  // 2^24 + 2^16 + 1 lies just above the bf16 tie between 2^24 + 0 and 2^24 + 2^17 (spacing 2^17):
  // correct rounding goes up; through f32 it would first lose the +1 and land on the tie (even: down).
  Tensor t = tensor({16842753}, {.dtype = DType::I32});
  CHECK(t.to(DType::BF16).item() == 16908288.0);
  CHECK(tensor({2049}, {.dtype = DType::I32}).to(DType::F16).item() == 2048.0);  // tie: to even
  CHECK(tensor({2051}, {.dtype = DType::I32}).to(DType::F16).item() == 2052.0);  // tie: to even (up)
  CHECK(tensor({-2147483648.0}, {.dtype = DType::I32}).item() == -2147483648.0);  // the whole i32 range
}
