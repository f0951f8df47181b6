// The vectorised exp, log, tanh, sigmoid and GELU of kernels/cpu/vector_math.h against f64 over sweeps
// of inputs: each element within the function's bound in ulps of its own correctly rounded f32 value
// (kVectorMathUlps, kTanhUlps, kGeluUlps), the special values (vector_math.h's rule), and, once
// rounded to f16 and bf16, the correctly rounded value or its neighbour.
#include <cmath>
#include <functional>
#include <limits>

#include "kernels/cpu/vector_math.h"
#include "kernels/pointwise.h"
#include "tests/testing.h"

using namespace mg;
namespace vm = mg::kernels::cpu::vector_math;
using kernels::cpu::vector_math::kGeluUlps;
using kernels::cpu::vector_math::kTanhUlps;
using kernels::cpu::vector_math::kVectorMathUlps;

namespace {

using VectorFn = std::function<void(const float*, float*, std::int64_t)>;
using FloatFn = void (*)(const float*, float*, std::int64_t);  // picks the float form of an overloaded name
using Reference = std::function<double(double)>;

// |y - ref| in units of the spacing of f32 values at ref (the subnormal spacing below 2^-126).
double ulps(float y, double ref) {
  if (std::isnan(ref)) return std::isnan(y) ? 0 : INFINITY;
  if (std::isinf(ref) || std::isinf(y)) return y == static_cast<float>(ref) ? 0 : INFINITY;
  const int exponent = std::max(std::ilogb(std::fabs(ref) > 0 ? ref : 1e-45), -126);
  return std::fabs(static_cast<double>(y) - ref) / std::ldexp(1.0, exponent - 23);
}

// n values evenly spaced over [low, high], and the function's results for them.
std::vector<float> sweep(double low, double high, int n) {
  std::vector<float> x(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(low + (high - low) * i / (n - 1));
  return x;
}

// The worst error in ulps of fn against reference over the inputs.
double worst_ulps(const VectorFn& fn, const Reference& reference, const std::vector<float>& x) {
  std::vector<float> y(x.size());
  fn(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, ulps(y[i], reference(x[i])));
  return worst;
}

double gelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }  // erfc: no cancellation for x < 0

struct Case {
  const char* name;
  VectorFn fn;
  Reference reference;
  double low, high;
  double ulps;  // the bound, in ulps of each element's own value
};

std::vector<Case> cases() {
  return {
      {"exp", FloatFn{vm::exp}, [](double x) { return std::exp(x); }, -104, 89,
       kVectorMathUlps},  // through subnormal results and overflow
      {"exp", FloatFn{vm::exp}, [](double x) { return std::exp(x); }, -10, 10, kVectorMathUlps},
      {"log", FloatFn{vm::log}, [](double x) { return std::log(x); }, 1e-44, 1e-36,
       kVectorMathUlps},  // subnormal inputs
      {"log", FloatFn{vm::log}, [](double x) { return std::log(x); }, 1e-6, 100, kVectorMathUlps},
      {"log", FloatFn{vm::log}, [](double x) { return std::log(x); }, 0.5, 2, kVectorMathUlps},  // near log(1) = 0
      {"tanh", FloatFn{vm::tanh}, [](double x) { return std::tanh(x); }, -12, 12, kTanhUlps},
      {"tanh", FloatFn{vm::tanh}, [](double x) { return std::tanh(x); }, -1, 1, kTanhUlps},  // both of its formulas
      {"tanh", FloatFn{vm::tanh}, [](double x) { return std::tanh(x); }, -0.01, 0.01, kTanhUlps},
      {"tanh", FloatFn{vm::tanh}, [](double x) { return std::tanh(x); }, 1e-30, 1e-20, kTanhUlps},
      // Below x = -88.7 exp(-x) overflows f32 and sigmoid is 0, as functors::Sigmoid computes it
      // (checked with the special values), not the subnormal f64 value.
      {"sigmoid", FloatFn{vm::sigmoid}, [](double x) { return 1 / (1 + std::exp(-x)); }, -88, 30, kVectorMathUlps},
      {"sigmoid", FloatFn{vm::sigmoid}, [](double x) { return 1 / (1 + std::exp(-x)); }, -8, 8, kVectorMathUlps},
      // GELU element by element, its left tail included (down to the subnormal results near x = -14),
      // where 1 + erf(x / sqrt 2) would cancel.
      {"gelu", FloatFn{vm::gelu}, gelu, -15, 8, kGeluUlps},
      {"gelu", FloatFn{vm::gelu}, gelu, -1.5, 1.5, kGeluUlps},  // both of its formulas
      {"gelu", FloatFn{vm::gelu}, gelu, -1e-3, 1e-3, kGeluUlps},
  };
}

}  // namespace

TEST_CASE("vectorised exp, log, tanh, sigmoid and gelu: every element within its bound of f64 over sweeps") {
  for (const Case& c : cases()) {
    CAPTURE(std::string(c.name));
    CAPTURE(c.low);
    CAPTURE(c.high);
    CHECK(worst_ulps(c.fn, c.reference, sweep(c.low, c.high, 200'001)) <= c.ulps);
  }
}

TEST_CASE("vectorised gelu_grad is within kGeluUlps of the larger of its terms Phi(x) and x phi(x)") {
  const std::vector<float> x = sweep(-20, 20, 100'001);
  std::vector<float> g(x.size(), 0.75f), y(x.size());
  vm::gelu_grad(g.data(), x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double xd = x[i];
    const double cdf = 0.5 * std::erfc(-xd / std::sqrt(2.0)), pdf = std::exp(-0.5 * xd * xd) / std::sqrt(2 * M_PI);
    const double reference = 0.75 * (cdf + xd * pdf);
    // The sum of two terms, g Phi(x) and g x phi(x): an ulp of the larger bounds the error (for x < -1
    // both are small, and 1 + erf(x / sqrt 2) would lose their digits; ilogb(0) is below -126).
    const double larger = 0.75 * std::max(cdf, std::fabs(xd) * pdf);
    const double scale = std::ldexp(1.0, std::max(std::ilogb(larger), -126) - 23);
    REQUIRE(std::fabs(y[i] - reference) <= kGeluUlps * scale);
  }
  // In place (y = g), as the elementwise loop may call it.
  std::vector<float> in_place(g);
  vm::gelu_grad(in_place.data(), x.data(), in_place.data(), static_cast<std::int64_t>(x.size()));
  CHECK(in_place == y);
}

TEST_CASE("vectorised functions keep the scalar functors' special values, in place too") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x{-inf, inf, nan, 0.0f, -0.0f, 100.0f, -100.0f, -1.0f};
  std::vector<float> y(x.size());
  vm::exp(x.data(), y.data(), 8);
  CHECK(y[0] == 0.0f);
  CHECK(y[1] == inf);
  CHECK(std::isnan(y[2]));
  CHECK(y[3] == 1.0f);
  CHECK(y[5] == inf);  // overflows like expf
  CHECK(y[6] == std::exp(-100.0f));  // a subnormal, not flushed
  vm::log(x.data(), y.data(), 8);
  CHECK(std::isnan(y[0]));
  CHECK(y[1] == inf);
  CHECK(std::isnan(y[2]));
  CHECK(y[3] == -inf);
  CHECK(std::isnan(y[7]));
  vm::tanh(x.data(), y.data(), 8);
  CHECK(y[0] == -1.0f);
  CHECK(y[1] == 1.0f);
  CHECK(std::isnan(y[2]));
  vm::sigmoid(x.data(), y.data(), 8);
  CHECK(y[0] == 0.0f);
  CHECK(y[1] == 1.0f);
  CHECK(std::isnan(y[2]));
  CHECK(y[3] == 0.5f);
  CHECK(y[6] == functors::Sigmoid{}(-100.0f));  // 0: exp(100) overflows, as in the scalar functor
  vm::tanh(x.data(), y.data(), 8);
  CHECK(std::signbit(y[4]));  // tanh(-0) = -0
  // GELU: NaN in, NaN out; at -inf, -inf * Phi(-inf) = -inf * 0 is NaN, as in PyTorch.
  vm::gelu(x.data(), y.data(), 8);
  CHECK(std::isnan(y[0]));
  CHECK(y[1] == inf);
  CHECK(std::isnan(y[2]));
  CHECK(y[3] == 0.0f);
  CHECK((y[4] == 0.0f && std::signbit(y[4])));
  CHECK(y[5] == 100.0f);
  CHECK((y[6] == 0.0f && std::signbit(y[6])));
  // The gradient: NaN at NaN and at +-inf (x phi(x) = inf * 0, as PyTorch), never a finite value there.
  const std::vector<float> g(x.size(), 0.75f);
  vm::gelu_grad(g.data(), x.data(), y.data(), 8);
  CHECK(std::isnan(y[0]));
  CHECK(std::isnan(y[1]));
  CHECK(std::isnan(y[2]));
  CHECK(y[3] == 0.375f);
  CHECK(y[4] == 0.375f);
  CHECK(y[5] == 0.75f);
  CHECK(y[6] == 0.0f);
  // NaN wherever it sits in a block, and whatever the gradient: the packet path has no fallback.
  std::vector<float> many(300, 1.0f), grads(300, 0.0f), out(300);
  for (std::size_t i = 0; i < many.size(); i += 7) many[i] = nan;
  vm::gelu_grad(grads.data(), many.data(), out.data(), 300);
  for (std::size_t i = 0; i < many.size(); ++i) CHECK(std::isnan(out[i]) == std::isnan(many[i]));
  std::vector<float> in_place(x);
  vm::exp(in_place.data(), in_place.data(), 8);
  vm::exp(x.data(), y.data(), 8);
  for (std::size_t i = 0; i < x.size(); ++i)
    CHECK((in_place[i] == y[i] || (std::isnan(in_place[i]) && std::isnan(y[i]))));
}

TEST_CASE("f16 and bf16 results rounded from the vectorised functions are the correctly rounded value or a neighbour") {
  for (DType dtype : {DType::F16, DType::BF16}) {
    for (const Case& c : cases()) {
      CAPTURE(std::string(c.name));
      CAPTURE(dtype);
      const std::vector<float> x = sweep(std::max(c.low, -20.0), std::min(c.high, 20.0), 50'001);
      std::vector<float> y(x.size()), reference(x.size());
      c.fn(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
      for (std::size_t i = 0; i < x.size(); ++i) reference[i] = static_cast<float>(c.reference(x[i]));
      const Tensor ours = from_vector(std::vector<double>(y.begin(), y.end()), {static_cast<std::int64_t>(y.size())})
                              .to(dtype)
                              .to(DType::F64);
      const Tensor exact = from_vector(std::vector<double>(reference.begin(), reference.end()),
                                       {static_cast<std::int64_t>(y.size())})
                               .to(dtype)
                               .to(DType::F64);
      std::int64_t different = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double a = ours.data<double>()[i], b = exact.data<double>()[i];
        if (a == b || (std::isnan(a) && std::isnan(b))) continue;
        ++different;
        // A neighbour: one step of the dtype's mantissa (or of its subnormal spacing) away.
        REQUIRE(std::fabs(a - b) <=
                std::max(std::fabs(b), dtype == DType::F16 ? std::ldexp(1.0, -14) : std::ldexp(1.0, -126)) *
                    dtype_eps(dtype) * 2.0);
      }
      // Only results within a few f32 ulps of a rounding boundary can differ: a tiny fraction.
      CHECK(different <= static_cast<std::int64_t>(x.size()) / 1000);
    }
  }
}
