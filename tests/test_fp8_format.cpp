// The FP8 codec (core/fp8.h) held bit for bit to two independent references, ml_dtypes and CUDA's
// cuda_fp8.h, whose answers scripts/make-fp8-fixtures wrote to tests/fixtures/fp8/: every code's
// value, and ~16k f32 inputs (every bf16 of magnitude 2^-20..2^18, one f32 ulp either side of every
// tie, specials, random bit patterns) encoded in both formats and both overflow modes. Then named
// cases a reader can check by hand, E8M0, and the round trip of every code.
#include "tests/testing.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "core/fp8.h"
#include "tests/hex_fixture.h"
#include "tests/temp_dir.h"

using mg::DType;
using mg::fp8::Overflow;

namespace {

std::vector<std::vector<std::uint32_t>> read_fixture(const std::string& name, std::size_t fields) {
  return mg::testing::read_hex_fixture("fp8", name, fields, "scripts/make-fp8-fixtures");
}

std::string hex(std::uint32_t value, int digits) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "%0*x", digits, value);
  return buffer;
}
std::string text(float x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.9g", x);
  return buffer;
}

// NaN codes, by the formats' definitions (not through the codec under test).
bool is_nan_code(std::uint32_t code, DType format) {
  return format == DType::E4M3 ? (code & 0x7Fu) == 0x7Fu : (code & 0x7Fu) > 0x7Cu;
}
bool is_nan_bits(std::uint32_t bits) { return (bits & 0x7FFFFFFFu) > 0x7F800000u; }
std::string name(DType format) { return format == DType::E4M3 ? "e4m3" : "e5m2"; }

}  // namespace

TEST_CASE("fp8: every code decodes to ml_dtypes' and CUDA's value, bit for bit") {
  const auto rows = read_fixture("codes.txt", 5);
  REQUIRE(rows.size() == 256);
  for (const DType format : {DType::E4M3, DType::E5M2}) {
    const std::size_t column = format == DType::E4M3 ? 1 : 3;
    int exact = 0, nans = 0;
    for (const auto& row : rows) {
      const std::uint32_t ours = mg::fp8::detail::float_bits(
          mg::fp8::decode(static_cast<std::uint8_t>(row[0]), format));
      const std::uint32_t ml = row[column], cuda = row[column + 1];
      INFO(name(format) << " code " << hex(row[0], 2) << ": ours " << hex(ours, 8) << ", ml_dtypes " << hex(ml, 8)
                        << ", cuda " << hex(cuda, 8));
      if (is_nan_bits(ml) || is_nan_bits(cuda)) {
        CHECK(is_nan_bits(ours));
        CHECK(is_nan_bits(ml));
        CHECK(is_nan_bits(cuda));
        CHECK((ours >> 31) == (ml >> 31));  // the sign of the NaN code, as ml_dtypes keeps it
        ++nans;
      } else {
        CHECK(ours == ml);
        CHECK(ours == cuda);
        ++exact;
      }
    }
    MESSAGE(name(format) << ": " << exact << " codes equal bit for bit to both, " << nans << " NaN in all three");
  }
}

TEST_CASE("fp8: encode matches ml_dtypes and CUDA on every fixture input") {
  const auto rows = read_fixture("casts.txt", 7);
  REQUIRE(rows.size() > 10000);
  // Each comparison: the fixture column, what we encode with, and whether the reference is CUDA. CUDA
  // writes 0x7F for every NaN input, sign dropped, where ml_dtypes (and we) keep the sign, and E5M2's
  // NaN is 0x7E: for a NaN input ours need only be a NaN code of the format; every other input, exact.
  struct Comparison {
    std::string what;
    DType format;
    Overflow overflow;
    std::size_t column;
    bool cuda;
    int exact = 0, nan_only = 0, mismatches = 0;
  };
  Comparison comparisons[] = {
      {"e4m3 NonFinite vs ml_dtypes", DType::E4M3, Overflow::NonFinite, 1, false},
      {"e4m3 Saturate vs cuda satfinite", DType::E4M3, Overflow::Saturate, 2, true},
      {"e4m3 NonFinite vs cuda nosat", DType::E4M3, Overflow::NonFinite, 3, true},
      {"e5m2 NonFinite vs ml_dtypes", DType::E5M2, Overflow::NonFinite, 4, false},
      {"e5m2 Saturate vs cuda satfinite", DType::E5M2, Overflow::Saturate, 5, true},
      {"e5m2 NonFinite vs cuda nosat", DType::E5M2, Overflow::NonFinite, 6, true},
  };
  int reported = 0;
  for (const auto& row : rows) {
    const float x = mg::fp8::detail::bits_float(row[0]);
    for (Comparison& c : comparisons) {
      const std::uint32_t ours = mg::fp8::encode(x, c.format, c.overflow), theirs = row[c.column];
      const bool nan_only = c.cuda && is_nan_bits(row[0]) && is_nan_code(theirs, c.format);
      const bool ok = nan_only ? is_nan_code(ours, c.format) : ours == theirs;
      if (ok) {
        ++(nan_only ? c.nan_only : c.exact);
        continue;
      }
      ++c.mismatches;
      if (++reported <= 10)
        FAIL_CHECK(c.what << ": input " << hex(row[0], 8) << " (" << text(x) << "): ours " << hex(ours, 2)
                          << ", reference " << hex(theirs, 2));
    }
  }
  for (const Comparison& c : comparisons) {
    MESSAGE(c.what << ": " << c.exact << " inputs bit for bit, " << c.nan_only << " NaN for NaN, " << c.mismatches
                   << " mismatches");
    CHECK_MESSAGE(c.mismatches == 0, c.what << ": " << c.mismatches << " mismatches (the first 10 in all printed)");
  }
}

TEST_CASE("fp8: named cases") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    const char* what;
    float x;
    DType format;
    std::uint8_t nonfinite, saturate;  // the code under each Overflow mode
  };
  const Case cases[] = {
      {"E4M3 max 448", 448.0f, DType::E4M3, 0x7E, 0x7E},
      {"464, the tie of 448 and 480: to even 448", 464.0f, DType::E4M3, 0x7E, 0x7E},
      {"464.00003, just past the tie: overflow", std::nextafter(464.0f, inf), DType::E4M3, 0x7F, 0x7E},
      {"1e6", 1e6f, DType::E4M3, 0x7F, 0x7E},
      {"2^-9, the smallest subnormal", std::ldexp(1.0f, -9), DType::E4M3, 0x01, 0x01},
      {"2^-10, the tie of 0 and 2^-9: to even 0", std::ldexp(1.0f, -10), DType::E4M3, 0x00, 0x00},
      {"1.5 * 2^-10, past the tie: up", 1.5f * std::ldexp(1.0f, -10), DType::E4M3, 0x01, 0x01},
      {"7 * 2^-9, the largest subnormal", 7.0f * std::ldexp(1.0f, -9), DType::E4M3, 0x07, 0x07},
      {"7.5 * 2^-9, the tie of it and 2^-6: to even 2^-6", 7.5f * std::ldexp(1.0f, -9), DType::E4M3, 0x08, 0x08},
      {"2^-6, the smallest normal", std::ldexp(1.0f, -6), DType::E4M3, 0x08, 0x08},
      {"1.0", 1.0f, DType::E4M3, 0x38, 0x38},
      {"1.0625, the tie of 1 and 1.125: to even 1", 1.0625f, DType::E4M3, 0x38, 0x38},
      {"1.1875, the tie of 1.125 and 1.25: to even 1.25", 1.1875f, DType::E4M3, 0x3A, 0x3A},
      {"-1.0", -1.0f, DType::E4M3, 0xB8, 0xB8},
      {"-0.0 keeps its sign", -0.0f, DType::E4M3, 0x80, 0x80},
      {"+inf: E4M3 has none", inf, DType::E4M3, 0x7F, 0x7E},
      {"-inf", -inf, DType::E4M3, 0xFF, 0xFE},
      {"NaN", nan, DType::E4M3, 0x7F, 0x7F},
      {"-NaN", std::copysign(nan, -1.0f), DType::E4M3, 0xFF, 0xFF},
      {"E5M2 max 57344", 57344.0f, DType::E5M2, 0x7B, 0x7B},
      {"just below 61440", std::nextafter(61440.0f, 0.0f), DType::E5M2, 0x7B, 0x7B},
      {"61440, the tie of 57344 and 2^16: to even, inf", 61440.0f, DType::E5M2, 0x7C, 0x7B},
      {"2^-16, the smallest subnormal", std::ldexp(1.0f, -16), DType::E5M2, 0x01, 0x01},
      {"2^-17, the tie of 0 and 2^-16: to even 0", std::ldexp(1.0f, -17), DType::E5M2, 0x00, 0x00},
      {"2^-14, the smallest normal", std::ldexp(1.0f, -14), DType::E5M2, 0x04, 0x04},
      {"1.0", 1.0f, DType::E5M2, 0x3C, 0x3C},
      {"-0.0", -0.0f, DType::E5M2, 0x80, 0x80},
      {"+inf", inf, DType::E5M2, 0x7C, 0x7B},
      {"-inf", -inf, DType::E5M2, 0xFC, 0xFB},
      {"NaN", nan, DType::E5M2, 0x7E, 0x7E},
      {"-NaN", std::copysign(nan, -1.0f), DType::E5M2, 0xFE, 0xFE},
  };
  for (const Case& c : cases) {
    INFO(name(c.format) << ": " << c.what);
    CHECK(hex(mg::fp8::encode(c.x, c.format, Overflow::NonFinite), 2) == hex(c.nonfinite, 2));
    CHECK(hex(mg::fp8::encode(c.x, c.format, Overflow::Saturate), 2) == hex(c.saturate, 2));
  }
}

TEST_CASE("fp8: E8M0 scales are exact powers of two, clamped, 0xFF NaN") {
  for (int e = -127; e <= 127; ++e) {
    INFO("exponent " << e);
    CHECK(mg::fp8::encode_e8m0(e) == e + 127);
    CHECK(mg::fp8::decode_e8m0(mg::fp8::encode_e8m0(e)) == std::ldexp(1.0f, e));
  }
  CHECK(mg::fp8::decode_e8m0(0x00) == std::ldexp(1.0f, -127));  // an f32 subnormal
  CHECK(mg::fp8::encode_e8m0(-128) == 0x00);
  CHECK(mg::fp8::encode_e8m0(-1000) == 0x00);
  CHECK(mg::fp8::encode_e8m0(128) == 0xFE);  // never the NaN code
  CHECK(mg::fp8::encode_e8m0(1000) == 0xFE);
  CHECK(std::isnan(mg::fp8::decode_e8m0(mg::fp8::kE8M0Nan)));
  CHECK(mg::fp8::kE8M0Nan == 0xFF);
}

TEST_CASE("fp8: decode then encode gives back every non-NaN code") {
  for (const DType format : {DType::E4M3, DType::E5M2}) {
    const std::uint8_t max_code = mg::fp8::format_info(format).max_code;
    int checked = 0;
    for (unsigned code = 0; code < 256; ++code) {
      if (is_nan_code(code, format)) continue;
      const float x = mg::fp8::decode(static_cast<std::uint8_t>(code), format);
      INFO(name(format) << " code " << hex(code, 2) << " value " << text(x));
      CHECK(mg::fp8::encode(x, format, Overflow::NonFinite) == code);
      // Saturate sends E5M2's infinities to +-max; every finite code comes back.
      const unsigned saturated = std::isinf(x) ? (code & 0x80u) | max_code : code;
      CHECK(mg::fp8::encode(x, format, Overflow::Saturate) == saturated);
      ++checked;
    }
    MESSAGE(name(format) << ": " << checked << " codes round trip in both modes");
  }
}

// ---- E4M3 and E5M2 as tensor dtypes (core/dtype.h): storage, conversion, printing, files ---------

namespace {
std::vector<std::uint8_t> codes_of(const mg::Tensor& t) {
  const auto* bytes = static_cast<const std::uint8_t*>(t.data_ptr());
  return {bytes, bytes + t.numel()};
}
}  // namespace

TEST_CASE("fp8 dtypes: the table's constants, and conversions of tensors") {
  using mg::DType;
  CHECK(mg::dtype_size(DType::E4M3) == 1);
  CHECK(mg::dtype_name(DType::E5M2) == "e5m2");
  CHECK(mg::dtype_eps(DType::E4M3) == 0.125);  // 3 mantissa bits
  CHECK(mg::dtype_eps(DType::E5M2) == 0.25);
  CHECK(mg::dtype_max(DType::E4M3) == 448.0);
  CHECK(mg::dtype_max(DType::E5M2) == 57344.0);
  CHECK(mg::is_fp8(DType::E4M3));
  CHECK_FALSE(mg::is_low_precision(DType::E4M3));
  CHECK(mg::dtype_file_name(DType::E4M3) == "F8_E4M3");

  // f32 -> E4M3 follows the format's own rule (NaN past 464, as PyTorch's .to(float8_e4m3fn));
  // the values come back exactly, in every dtype.
  const mg::Tensor x = mg::from_vector({1.0, -0.0, 1.0625, 1.1875, 464.0, 465.0, 0x1p-10, 3.0 * 0x1p-11}, {8});
  const mg::Tensor q = x.to(DType::E4M3);
  CHECK(q.dtype() == DType::E4M3);
  CHECK(codes_of(q) == std::vector<std::uint8_t>{0x38, 0x80, 0x38, 0x3A, 0x7E, 0x7F, 0x00, 0x01});
  const mg::Tensor back = q.to(DType::F32);
  CHECK(back.data<float>()[3] == 1.25f);
  CHECK(std::isnan(back.data<float>()[5]));
  CHECK(q.to(DType::BF16).to(DType::F32).data<float>()[4] == 448.0f);
  CHECK(q.to(DType::F16).to(DType::F64).data<double>()[7] == 0x1p-9);
  // E5M2 overflows to inf; f16 and bf16 inputs round once from their exact f32 values.
  const mg::Tensor big = mg::from_vector({61408.0, 61440.0, -1e6}, {3}, {.dtype = DType::F16}).to(DType::E5M2);
  CHECK(codes_of(big) == std::vector<std::uint8_t>{0x7B, 0x7C, 0xFC});
  // f64 rounds once: 1 + 2^-4 + 2^-40 is just above E4M3's tie between 1 and 1.125, so it rounds up;
  // through f32 (where 2^-40 is lost) it would be a tie and round to even, down to 1.
  const mg::Tensor fine = mg::from_vector({1.0 + 0x1p-4 + 0x1p-40}, {1}, {.dtype = DType::F64}).to(DType::E4M3);
  CHECK(codes_of(fine) == std::vector<std::uint8_t>{0x39});
  // E4M3 <-> E5M2 through their exact values: 1.125 is not an E5M2 value (a tie: to even, 1.0).
  CHECK(codes_of(mg::from_vector({1.125}, {1}).to(DType::E4M3).to(DType::E5M2)) == std::vector<std::uint8_t>{0x3C});
  // Saturating conversion, as the FP8 recipes use it (core/convert.h).
  const float inputs[3] = {500.0f, -std::numeric_limits<float>::infinity(), 1.0f};
  std::uint8_t out[3];
  mg::convert(inputs, DType::F32, out, DType::E4M3, 3, mg::fp8::Overflow::Saturate);
  CHECK(out[0] == 0x7E);
  CHECK(out[1] == 0xFE);
  CHECK(out[2] == 0x38);
}

TEST_CASE("fp8 dtypes: printed as values, saved and loaded as safetensors' F8_E4M3 and F8_E5M2") {
  const mg::Tensor q = mg::from_vector({0.5, -448.0, 0x1p-9}, {3}).to(mg::DType::E4M3);
  CHECK(q.slice(1, 2).item() == -448.0);
  const std::string text = mg::to_string(q);
  CHECK(text.find("-448") != std::string::npos);
  CHECK(text.find("e4m3") != std::string::npos);
  const mg::Tensor g = mg::from_vector({-57344.0, 0x1p-16}, {2}).to(mg::DType::E5M2);
  mg::testing::TempDir tmp;
  const std::string path = tmp / "fp8.safetensors";
  mg::data::save_safetensors(path, {{"weight_codes", q}, {"grad_codes", g}});
  const mg::data::SafetensorsFile file = mg::data::load_safetensors(path);
  REQUIRE(file.tensors.count("weight_codes") == 1);
  CHECK(file.tensors.at("weight_codes").dtype() == mg::DType::E4M3);
  CHECK(codes_of(file.tensors.at("weight_codes")) == codes_of(q));
  CHECK(file.tensors.at("grad_codes").dtype() == mg::DType::E5M2);
  CHECK(codes_of(file.tensors.at("grad_codes")) == codes_of(g));
}

TEST_CASE("fp8 dtypes: arithmetic refuses codes with an error that says to convert first") {
  const mg::Tensor q = mg::from_vector({1.0, 2.0}, {2}).to(mg::DType::E4M3);
  mg::testing::check_error([&] { (void)mg::exp(q); }, "convert to f32 or bf16 first");
  mg::testing::check_error([&] { (void)mg::add(q, q); }, "hold FP8 codes");
  CHECK(q.clone().dtype() == mg::DType::E4M3);  // a copy is not arithmetic
  CHECK(mg::reshape(q, {2, 1}).dtype() == mg::DType::E4M3);
}
