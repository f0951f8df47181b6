// FP4's E2M1 and the MX scale's E8M0 (core/fp8.h) held bit for bit to ml_dtypes (float4_e2m1fn,
// float8_e8m0fnu), whose answers scripts/make-fp4-fixtures wrote to tests/fixtures/fp4/: every code's
// value, and ~9.6k f32 inputs (every bf16 of magnitude 2^-4..2^5, one f32 ulp either side of every
// E2M1 tie and of E8M0's 1.5 * 2^e for every exponent, subnormals, specials, random bit patterns).
// Then named cases a reader can check by hand, the packing of two E2M1 codes a byte, and tensors.
#include "tests/testing.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "core/fp8.h"
#include "tests/hex_fixture.h"

using mg::DType;
using mg::fp8::Overflow;

namespace {

std::vector<std::vector<std::uint32_t>> read_fixture(const std::string& name, std::size_t fields) {
  return mg::testing::read_hex_fixture("fp4", name, fields, "scripts/make-fp4-fixtures");
}

std::string hex(std::uint32_t value) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "%08x", value);
  return buffer;
}
bool is_nan_bits(std::uint32_t bits) { return (bits & 0x7FFFFFFFu) > 0x7F800000u; }
std::uint32_t bits_of(float x) { return mg::fp8::detail::float_bits(x); }
std::uint8_t e2m1(float x) { return mg::fp8::encode(x, DType::E2M1, Overflow::NonFinite); }
std::uint8_t e8m0(float x, Overflow overflow = Overflow::NonFinite) {
  return mg::fp8::encode(x, DType::E8M0, overflow);
}

}  // namespace

TEST_CASE("fp4: every code decodes to ml_dtypes' value, bit for bit") {
  const auto rows = read_fixture("codes.txt", 3);
  REQUIRE(rows.size() == 256);
  for (const auto& row : rows) {
    const auto code = static_cast<std::uint8_t>(row[0]);
    INFO("code " << hex(code) << ": e2m1 ml_dtypes " << hex(row[1]) << ", e8m0 ml_dtypes " << hex(row[2]));
    if (code < 16) CHECK(bits_of(mg::fp8::decode(code, DType::E2M1)) == row[1]);
    const std::uint32_t ours = bits_of(mg::fp8::decode(code, DType::E8M0));
    if (is_nan_bits(row[2]))
      CHECK(is_nan_bits(ours));  // 0xFF: a NaN (its payload is the library's choice)
    else
      CHECK(ours == row[2]);
  }
}

TEST_CASE("fp4: encode matches ml_dtypes on every fixture input") {
  const auto rows = read_fixture("casts.txt", 3);
  REQUIRE(rows.size() > 9000);
  int differ_e2m1 = 0, differ_e8m0 = 0;
  for (const auto& row : rows) {
    const float x = mg::fp8::detail::bits_float(row[0]);
    if (e2m1(x) != row[1] && ++differ_e2m1 <= 5)
      FAIL_CHECK("e2m1 of " << hex(row[0]) << ": " << int(e2m1(x)) << ", ml_dtypes " << row[1]);
    if (e8m0(x) != row[2] && ++differ_e8m0 <= 5)
      FAIL_CHECK("e8m0 of " << hex(row[0]) << ": " << int(e8m0(x)) << ", ml_dtypes " << row[2]);
  }
  CHECK(differ_e2m1 == 0);
  CHECK(differ_e8m0 == 0);
}

TEST_CASE("fp4: named cases") {
  // The eight magnitudes, and ties to even between them: 0.25 -> 0, 0.75 -> 1 (code 2), 1.25 -> 1,
  // 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4 (the even code of 4 and 6).
  CHECK(e2m1(0.5f) == 0x1);
  CHECK(e2m1(6.0f) == 0x7);
  CHECK(e2m1(-1.5f) == 0xB);
  CHECK(e2m1(0.25f) == 0x0);
  CHECK(e2m1(0.2500001f) == 0x1);
  CHECK(e2m1(0.75f) == 0x2);
  CHECK(e2m1(1.25f) == 0x2);
  CHECK(e2m1(1.75f) == 0x4);
  CHECK(e2m1(2.5f) == 0x4);
  CHECK(e2m1(3.5f) == 0x6);
  CHECK(e2m1(5.0f) == 0x6);
  // No inf or NaN: everything past 6 saturates in both modes, and NaN becomes the other sign's zero.
  CHECK(e2m1(7.0f) == 0x7);
  CHECK(e2m1(1e30f) == 0x7);
  CHECK(e2m1(-std::numeric_limits<float>::infinity()) == 0xF);
  CHECK(mg::fp8::encode(100.0f, DType::E2M1, Overflow::Saturate) == 0x7);
  CHECK(e2m1(std::numeric_limits<float>::quiet_NaN()) == 0x8);
  CHECK(e2m1(-std::numeric_limits<float>::quiet_NaN()) == 0x0);
  CHECK(e2m1(-0.0f) == 0x8);
  CHECK(mg::fp8::decode(0x8, DType::E2M1) == 0.0f);
  CHECK(std::signbit(mg::fp8::decode(0x8, DType::E2M1)));
  // E8M0: powers of two, ties up; no zero or sign (NaN), a clamp at the bottom.
  CHECK(e8m0(1.0f) == 127);
  CHECK(e8m0(1.4999999f) == 127);
  CHECK(e8m0(1.5f) == 128);
  CHECK(e8m0(3.0f) == 129);
  CHECK(e8m0(12.0f) == 131);
  CHECK(e8m0(0.75f) == 127);
  CHECK(e8m0(0.0f) == 0xFF);
  CHECK(e8m0(-0.0f) == 0xFF);
  CHECK(e8m0(-1.0f) == 0xFF);
  CHECK(e8m0(0x1p127f) == 0xFE);
  CHECK(e8m0(0x1.8p127f) == 0xFF);  // past 2^127: NaN under the format's own rule ...
  CHECK(e8m0(0x1.8p127f, Overflow::Saturate) == 0xFE);  // ... 2^127 when saturating
  CHECK(e8m0(std::numeric_limits<float>::infinity(), Overflow::Saturate) == 0xFE);
  CHECK(e8m0(0x1p-127f) == 0x00);
  CHECK(e8m0(0x1p-140f) == 0x00);
  CHECK(e8m0(0x1.0002p-127f) == 0x01);  // just above 2^-127, an f32 subnormal: up to 2^-126 (ml_dtypes)
  // The constants of FormatInfo the recipes read.
  CHECK(mg::fp8::format_info(DType::E2M1).max == 6.0f);
  CHECK(mg::fp8::format_info(DType::E2M1).emax == 2);
  CHECK(mg::fp8::format_info(DType::E8M0).emax == 127);
}

TEST_CASE("fp4: decode then encode gives back every E2M1 code; every E8M0 code but NaN") {
  for (std::uint8_t code = 0; code < 16; ++code) {
    CAPTURE(int(code));
    CHECK(e2m1(mg::fp8::decode(code, DType::E2M1)) == code);
  }
  for (int code = 0; code < 255; ++code) {
    CAPTURE(code);
    CHECK(e8m0(mg::fp8::decode(static_cast<std::uint8_t>(code), DType::E8M0)) == code);
  }
}

TEST_CASE("fp4: two codes a byte, element 2k in the low nibble") {
  CHECK(mg::fp8::pack_codes(0x1, 0x2) == 0x21);
  const std::uint8_t bytes[2] = {0x21, 0xF7};
  CHECK(mg::fp8::load_code(bytes, 0, DType::E2M1) == 0x1);
  CHECK(mg::fp8::load_code(bytes, 1, DType::E2M1) == 0x2);
  CHECK(mg::fp8::load_code(bytes, 2, DType::E2M1) == 0x7);
  CHECK(mg::fp8::load_code(bytes, 3, DType::E2M1) == 0xF);
  CHECK(mg::fp8::load_code(bytes, 1, DType::E8M0) == 0xF7);  // a byte each
}

TEST_CASE("fp4 dtypes: tensors convert, print, slice on whole bytes, and refuse what cannot be packed") {
  const mg::Tensor x = mg::from_vector({0.5, 1.0, -6.0, 100.0, 0.25, 2.5}, {2, 3});
  const mg::Tensor q = x.to(DType::E2M1);
  CHECK(q.dtype() == DType::E2M1);
  CHECK(q.nbytes() == 3);
  CHECK(q.host_bytes("test") == std::vector<std::uint8_t>{0x21, 0x7F, 0x40});
  CHECK(q.to(DType::F32).to_vector<double>() == std::vector<double>{0.5, 1, -6, 6, 0, 2});
  CHECK(q.to(DType::BF16).to(DType::F64).to_vector<double>() == std::vector<double>{0.5, 1, -6, 6, 0, 2});
  CHECK(q.to(DType::E4M3).to(DType::F32).to_vector<double>() == std::vector<double>{0.5, 1, -6, 6, 0, 2});
  CHECK(mg::to_string(q).find("-6") != std::string::npos);
  CHECK(mg::to_string(q).find("dtype=e2m1") != std::string::npos);
  // A large tensor goes through the thread pool's chunks, each on a whole byte.
  std::vector<double> many(100002);
  for (std::size_t i = 0; i < many.size(); ++i) many[i] = static_cast<double>(i % 13) * 0.5 - 3.0;
  const mg::Tensor big = mg::from_vector(many, {static_cast<std::int64_t>(many.size())});
  const std::vector<double> back = big.to(DType::E2M1).to(DType::F32).to_vector<double>();
  int wrong = 0;
  for (std::size_t i = 0; i < many.size(); ++i)
    wrong += back[i] != mg::fp8::decode(e2m1(static_cast<float>(many[i])), DType::E2M1);
  CHECK(wrong == 0);
  // Rows of an even length slice and reshape on whole bytes; an odd count cannot exist.
  const mg::Tensor rows = mg::from_vector({1, 2, 3, 4, 6, -1, -2, -3}, {4, 2}).to(DType::E2M1);
  CHECK(rows.slice(1, 3).to(DType::F32).to_vector<double>() == std::vector<double>{3, 4, 6, -1});
  CHECK(mg::reshape(rows, {2, 4}).dtype() == DType::E2M1);
  mg::testing::check_error([&] { (void)mg::from_vector({1, 2, 3}, {3}).to(DType::E2M1); }, "end inside a byte");
  mg::testing::check_error([&] { (void)mg::Tensor::empty({3}, {.dtype = DType::E2M1}); }, "end inside a byte");
  mg::testing::check_error([&] { (void)q.slice(0, 1); }, "end inside a byte");  // 3 elements
  mg::testing::check_error([&] { (void)mg::transpose(rows, 0, 1); }, "packs 2 elements a byte");
  // Codes are not computed in; E8M0 tensors hold scales.
  mg::testing::check_error([&] { (void)mg::add(q, q); }, "hold codes (4 bits each)");
  const mg::Tensor scales = mg::from_vector({1.0, 0.25, 3.0}, {3}).to(DType::E8M0);
  CHECK(scales.host_bytes("test") == std::vector<std::uint8_t>{127, 125, 129});
  CHECK(scales.to(DType::F32).to_vector<double>() == std::vector<double>{1, 0.25, 4});
  mg::testing::check_error([&] { (void)mg::exp(scales); }, "hold codes (8 bits each)");
}
