// The FP8 scaling recipes of autograd/fp8.h, each against a case worked out by hand: per-tensor current
// scaling (margin, power of two), delayed scaling step by step (the history, max or most recent, an
// amax of 0 or NaN keeping the scale, saturation when a tensor outgrows last step's scale), DeepSeek's
// blocks (1 x 128 along a row, 128 x 1 down the columns for a weight gradient, 128 x 128 weights), and
// MX's shared exponent under the spec's rule and Transformer Engine's (the 448..512 binade).
#include <cmath>
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

std::vector<std::uint8_t> codes_of(const kernels::Fp8Tensor& q) {
  const auto* bytes = static_cast<const std::uint8_t*>(q.codes.data_ptr());
  return {bytes, bytes + q.codes.numel()};
}
std::vector<float> floats(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }
std::uint8_t e4m3(float x) { return fp8::encode(x, DType::E4M3, fp8::Overflow::Saturate); }

}  // namespace

TEST_CASE("fp8 scaling: current scaling is fp8_max / amax of the tensor now, then margin and power of two") {
  const Tensor x = from_vector({1.0, -2.0, 3.5, 0.25}, {1, 4});
  Fp8Options options{.scaling = Fp8Scaling::Current};
  // amax 3.5: scale 448 / 3.5 = 128, and every value here times 128 is an E4M3 value.
  kernels::Fp8Tensor q = fp8_quantize_operand(x, Fp8Role::Input, false, options, nullptr);
  CHECK(q.codes.dtype() == DType::E4M3);
  CHECK(q.blocks == kernels::Fp8Blocks{0, 0});
  CHECK(floats(q.scale_inv) == std::vector<float>{1.0f / 128});
  CHECK(codes_of(q) == std::vector<std::uint8_t>{e4m3(128), e4m3(-256), e4m3(448), e4m3(32)});
  check_values(kernels::fp8_dequantize(q), {1.0, -2.0, 3.5, 0.25});  // 1/128 is exact
  // Margin 1 halves the scale; the gradient's format is E5M2 (max 57344: 57344 / 3.5 = 16384).
  options.margin = 1;
  CHECK(floats(fp8_quantize_operand(x, Fp8Role::Input, false, options, nullptr).scale_inv) ==
        std::vector<float>{1.0f / 64});
  options.margin = 0;
  const kernels::Fp8Tensor g = fp8_quantize_operand(x, Fp8Role::GradOutput, false, options, nullptr);
  CHECK(g.codes.dtype() == DType::E5M2);
  CHECK(floats(g.scale_inv) == std::vector<float>{1.0f / 16384});
  // Power of two: amax 3 gives 448 / 3 = 149.3, rounded down to 128.
  options.power_of_two = true;
  CHECK(fp8_scale_for(3.0f, DType::E4M3, options) == 128.0f);
  // An amax of 0 (or inf, NaN) gives no scale of its own: the previous one (1 for a fresh tensor).
  CHECK(fp8_scale_for(0.0f, DType::E4M3, options, 7.0f) == 7.0f);
  CHECK(fp8_scale_for(NAN, DType::E4M3, options, 7.0f) == 7.0f);
}

TEST_CASE("fp8 scaling: delayed scaling uses the history of earlier steps, then records this one") {
  Fp8History history = Fp8History::fresh(3);
  const Fp8Options max{.scaling = Fp8Scaling::Delayed, .amax_history_len = 3};
  auto step = [&](double amax, const Fp8Options& options) {
    const Tensor x = from_vector({amax, -amax / 2}, {1, 2});
    return fp8_quantize_operand(x, Fp8Role::Input, false, options, &history);
  };
  auto input_history = [&] {
    return std::vector<float>(history.amax_history.data<float>(), history.amax_history.data<float>() + 3);
  };
  // Step 1: the fresh scale is 1 (2 and -1 are E4M3 values); then the history holds 2 and the next
  // scale is 448 / 2 = 224. The other roles are untouched.
  kernels::Fp8Tensor q = step(2.0, max);
  CHECK(floats(q.scale_inv) == std::vector<float>{1.0f});
  CHECK(input_history() == std::vector<float>{2, 0, 0});
  CHECK(floats(history.scale) == std::vector<float>{224, 1, 1});
  // Step 2: the tensor doubled, last step's scale no longer fits: 4 * 224 = 896 saturates to 448, never
  // NaN (the hazard of delayed scaling, and why its casts saturate). The history's max is 4: 112.
  q = step(4.0, max);
  CHECK(codes_of(q) == std::vector<std::uint8_t>{0x7E, e4m3(-448)});
  CHECK(floats(history.scale)[0] == 112.0f);
  // Steps 3-5 at amax 1: the 4 stays in the window of 3 steps until it falls out.
  step(1.0, max);
  CHECK(input_history() == std::vector<float>{1, 4, 2});
  CHECK(floats(history.scale)[0] == 112.0f);
  step(1.0, max);
  CHECK(floats(history.scale)[0] == 112.0f);
  step(1.0, max);
  CHECK(input_history() == std::vector<float>{1, 1, 1});
  CHECK(floats(history.scale)[0] == 448.0f);
  // most_recent: only the newest entry counts.
  Fp8Options recent = max;
  recent.amax_algorithm = AmaxAlgorithm::MostRecent;
  step(8.0, recent);
  step(2.0, recent);
  CHECK(floats(history.scale)[0] == 224.0f);
  // A NaN in the history keeps the scale for as long as it is there (Transformer Engine's rule).
  step(NAN, max);
  CHECK(floats(history.scale)[0] == 224.0f);
  // Delayed scaling without a history is an error that says where the history comes from.
  check_error(
      [&] {
        (void)fp8_quantize_operand(from_vector({1.0}, {1, 1}), Fp8Role::Input, false, max, nullptr);
      },
      "enable_fp8");
}

TEST_CASE("fp8 scaling: DeepSeek-V3's blocks, along each GEMM's own reduction") {
  const Fp8Options options{.scaling = Fp8Scaling::Block, .backward_format = DType::E4M3};
  // x [2, 256]: row 0 is 1 in its first 128 columns and 4 in the next; row 1 is 2, then 0.
  std::vector<double> values(512);
  for (int c = 0; c < 256; ++c) {
    values[c] = c < 128 ? 1.0 : 4.0;
    values[256 + c] = c < 128 ? 2.0 : 0.0;
  }
  const Tensor x = from_vector(values, {2, 256});
  // Forward (reduction along the columns): 1 x 128 tiles, one scale per row and tile; an all-zero tile
  // gets scale 1.
  kernels::Fp8Tensor q = fp8_quantize_operand(x, Fp8Role::Input, false, options, nullptr);
  CHECK(q.blocks == kernels::Fp8Blocks{1, 128});
  CHECK(floats(q.scale_inv) == std::vector<float>{1.0f / 448, 4.0f / 448, 2.0f / 448, 1.0f});
  check_values(kernels::fp8_dequantize(q), values, 0x1p-23);  // code * f32(1 / scale): one f32 rounding
  // Weight gradient (reduction along the rows): 128 x 1 tiles, one scale per column of 2 rows.
  q = fp8_quantize_operand(x, Fp8Role::Input, true, options, nullptr);
  CHECK(q.blocks == kernels::Fp8Blocks{128, 1});
  CHECK(q.scale_inv.shape() == Shape{1, 256});
  CHECK(q.scale_inv.data<float>()[0] == 2.0f / 448);  // max(1, 2)
  CHECK(q.scale_inv.data<float>()[200] == 4.0f / 448);  // max(4, 0)
  // A weight: 128 x 128 blocks whatever the GEMM.
  q = fp8_quantize_operand(x, Fp8Role::Weight, true, options, nullptr);
  CHECK(q.blocks == kernels::Fp8Blocks{128, 128});
  CHECK(floats(q.scale_inv) == std::vector<float>{2.0f / 448, 4.0f / 448});
}

TEST_CASE("fp8 scaling: MX's shared exponent, the spec's floor against rounding up") {
  const Fp8Options spec{.scaling = Fp8Scaling::Mx, .backward_format = DType::E4M3};
  Fp8Options up = spec;
  up.mx_rule = MxScaleRule::RoundUp;
  const DType e4m3_format = DType::E4M3;
  // The spec: X = 2^(floor(log2 amax) - 8). amax 500: X = 1, and 500 saturates to 448. Rounding up:
  // X = 2^ceil(log2(500 / 448)) = 2, and 500 / 2 = 250 fits.
  CHECK(fp8_scale_for(500.0f, e4m3_format, spec) == 1.0f);
  CHECK(fp8_scale_for(500.0f, e4m3_format, up) == 0.5f);
  // amax 448 and 1: both rules agree (scales 1 and 256).
  CHECK(fp8_scale_for(448.0f, e4m3_format, spec) == 1.0f);
  CHECK(fp8_scale_for(448.0f, e4m3_format, up) == 1.0f);
  CHECK(fp8_scale_for(1.0f, e4m3_format, spec) == 256.0f);
  CHECK(fp8_scale_for(1.0f, e4m3_format, up) == 256.0f);
  // amax 0.9: the spec gives 2^9 (0.9 * 512 = 460.8 saturates), rounding up 2^8 (230.4).
  CHECK(fp8_scale_for(0.9f, e4m3_format, spec) == 512.0f);
  CHECK(fp8_scale_for(0.9f, e4m3_format, up) == 256.0f);
  // E5M2 (emax 15): amax 1 gives 2^15. E8M0's range bounds the exponent: 2^-127 .. 2^127.
  CHECK(fp8_scale_for(1.0f, DType::E5M2, spec) == 32768.0f);
  CHECK(fp8_scale_for(1e-38f, e4m3_format, spec) == std::ldexp(1.0f, 127));
  // Blocks of 32 along the reduction: a row of 64 is two blocks with scales of their own.
  std::vector<double> values(64, 0.5);
  values[40] = 500.0;
  const kernels::Fp8Tensor q = fp8_quantize_operand(from_vector(values, {1, 64}), Fp8Role::Input, false, spec, nullptr);
  CHECK(q.blocks == kernels::Fp8Blocks{1, 32});
  CHECK(floats(q.scale_inv) == std::vector<float>{1.0f / 512, 1.0f});
  CHECK(kernels::fp8_dequantize(q).data<float>()[40] == 448.0f);  // saturated, as the spec's rule allows
  CHECK(kernels::fp8_dequantize(q).data<float>()[0] == 0.5f);
}

TEST_CASE("fp8 scaling: a scale that is not finite and positive is refused before any code is written") {
  const Tensor x = from_vector({1.0, 2.0}, {1, 2});
  for (double bad : {0.0, -1.0, double(INFINITY), double(NAN)})
    check_error(
        [&] {
          (void)kernels::fp8_quantize(x, full({1, 1}, bad), {0, 0}, DType::E4M3);
        },
        "kernels::fp8_quantize");
  check_error([&] { (void)kernels::fp8_quantize(x, full({1, 2}, 1.0), {0, 0}, DType::E4M3); }, "one per block");
}

// The column-wise copy (kernels/fp8.h: FP8 GEMM operands are K-major): the codes of x^T, made by the same
// quantisation. For every recipe, x's copies quantised along its rows are x^T's row-wise codes quantised
// along its columns, bit for bit, with the blocks and the scale grid transposed; per-tensor recipes make
// both copies from one amax (one history entry).
TEST_CASE("fp8 scaling: the column-wise copy is x^T's codes, its blocks and scales transposed, in every recipe") {
  Generator generator(3);
  std::vector<double> values = randn({130, 67}, generator).to_vector<double>();
  for (std::size_t i = 0; i < values.size(); i += 7) values[i] *= 64.0;  // blocks with amaxes of their own
  const Tensor x = from_vector(values, {130, 67}), xt = transpose(x, 0, 1);
  for (const Fp8Scaling scaling : {Fp8Scaling::Current, Fp8Scaling::Delayed, Fp8Scaling::Block, Fp8Scaling::Mx})
    for (const Fp8Role role : {Fp8Role::Input, Fp8Role::Weight, Fp8Role::GradOutput}) {
      const Fp8Options options{.scaling = scaling};
      INFO(options.describe() << ", role " << static_cast<int>(role));
      Fp8History history = Fp8History::fresh(2), history_t = Fp8History::fresh(2);
      for (int step = 0; step < 2; ++step) {  // delayed: the second step quantises with the recorded amax
        const kernels::Fp8Quantized both = fp8_quantize_copies(x, role, true, options, &history,
                                                               kernels::Fp8Copies::Both);
        const kernels::Fp8Tensor expected = fp8_quantize_operand(xt, role, false, options, &history_t);
        const kernels::Fp8Tensor& copy = both.columnwise;
        CHECK(copy.codes.shape() == Shape{67, 130});
        CHECK(copy.blocks == expected.blocks);
        CHECK(codes_of(copy) == codes_of(expected));
        CHECK(copy.scale_inv.shape() == expected.scale_inv.shape());
        CHECK(floats(copy.scale_inv) == floats(expected.scale_inv));
        // The row-wise codes of the same call are x's, and say the same values.
        check_close(kernels::fp8_dequantize(copy), transpose(kernels::fp8_dequantize(both.rowwise), 0, 1), 0.0, 0.0);
        CHECK(floats(history.amax_history) == floats(history_t.amax_history));
        CHECK(floats(history.scale) == floats(history_t.scale));
      }
      if (scaling == Fp8Scaling::Delayed) CHECK(history.amax_history.data<float>()[static_cast<int>(role) * 2 + 1] > 0);
    }
  // Only what is asked for is made.
  const kernels::Fp8Quantized rows_only = fp8_quantize_copies(x, Fp8Role::Input, false,
                                                              {.scaling = Fp8Scaling::Current}, nullptr,
                                                              kernels::Fp8Copies::RowWise);
  CHECK(rows_only.rowwise.codes.defined());
  CHECK_FALSE(rows_only.columnwise.codes.defined());
}
