// amp diagnostics: gradient statistics against f16's range, non-finite gradients, the overflow
// detector naming the op (forward and backward), the activation-gradient recorder, name scopes,
// lost updates of an f16 weight, and warnings.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::size_t bin(int exponent) { return static_cast<std::size_t>(exponent - amp::GradientStats::kMinExponent); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

Tensor f16(const std::vector<double>& values, const Shape& shape, bool requires_grad = false) {
  return from_vector(values, shape, {.dtype = DType::F16, .requires_grad = requires_grad});
}

}  // namespace

TEST_CASE("diagnostics: gradient_stats counts each f16 hazard exactly") {
  const std::vector<double> values{0.0,
                                   -0.0,  // zero
                                   0x1p-26,
                                   0x1p-25,
                                   0x1p-50,  // flushed: 2^-25 is the tie between 0 and 2^-24, to even (0)
                                   0x1p-24,
                                   0x1p-20,  // subnormal in f16: the smallest one survives
                                   0x1p-25 *
                                       (1 + 0x1p-30),  // just above the tie: rounds up to 2^-24 (one rounding, not two)
                                   70000.0,
                                   -70000.0,  // overflow (>= 65520)
                                   65519.0,  // below the rounding boundary: 65504, finite
                                   kInf,
                                   -kInf,
                                   kNaN,  // non-finite
                                   1.0,
                                   -1.0,
                                   0.75,
                                   3.0,
                                   0x1p20};  // 2^20 (highest bin) also overflows f16
  const amp::GradientStats stats = amp::gradient_stats(f64(values, {static_cast<std::int64_t>(values.size())}, false));
  CHECK(stats.count == 19);
  CHECK(stats.zero == 2);
  CHECK(stats.f16_flushed == 3);
  CHECK(stats.f16_subnormal == 3);
  CHECK(stats.f16_overflow == 3);  // +-70000 and 2^20; not 65519
  CHECK(stats.nonfinite == 3);

  std::array<std::int64_t, amp::GradientStats::kBins> expected{};
  for (int e : {-26, -25, -25, -24, -20, 16, 16, 15, 0, 0, -1, 1, 16}) ++expected[bin(e)];
  ++expected[bin(-40)];  // 2^-50: clamped into the lowest bin
  for (int k = 0; k < amp::GradientStats::kBins; ++k) {
    INFO("bin " << k + amp::GradientStats::kMinExponent);
    CHECK(stats.histogram[static_cast<std::size_t>(k)] == expected[static_cast<std::size_t>(k)]);
  }
  std::int64_t in_histogram = 0;
  for (std::int64_t n : stats.histogram) in_histogram += n;
  CHECK(in_histogram == stats.count - stats.zero - stats.nonfinite);

  CHECK(stats.fraction(stats.zero) == doctest::Approx(2.0 / 19.0));
  CHECK(stats.fraction(stats.count) == 1.0);
  CHECK(amp::GradientStats{}.fraction(0) == 0.0);  // empty: no division by zero

  // An f32 tensor and an f16 one: values already in f16 can no longer flush or overflow.
  const amp::GradientStats f32_stats = amp::gradient_stats(from_vector({0x1p-26, 1e5, 0.5}, {3}));
  CHECK(f32_stats.f16_flushed == 1);
  CHECK(f32_stats.f16_overflow == 1);
  CHECK(f32_stats.histogram[bin(-1)] == 1);
  const amp::GradientStats f16_stats = amp::gradient_stats(f16({0x1p-24, 0x1p-26, 65504}, {3}));
  CHECK(f16_stats.f16_subnormal == 1);
  CHECK(f16_stats.zero == 1);  // 2^-26 was flushed when the f16 tensor was made
  CHECK(f16_stats.f16_overflow == 0);
  CHECK(f16_stats.histogram[bin(15)] == 1);

  amp::GradientStats merged = stats;
  merged.merge(f32_stats);
  CHECK(merged.count == 22);
  CHECK(merged.f16_flushed == 4);
  CHECK(merged.f16_overflow == 4);
  CHECK(merged.nonfinite == 3);
  CHECK(merged.histogram[bin(-1)] == 2);
  CHECK(merged.histogram[bin(16)] == 4);  // 1e5 (2^16.6) joins the three above

  check_error([] { amp::gradient_stats(Tensor()); }, "amp::gradient_stats");
  check_error([] { amp::gradient_stats(from_vector({1}, {1}, {.dtype = DType::I32})); }, "amp::gradient_stats");
}

TEST_CASE("diagnostics: nonfinite_gradients lists the parameters with inf or NaN gradients") {
  std::vector<Tensor> parameters;
  for (int i = 0; i < 5; ++i) parameters.push_back(from_vector({1, 2}, {2}, {.requires_grad = true}));
  parameters[0].set_grad(from_vector({0.5, -3}, {2}));
  parameters[1].set_grad(from_vector({kInf, 0}, {2}));
  // parameters[2] has no gradient: nothing to report
  parameters[3].set_grad(from_vector({1, kNaN}, {2}));
  parameters[4].set_grad(from_vector({-kInf, 65504}, {2}));
  CHECK(amp::nonfinite_gradients(parameters) == std::vector<std::size_t>{1, 3, 4});
  Tensor p16 = f16({1, 2}, {2}, true);
  p16.set_grad(f16({70000, 1}, {2}));  // overflowed when stored in f16
  CHECK(amp::nonfinite_gradients({parameters[0], p16}) == std::vector<std::size_t>{1});
  CHECK(amp::nonfinite_gradients({parameters[0], parameters[2]}).empty());
}

TEST_CASE("diagnostics: OverflowDetector names the first op whose f16 output overflows") {
  Tensor x = f16({1, 12}, {2});  // f16 exp(12) = 162755 > 65504
  amp::OverflowDetector detector;
  CHECK_FALSE(detector.first().has_value());
  Tensor fine = mul(x, 2.0);
  CHECK_FALSE(detector.first().has_value());
  {
    NameScope outer("encoder");
    NameScope inner("attention");
    Tensor y = exp(x);
    Tensor later = neg(y);  // also inf, but not the first
  }
  REQUIRE(detector.first().has_value());
  const amp::OverflowEvent& event = *detector.first();
  CHECK(event.op == "exp");
  CHECK_FALSE(event.backward);
  CHECK(event.scope == "encoder.attention");
  CHECK(event.inputs_finite);
  CHECK(event.input_shapes == std::vector<Shape>{{2}});
  CHECK(event.input_dtypes == std::vector<DType>{DType::F16});
  CHECK(event.shape == Shape{2});
  CHECK(event.dtype == DType::F16);
  const std::string text = event.describe();
  INFO(text);
  CHECK(contains(text, "op exp"));
  CHECK(contains(text, "'encoder.attention'"));
  CHECK(contains(text, "f16"));
  CHECK_FALSE(contains(text, "already held"));

  // reset() forgets it; under autocast exp runs in f32, where exp(12) is finite.
  detector.reset();
  CHECK_FALSE(detector.first().has_value());
  {
    Autocast autocast(DType::F16);
    CHECK(exp(x).dtype() == DType::F32);
  }
  CHECK_FALSE(detector.first().has_value());
}

TEST_CASE("diagnostics: OverflowDetector finds an f16 matmul overflow under autocast") {
  Tensor x = from_vector({300, 300}, {1, 2});
  Tensor w = from_vector({300, 300}, {2, 1}, {.requires_grad = true});
  amp::OverflowDetector detector;
  {
    Autocast autocast(DType::F16);
    NameScope scope("fc1");
    Tensor y = matmul(x, w);  // 300 is fine in f16; 2 * 300^2 = 180000 is not
    CHECK(std::isinf(y.item()));
  }
  REQUIRE(detector.first().has_value());
  const amp::OverflowEvent& event = *detector.first();
  CHECK(event.op == "matmul");  // not the casts before it
  CHECK_FALSE(event.backward);
  CHECK(event.scope == "fc1");
  CHECK(event.input_shapes == std::vector<Shape>{{1, 2}, {2, 1}});
  CHECK(event.input_dtypes == std::vector<DType>{DType::F16, DType::F16});
  CHECK(event.shape == Shape{1, 1});
  CHECK(event.dtype == DType::F16);
  CHECK(contains(event.describe(), "matmul"));
  CHECK(contains(event.describe(), "fc1"));
  clear_tape();
}

TEST_CASE("diagnostics: an op that only passes on an inf it was given is marked") {
  Tensor x = from_vector({kInf, 1}, {2});
  amp::OverflowDetector detector;
  Tensor y = neg(x);
  REQUIRE(detector.first().has_value());
  CHECK(detector.first()->op == "neg");
  CHECK_FALSE(detector.first()->inputs_finite);
  CHECK(contains(detector.first()->describe(), "already held inf/NaN"));
}

TEST_CASE("diagnostics: OverflowDetector can throw from the op, and stops watching when destroyed") {
  Tensor x = f16({12}, {1});
  {
    amp::OverflowDetector detector(/*throw_on_overflow=*/true);
    check_error([&] { exp(x); }, "amp::OverflowDetector: first inf/NaN: its output ([1] f16) of op exp");
    REQUIRE(detector.first().has_value());
    CHECK(detector.first()->op == "exp");
    Tensor finite = mul(x, 2.0);  // finite ops pass
    CHECK(finite.item() == 24.0);
  }
  CHECK(tape_size() == 0);
  // Destroyed: the same overflow neither throws nor reaches a dangling observer.
  Tensor y;
  CHECK_NOTHROW(y = exp(x));
  CHECK(std::isinf(y.item()));
  amp::OverflowDetector later;
  CHECK_FALSE(later.first().has_value());  // a new detector sees only what happens after it
}

TEST_CASE("diagnostics: OverflowDetector reports a gradient that overflows in backward") {
  Tensor x = f16({1, 2}, {2}, true);
  Tensor y;
  {
    NameScope scope("head");
    y = mul(x, 100.0);  // 100, 200: a finite forward
  }
  amp::OverflowDetector detector;
  backward(y, f16({1000, 1000}, {2}));  // 1000 * 100 = 1e5 > 65504: dx overflows in f16
  REQUIRE(detector.first().has_value());
  const amp::OverflowEvent& event = *detector.first();
  CHECK(event.backward);
  CHECK(event.op == "mul");
  CHECK(event.scope == "head");
  CHECK(event.input == 0);
  CHECK(event.inputs_finite);  // the seed was finite: mul's backward made the inf
  CHECK(event.input_shapes == std::vector<Shape>{{2}});  // the gradient of the output
  CHECK(event.shape == Shape{2});
  CHECK(event.dtype == DType::F16);
  CHECK(contains(event.describe(), "in backward"));
  CHECK(contains(event.describe(), "op mul in 'head'"));
  CHECK(std::isinf(x.grad().to_vector<double>()[0]));
}

TEST_CASE("diagnostics: GradientRecorder records each op's output gradient in backward order") {
  Tensor x = random_f64({2, 3}, -1, 1, 1), w = random_f64({3, 4}, -1, 1, 2);
  amp::GradientRecorder recorder;
  Tensor loss;
  {
    NameScope scope("model");
    loss = sum(mul(matmul(x, w), 0x1p-30));  // matmul's output gradient is 2^-30: flushed in f16
  }
  CHECK(recorder.entries().empty());  // forward passes add nothing
  backward(loss);
  const auto& entries = recorder.entries();
  REQUIRE(entries.size() == 3);
  CHECK(entries[0].op == "sum");
  CHECK(entries[1].op == "mul");
  CHECK(entries[2].op == "matmul");
  CHECK(entries[0].shape == Shape{});
  CHECK(entries[1].shape == Shape{2, 4});
  CHECK(entries[2].shape == Shape{2, 4});
  for (const auto& entry : entries) {
    CHECK(entry.scope == "model");
    CHECK(entry.dtype == DType::F64);
  }
  CHECK(entries[0].stats.count == 1);
  CHECK(entries[0].stats.histogram[bin(0)] == 1);
  CHECK(entries[1].stats.histogram[bin(0)] == 8);
  CHECK(entries[1].stats.f16_flushed == 0);
  CHECK(entries[2].stats.count == 8);
  CHECK(entries[2].stats.histogram[bin(-30)] == 8);
  CHECK(entries[2].stats.f16_flushed == 8);
  const amp::GradientStats total = recorder.total();
  CHECK(total.count == 17);
  CHECK(total.f16_flushed == 8);
  CHECK(total.histogram[bin(0)] == 9);
}

TEST_CASE("diagnostics: NameScope nests with '.' and restores the previous scope") {
  CHECK(current_scope().empty());
  {
    NameScope outer("outer");
    CHECK(current_scope() == "outer");
    {
      NameScope inner("inner");
      CHECK(current_scope() == "outer.inner");
      {
        NameScope deepest("fc");
        CHECK(current_scope() == "outer.inner.fc");
      }
      CHECK(current_scope() == "outer.inner");
    }
    CHECK(current_scope() == "outer");
  }
  CHECK(current_scope().empty());
}

TEST_CASE("diagnostics: lost_update_fraction of SGD on f16 and f32 weights") {
  // lr 2^-12 times grad 1: an update of 2^-12 from 1.0. 1 - 2^-12 is the midpoint between 1 and
  // 1 - 2^-11 in f16, which rounds to even (1.0): lost. f32 keeps it.
  Tensor p16 = f16({1}, {1}, true);
  optim::SGD sgd16({p16}, {.lr = 0x1p-12});
  CHECK(amp::lost_update_fraction(sgd16) == 0.0);  // no step yet
  p16.set_grad(f16({1}, {1}));
  sgd16.step();
  CHECK(amp::lost_update_fraction(sgd16) == 1.0);
  CHECK(p16.item() == 1.0);

  Tensor p32 = from_vector({1}, {1}, {.requires_grad = true});
  optim::SGD sgd32({p32}, {.lr = 0x1p-12});
  p32.set_grad(from_vector({1}, {1}));
  sgd32.step();
  CHECK(amp::lost_update_fraction(sgd32) == 0.0);
  CHECK(p32.item() == 1.0 - 0x1p-12);

  // Half lost: at 0.25 the f16 spacing below is 2^-13, so 0.25 - 2^-12 is stored; a zero gradient
  // means no update was meant and is not counted.
  Tensor mixed = f16({1, 1, 0.25, 0.25, 1}, {5}, true);
  optim::SGD sgd_mixed({mixed}, {.lr = 0x1p-12});
  mixed.set_grad(f16({1, 1, 1, 1, 0}, {5}));
  sgd_mixed.step();
  CHECK(amp::lost_update_fraction(sgd_mixed) == 0.5);
  check_values(mixed, {1, 1, 0.25 - 0x1p-12, 0.25 - 0x1p-12, 1}, 0.0, 0.0);
}

TEST_CASE("diagnostics: warnings go to the installed handler") {
  std::vector<std::string> seen;
  WarningHandler previous = set_warning_handler([&](const std::string& message) { seen.push_back(message); });
  warn("loss scale at its floor");
  REQUIRE(seen.size() == 1);
  CHECK(contains(seen[0], "loss scale at its floor"));
  WarningHandler mine = set_warning_handler(previous);
  CHECK(static_cast<bool>(mine));  // returned the handler it replaced
  mine("direct call");
  CHECK(seen.size() == 2);
}
