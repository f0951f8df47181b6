// FP4 quantisation (kernels/fp4.h, kernels/fp4_scale.h): NVFP4's two levels of scales and MXFP4's E8M0
// scales on values worked by hand; every code and scale against a plain per-element reference for
// ragged shapes and 2-D blocks; the error bound that follows from the scales; 2-D weight blocks giving
// W and W^T one set of codes; stochastic rounding (unbiased, keyed by its stream); zeros, NaN, flushed
// blocks and the ends of the decode; and the errors.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/fp4.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

using kernels::Fp4Format;
using kernels::Fp4Rule;
using kernels::Fp4Tensor;

// Element i's code, and block b's scale code.
std::vector<std::uint8_t> codes_of(const Fp4Tensor& q) {
  const std::vector<unsigned char> bytes = q.codes.to(Device::cpu()).host_bytes("test");
  std::vector<std::uint8_t> codes;
  for (std::int64_t i = 0; i < q.codes.numel(); ++i) codes.push_back(fp8::load_code(bytes.data(), i, DType::E2M1));
  return codes;
}
std::vector<std::uint8_t> scales_of(const Fp4Tensor& q) {
  const std::vector<unsigned char> bytes = q.scales.to(Device::cpu()).host_bytes("test");
  return {bytes.begin(), bytes.end()};
}
float factor_of(const Fp4Tensor& q) { return static_cast<float>(q.tensor_factor.to(Device::cpu()).item()); }

// What x stands for after quantisation: decode(code) * decode(scale) * the tensor's factor, in f64.
std::vector<double> dequantized(const Fp4Tensor& q) {
  const std::vector<double> decoded = kernels::fp4_decode(q, DType::F32).to_vector<double>();
  std::vector<double> out;
  for (double v : decoded) out.push_back(v * factor_of(q));
  return out;
}

// The reference: the rules of kernels/fp4_scale.h written per element, with the block found from (r, c).
struct Reference {
  std::vector<std::uint8_t> codes, scales;
  float factor;
};
Reference reference(const std::vector<float>& x, std::int64_t rows, std::int64_t cols, kernels::Fp8Blocks blocks,
                    const Fp4Rule& rule) {
  const std::int64_t br = blocks.rows > 0 ? blocks.rows : rows, bc = blocks.cols > 0 ? blocks.cols : cols;
  const std::int64_t grid_rows = (rows + br - 1) / br, grid_cols = (cols + bc - 1) / bc;
  std::vector<float> block_amax(static_cast<std::size_t>(grid_rows * grid_cols), 0.0f);
  float amax = 0.0f;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      float& m = block_amax[static_cast<std::size_t>(r / br * grid_cols + c / bc)];
      m = std::max(m, std::fabs(x[static_cast<std::size_t>(r * cols + c)]));
      amax = std::max(amax, std::fabs(x[static_cast<std::size_t>(r * cols + c)]));
    }
  Reference out;
  for (float m : block_amax) out.scales.push_back(kernels::fp4_block_scale(m, amax, rule.format));
  out.factor = kernels::fp4_tensor_factor(amax, rule);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::int64_t i = r * cols + c;
      const std::uint8_t scale = out.scales[static_cast<std::size_t>(r / br * grid_cols + c / bc)];
      // The general encode and the element's own Philox word: not the kernels' comparisons and cache.
      float scaled = x[static_cast<std::size_t>(i)] * kernels::fp4_encode_factor(scale, amax, rule);
      if (rule.stochastic)
        scaled = stochastic::stochastic_round(scaled, DType::E2M1,
                                              stochastic::rounding_word(rule.stream, static_cast<std::uint64_t>(i)));
      out.codes.push_back(fp8::encode(scaled, DType::E2M1, fp8::Overflow::Saturate));
    }
  return out;
}

Tensor matrix(const std::vector<double>& values, std::int64_t rows, std::int64_t cols) {
  return from_vector(values, {rows, cols});
}

}  // namespace

TEST_CASE("nvfp4: the scales and codes of a block worked by hand") {
  // One block of 16, amax 3: S_enc = 448 * 6 / 3 = 896; the block's scale e4m3(3 / 6 * 896 = 448) = 448
  // exactly, so values are multiplied by 896 / 448 = 2 before rounding to E2M1.
  const Tensor x = matrix({3, -3, 1.5, 0.75, 0.5, 0.25, 0.1, -0.3, 1.2, 2.2, 0, -0, 1, 2, 0.6, -1.1}, 1, 16);
  const Fp4Tensor q = kernels::fp4_quantize(x, {1, 16}, {.format = Fp4Format::Nv});
  CHECK(q.scales.dtype() == DType::E4M3);
  CHECK(q.codes.dtype() == DType::E2M1);
  REQUIRE(scales_of(q).size() == 1);
  CHECK(fp8::decode(scales_of(q)[0], DType::E4M3) == 448.0f);
  CHECK(factor_of(q) == 1.0f / 896.0f);
  // 2x, rounded to E2M1 (+-{0, 0.5, 1, 1.5, 2, 3, 4, 6}, ties to even): 6, -6, 3, 1.5, 1, 0.5, 0.2 -> 0
  // (below 0.25), -0.6 -> -0.5, 2.4 -> 2, 4.4 -> 4, 0, -0, 2, 4, 1.2 -> 1, -2.2 -> -2.
  const std::vector<float> expected{6, -6, 3, 1.5, 1, 0.5, 0, -0.5, 2, 4, 0, 0, 2, 4, 1, -2};
  const std::vector<std::uint8_t> codes = codes_of(q);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("element " << i);
    CHECK(fp8::decode(codes[i], DType::E2M1) == expected[i]);
  }
  // Dequantised: code * 448 / 896.
  const std::vector<double> back = dequantized(q);
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(back[i] == doctest::Approx(expected[i] / 2.0).epsilon(1e-6));
}

TEST_CASE("mxfp4: E8M0 scales by the spec's floor rule, worked by hand") {
  // Block 0 (32 values) has amax 7: floor(log2 7) - 2 = 0, scale 2^0; 7 saturates to 6 and 5 (a tie of 4
  // and 6) goes to the even 4. Block 1 has amax 0.3: floor(log2 0.3) - 2 = -4, scale 2^-4, so 0.3 -> 4.8 -> 4.
  std::vector<double> values(64, 0.0);
  values[0] = 7;
  values[1] = 5;
  values[2] = -2.5;  // a tie of 2 and 3: the even 2
  values[32] = 0.3;
  values[33] = -0.1;  // 1.6 -> 1.5
  const Fp4Tensor q = kernels::fp4_quantize(matrix(values, 2, 32), {1, 32}, {.format = Fp4Format::Mx});
  CHECK(q.scales.dtype() == DType::E8M0);
  const std::vector<std::uint8_t> scales = scales_of(q);
  CHECK(scales == std::vector<std::uint8_t>{127, 123});
  CHECK(factor_of(q) == 1.0f);
  const std::vector<std::uint8_t> codes = codes_of(q);
  CHECK(fp8::decode(codes[0], DType::E2M1) == 6.0f);
  CHECK(fp8::decode(codes[1], DType::E2M1) == 4.0f);
  CHECK(fp8::decode(codes[2], DType::E2M1) == -2.0f);
  CHECK(fp8::decode(codes[32], DType::E2M1) == 4.0f);
  CHECK(fp8::decode(codes[33], DType::E2M1) == -1.5f);
  // Rounded stochastically, Tseng et al.'s 3/4 comes first, and 4/3 is the tensor's factor.
  const Fp4Tensor s = kernels::fp4_quantize(matrix(values, 2, 32), {1, 32},
                                            {.format = Fp4Format::Mx, .stochastic = true});
  CHECK(factor_of(s) == 1.0f / 0.75f);
  const float first = fp8::decode(codes_of(s)[0], DType::E2M1);  // 7 * 3/4 = 5.25: 4 or 6, never saturated
  CHECK((first == 4.0f || first == 6.0f));
}

TEST_CASE("fp4_quantize: every code and scale is the per-element rule's, for ragged shapes and 2-D blocks") {
  struct Case {
    std::int64_t rows, cols;
    kernels::Fp8Blocks blocks;
    Fp4Format format;
    bool stochastic;
  };
  const std::vector<Case> cases{{3, 6, {1, 16}, Fp4Format::Nv, false},    {7, 40, {1, 16}, Fp4Format::Nv, true},
                                {33, 20, {16, 16}, Fp4Format::Nv, false}, {5, 70, {1, 32}, Fp4Format::Mx, false},
                                {9, 34, {1, 32}, Fp4Format::Mx, true},    {1, 2, {1, 16}, Fp4Format::Nv, false}};
  for (const Case& c : cases) {
    for (const DType dtype : {DType::F32, DType::BF16}) {
      CAPTURE(c.rows);
      CAPTURE(c.cols);
      CAPTURE(dtype);
      Generator generator(static_cast<std::uint64_t>(c.rows * 100 + c.cols));
      Tensor x = randn({c.rows, c.cols}, generator);
      x = mul(x, exp(mul(randn({c.rows, c.cols}, generator), 2.0))).to(dtype);  // magnitudes over several binades
      const Fp4Rule rule{.format = c.format, .stochastic = c.stochastic, .stream = {.seed = 5, .step = 2, .tensor = 1}};
      const Fp4Tensor q = kernels::fp4_quantize(x, c.blocks, rule);
      std::vector<float> values;
      for (double v : x.to_vector<double>()) values.push_back(static_cast<float>(v));
      const Reference ref = reference(values, c.rows, c.cols, c.blocks, rule);
      CHECK(codes_of(q) == ref.codes);
      CHECK(scales_of(q) == ref.scales);
      CHECK(factor_of(q) == ref.factor);
      // Round to nearest on E2M1's grid, in units of the block's scale times the tensor's factor: at most
      // half the largest step (1 unit), or, past 6 units, the saturation (|x| / unit - 6); a block whose
      // scale is 0 (E4M3 underflow) is zeros.
      if (!c.stochastic) {
        const std::vector<double> back = dequantized(q);
        const std::int64_t br = c.blocks.rows, bc = c.blocks.cols, grid_cols = (c.cols + bc - 1) / bc;
        for (std::int64_t i = 0; i < x.numel(); ++i) {
          const auto at = static_cast<std::size_t>(i);
          const std::uint8_t scale =
              ref.scales[static_cast<std::size_t>((i / c.cols) / br * grid_cols + (i % c.cols) / bc)];
          const double unit = kernels::fp4_scale_value(scale, c.format) * static_cast<double>(ref.factor);
          INFO("element " << i << ": " << values[at] << " -> " << back[at] << ", unit " << unit);
          if (unit == 0.0) {
            CHECK(back[at] == 0.0);
            continue;
          }
          const double bound = unit * std::max(1.0, std::fabs(values[at]) / unit - 6.0);
          CHECK(std::fabs(back[at] - values[at]) <= bound * (1 + 1e-5));
        }
      }
    }
  }
}

TEST_CASE("e2m1_nearest: the general encode's E2M1 rounding, saturating, for every bf16 value and at every tie") {
  const auto same = [](float x) {
    return kernels::e2m1_nearest(x) == fp8::encode(x, DType::E2M1, fp8::Overflow::Saturate);
  };
  int differ = 0;
  for (std::uint32_t bits = 0; bits < 0x10000u; ++bits) differ += !same(fp8::detail::bits_float(bits << 16));
  // The midpoints, their neighbours one f32 ulp either side, and values the bf16 sweep skips.
  for (const float tie : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f})
    for (const float x : {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, 10.0f)}) differ += !same(x) + !same(-x);
  Generator generator(3);
  for (const double v : mul(randn({100000}, generator), 3.0).to_vector<double>())
    differ += !same(static_cast<float>(v));
  CHECK(differ == 0);
  CHECK(kernels::e2m1_nearest(std::numeric_limits<float>::quiet_NaN()) == 0x8);  // +NaN: -0, as ml_dtypes
  CHECK(kernels::e2m1_nearest(-std::numeric_limits<float>::infinity()) == 0xF);  // saturates at -6
  CHECK(kernels::e2m1_nearest(0.75f) == 0x2);  // the tie between 0.5 and 1 goes to 1, the even code
}

TEST_CASE("nvfp4: 16x16 weight blocks give W and W^T the same codes") {
  Generator generator(4);
  const Tensor w = randn({48, 40}, generator);  // a ragged last block along the columns
  const Fp4Rule rule{.format = Fp4Format::Nv};
  const Fp4Tensor a = kernels::fp4_quantize(w, {16, 16}, rule);
  const Fp4Tensor b = kernels::fp4_quantize(transpose(w, 0, 1), {16, 16}, rule);
  const std::vector<std::uint8_t> ca = codes_of(a), cb = codes_of(b);
  for (std::int64_t r = 0; r < 48; ++r)
    for (std::int64_t c = 0; c < 40; ++c)
      REQUIRE(ca[static_cast<std::size_t>(r * 40 + c)] == cb[static_cast<std::size_t>(c * 48 + r)]);
  // With 1x16 blocks along each one's rows they differ: the point of the 2-D blocks.
  const Fp4Tensor rows_a = kernels::fp4_quantize(w, {1, 16}, rule);
  const Fp4Tensor rows_b = kernels::fp4_quantize(transpose(w, 0, 1), {1, 16}, rule);
  int differ = 0;
  const std::vector<std::uint8_t> ra = codes_of(rows_a), rb = codes_of(rows_b);
  for (std::int64_t r = 0; r < 48; ++r)
    for (std::int64_t c = 0; c < 40; ++c)
      differ += ra[static_cast<std::size_t>(r * 40 + c)] != rb[static_cast<std::size_t>(c * 48 + r)];
  CHECK(differ > 0);
}

TEST_CASE("fp4 stochastic rounding: unbiased, and the same bits for the same stream") {
  // 4096 copies of 0.7 (amax 0.7: S_enc = 3840, scale e4m3(448) = 448, x * 3840 / 448 = 6 exactly) would
  // not round at all; put one 1.0 in each block so that 0.7 scales to 4.2, between 4 and 6: up with
  // probability 0.1.
  const std::int64_t n = 4096;
  std::vector<double> values(static_cast<std::size_t>(n), 0.7);
  for (std::int64_t i = 0; i < n; i += 16) values[static_cast<std::size_t>(i)] = 1.0;
  const Tensor x = matrix(values, n / 16, 16);
  const Fp4Rule rule{.format = Fp4Format::Nv, .stochastic = true, .stream = {.seed = 9, .step = 1, .tensor = 0}};
  const Fp4Tensor q = kernels::fp4_quantize(x, {1, 16}, rule);
  const std::vector<double> back = dequantized(q);
  double sum = 0.0;
  int ups = 0, samples = 0;
  const std::vector<std::uint8_t> codes = codes_of(q);
  for (std::int64_t i = 0; i < n; ++i) {
    if (i % 16 == 0) continue;
    const double scaled = fp8::decode(codes[static_cast<std::size_t>(i)], DType::E2M1);
    CHECK((scaled == 4.0 || scaled == 6.0));  // only the two neighbours
    ups += scaled == 6.0;
    sum += back[static_cast<std::size_t>(i)];
    ++samples;
  }
  // Binomial(3840, 0.1): mean 384, standard deviation 18.6; 5 standard deviations either side.
  CHECK(std::abs(ups - 0.1 * samples) < 5 * std::sqrt(samples * 0.1 * 0.9));
  CHECK(std::fabs(sum / samples - 0.7) < 5 * std::sqrt(0.1 * 0.9 / samples) * (2.0 / 6.0));
  // The same stream gives the same codes; another step other codes.
  CHECK(codes_of(kernels::fp4_quantize(x, {1, 16}, rule)) == codes_of(q));
  Fp4Rule next = rule;
  next.stream.step = 2;
  CHECK(codes_of(kernels::fp4_quantize(x, {1, 16}, next)) != codes_of(q));
}

TEST_CASE("fp4: zeros, NaN, flushed blocks and the ends of the decode") {
  // All zeros: codes 0, S_enc 1 (factor 1), block scales 0.
  const Fp4Tensor zero = kernels::fp4_quantize(zeros({2, 16}), {1, 16}, {.format = Fp4Format::Nv});
  for (double v : dequantized(zero)) CHECK(v == 0.0);
  CHECK(factor_of(zero) == 1.0f);
  // A block 2^-20 below the tensor's largest: its scale rounds to E4M3's 0 and the block is zeros.
  std::vector<double> values(32, 0x1p-20);
  values[0] = 1.0;  // block 0's (and the tensor's) amax
  values[16] = 0x1p-20;
  const Fp4Tensor flushed = kernels::fp4_quantize(matrix(values, 2, 16), {1, 16}, {.format = Fp4Format::Nv});
  CHECK(scales_of(flushed)[1] == 0);
  for (std::int64_t i = 16; i < 32; ++i) CHECK(dequantized(flushed)[static_cast<std::size_t>(i)] == 0.0);
  // A NaN: NVFP4 makes the whole tensor NaN (S_enc from a NaN amax); MXFP4 only its block.
  std::vector<double> with_nan(64, 1.0);
  with_nan[3] = std::numeric_limits<double>::quiet_NaN();
  const Fp4Tensor nv = kernels::fp4_quantize(matrix(with_nan, 2, 32), {1, 16}, {.format = Fp4Format::Nv});
  CHECK(std::isnan(factor_of(nv)));
  const Fp4Tensor mx = kernels::fp4_quantize(matrix(with_nan, 2, 32), {1, 32}, {.format = Fp4Format::Mx});
  CHECK(scales_of(mx)[0] == fp8::kE8M0Nan);
  CHECK(std::isnan(dequantized(mx)[0]));
  CHECK(dequantized(mx)[32] == 1.0);
  // The decode's ends, with MXFP4 scales made by hand: 6 * 2^127 is past bf16's (and f32's) largest
  // value: inf; 0.5 * 2^-126 is below bf16's smallest normal: 0; 1 * 2^-126 stays.
  Fp4Tensor hand{.codes = Tensor::empty({1, 4}, {.dtype = DType::E2M1}),
                 .scales = Tensor::empty({1, 1}, {.dtype = DType::E8M0}),
                 .tensor_factor = ones({1}),
                 .blocks = {1, 32},
                 .format = Fp4Format::Mx};
  auto* code_bytes = static_cast<std::uint8_t*>(hand.codes.data_ptr());
  code_bytes[0] = fp8::pack_codes(0x7, 0x1);  // 6, 0.5
  code_bytes[1] = fp8::pack_codes(0x2, 0xA);  // 1, -1
  auto* scale = static_cast<std::uint8_t*>(hand.scales.data_ptr());
  scale[0] = 254;  // 2^127
  std::vector<double> top = kernels::fp4_decode(hand).to_vector<double>();
  CHECK(std::isinf(top[0]));
  CHECK(top[1] == 0x1p126);
  scale[0] = 1;  // 2^-126
  std::vector<double> bottom = kernels::fp4_decode(hand).to_vector<double>();
  CHECK(bottom[1] == 0.0);
  CHECK(bottom[2] == 0x1p-126);
  CHECK(bottom[3] == -0x1p-126);
  CHECK(kernels::fp4_decode(hand).dtype() == DType::BF16);
}

TEST_CASE("fp4_quantize and fp4_decode: bad input is refused with the kernel's name") {
  check_error([] { (void)kernels::fp4_quantize(ones({4}), {1, 16}, {}); }, "kernels::fp4_quantize");
  check_error([] { (void)kernels::fp4_quantize(ones({2, 2}, {.dtype = DType::I32}), {1, 16}, {}); }, "2-D f32");
  check_error([] { (void)kernels::fp4_quantize(ones({2, 2}), {-1, 16}, {}); }, "block extents");
  check_error([] { (void)kernels::fp4_quantize(ones({3, 5}), {1, 16}, {}); }, "odd number of elements");
  Fp4Tensor q = kernels::fp4_quantize(ones({2, 32}), {1, 16}, {.format = Fp4Format::Nv});
  q.format = Fp4Format::Mx;  // E4M3 scales read as E8M0
  check_error([&] { (void)kernels::fp4_decode(q); }, "the scales must be e8m0");
  q.format = Fp4Format::Nv;
  check_error([&] { (void)kernels::fp4_decode(q, DType::F16); }, "bf16");
}
