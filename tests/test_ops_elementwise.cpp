// Elementwise ops (autograd/binary.cpp, autograd/unary.cpp): add, sub, mul, div, pow (tensor and
// scalar forms), where, the unary ops neg ... gelu and clamp, rsub, rdiv and the operators.
// Forward values are checked against hand-computed literals or plain f64 loops, gradients with
// f64 gradchecks (including NumPy broadcasting), f16/bf16 results against one rounding of the exact
// value, and bad input (shapes, mixed dtypes, i32) against errors that name the op.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/vector_math.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

using UnaryFn = std::function<Tensor(const Tensor&)>;
using BinaryFn = std::function<Tensor(const Tensor&, const Tensor&)>;
using Reference = std::function<double(double)>;

constexpr double kE = 2.718281828459045;

// Gradcheck points (a [2, 3] tensor): at least 0.05 away from the kinks of abs/relu (0) and the clamp
// bounds used below (-0.5, 0.75), and positive ones for log, sqrt, pow and rdiv.
const std::vector<double> kPoints = {-1.5, -0.3, 0.2, 0.7, 1.9, -1};
const std::vector<double> kPositivePoints = {0.6, 0.9, 1.2, 1.7, 2.4, 2.9};

// Values made in f32 and rounded to `dtype`: the test then knows exactly what the op sees.
Tensor rounded_uniform(const Shape& shape, double low, double high, std::uint64_t seed, DType dtype) {
  Generator generator(seed);
  return uniform(shape, low, high, generator).to(dtype);
}

std::vector<double> map_values(const Tensor& x, const Reference& f) {
  std::vector<double> out = x.to_vector<double>();
  for (double& v : out) v = f(v);
  return out;
}

// Absolute slack for f16 results that land in the subnormal range (half its spacing 2^-24);
// bf16 has f32's exponent range, so its results never get there from these inputs.
double subnormal_slack(DType dtype) { return dtype == DType::F16 ? 0x1p-25 : 0.0; }

// One unary op (or tensor-scalar form) and everything the shared checks need.
struct UnaryCase {
  std::string error_name;  // what an error message must name, e.g. "mg::exp"
  UnaryFn op;
  Reference reference;  // the exact math in f64, written independently of the kernels
  double low, high;  // domain of the random forward checks
  std::vector<double> grad_points;  // six f64 gradcheck inputs, away from kinks, inside the domain
  double f32_ulps;  // error of the f32 math in units of f32 eps (incl. its own rounding)
  bool exact = false;  // the result is one of the (representable) inputs: no rounding at all
};

// f32 forward, f16/bf16 forward, an f64 gradcheck and the i32 error, for one unary case.
void check_unary(const UnaryCase& c) {
  INFO("op " << c.error_name);
  Tensor x32 = rounded_uniform({256}, c.low, c.high, 11, DType::F32);
  check_values(c.op(x32), map_values(x32, c.reference), c.exact ? 0.0 : tolerance(DType::F32, c.f32_ulps), 0.0);
  for (DType dtype : {DType::F16, DType::BF16}) {
    INFO("dtype " << dtype_name(dtype));
    Tensor x = rounded_uniform({256}, c.low, c.high, 12, dtype);
    Tensor y = c.op(x);
    CHECK(y.dtype() == dtype);
    // Inputs are exact, the math runs in f32 (f32_ulps of error) and the store rounds once: 0.5 ulp.
    double rtol = c.exact ? 0.0 : tolerance(dtype, 0.5) + tolerance(DType::F32, c.f32_ulps);
    check_values(y, map_values(x.to(DType::F64), c.reference), rtol, c.exact ? 0.0 : subnormal_slack(dtype));
  }
  check_gradients(c.error_name, [&](const std::vector<Tensor>& in) { return c.op(in[0]); },
                  {f64(c.grad_points, {2, 3})});
  check_error([&] { c.op(tensor({1, 2}, {.dtype = DType::I32})); }, c.error_name);
}

// Shape, dtype and i32 errors of a binary op; the shape message names the op and both shapes.
void check_binary_errors(const BinaryFn& op, const std::string& name) {
  Tensor a = ones({2, 3}), b = ones({4});
  check_error([&] { op(a, b); }, name + ": shapes [2, 3] and [4] cannot be broadcast");
  check_error([&] { op(ones({4, 1, 3}), ones({2, 2})); }, name + ": shapes [4, 1, 3] and [2, 2]");
  check_error([&] { op(a, ones({2, 3}, {.dtype = DType::F16})); }, name + ": inputs have different dtypes");
  check_error([&] { op(ones({3}, {.dtype = DType::BF16}), ones({3}, {.dtype = DType::F64})); }, name);
  Tensor i = tensor({1, 2, 3}, {.dtype = DType::I32});
  check_error([&] { op(i, i); }, name + ": needs a floating-point tensor");
}

// f32, f16 and bf16 forward of a binary op on broadcast shapes [4, 5] x [5] against f64 loops.
void check_binary_precision(const BinaryFn& op, const std::function<double(double, double)>& reference, double a_low,
                            double a_high, double b_low, double b_high, double f32_ulps) {
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    INFO("dtype " << dtype_name(dtype));
    Tensor a = rounded_uniform({4, 5}, a_low, a_high, 21, dtype), b = rounded_uniform({5}, b_low, b_high, 22, dtype);
    std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), expected;
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 5; ++j) expected.push_back(reference(av[i * 5 + j], bv[j]));
    Tensor z = op(a, b);
    CHECK(z.shape() == Shape{4, 5});
    // f32: the f32 math alone; f16/bf16: exact inputs, f32 math, one rounding on store (0.5 ulp).
    double rtol = tolerance(DType::F32, f32_ulps) + (dtype == DType::F32 ? 0.0 : tolerance(dtype, 0.5));
    check_values(z, expected, rtol, subnormal_slack(dtype));
  }
}

}  // namespace

TEST_CASE("add: same shape, broadcasting and scalar-shaped tensors") {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  check_values(add(a, from_vector({10, 20, 30}, {3})), {11, 22, 33, 14, 25, 36});
  Tensor col = add(from_vector({1, 2}, {2, 1}), from_vector({10, 20, 30}, {1, 3}));  // [2,1]+[1,3]
  CHECK(col.shape() == Shape{2, 3});
  check_values(col, {11, 21, 31, 12, 22, 32});
  Tensor s = add(a, from_vector({0.5}, Shape{}));  // a {} tensor broadcasts to everything
  CHECK(s.shape() == Shape{2, 3});
  check_values(s, {1.5, 2.5, 3.5, 4.5, 5.5, 6.5});
  Tensor both = add(from_vector({2}, Shape{}), from_vector({3}, Shape{}));
  CHECK(both.shape() == Shape{});
  CHECK(both.item() == 5.0);

  // [4,1,3] + [2,1] -> [4,2,3]: out[i,j,k] = x[i,0,k] + y[j,0], against plain loops.
  Tensor x = random_f64({4, 1, 3}, -1, 1, 1, false), y = random_f64({2, 1}, -1, 1, 2, false);
  std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>(), expected;
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 2; ++j)
      for (std::size_t k = 0; k < 3; ++k) expected.push_back(xv[i * 3 + k] + yv[j]);
  Tensor z = add(x, y);
  CHECK(z.shape() == Shape{4, 2, 3});
  check_values(z, expected);
  check_values(add(y, x), expected);  // symmetric
}

TEST_CASE("add: gradcheck with broadcasting") {
  auto fn = [](const std::vector<Tensor>& in) { return add(in[0], in[1]); };
  check_gradients("add [2,3]+[3]", fn, {random_f64({2, 3}, -1, 1, 1), random_f64({3}, -1, 1, 2)});
  check_gradients("add [2,1]+[1,3]", fn, {random_f64({2, 1}, -1, 1, 3), random_f64({1, 3}, -1, 1, 4)});
  check_gradients("add [4,1,3]+[2,1]", fn, {random_f64({4, 1, 3}, -1, 1, 5), random_f64({2, 1}, -1, 1, 6)});
  check_gradients("add [2,3]+{}", fn, {random_f64({2, 3}, -1, 1, 7), random_f64({}, -1, 1, 8)});
}

TEST_CASE("add: low precision, bad input") {
  check_binary_precision([](const Tensor& a, const Tensor& b) { return add(a, b); },
                         [](double a, double b) { return a + b; }, -2, 2, -2, 2, 0.5);
  check_binary_errors([](const Tensor& a, const Tensor& b) { return add(a, b); }, "mg::add");
}

TEST_CASE("sub: forward, gradcheck, low precision and bad input") {
  check_values(sub(from_vector({1, 2}, {2, 1}), from_vector({10, 20, 30}, {1, 3})), {-9, -19, -29, -8, -18, -28});
  check_values(sub(from_vector({5}, Shape{}), from_vector({1, 2, 3}, {3})), {4, 3, 2});
  auto fn = [](const std::vector<Tensor>& in) { return sub(in[0], in[1]); };
  check_gradients("sub [2,3]-[2,1]", fn, {random_f64({2, 3}, -1, 1, 1), random_f64({2, 1}, -1, 1, 2)});
  check_gradients("sub [3]-[2,3]", fn, {random_f64({3}, -1, 1, 3), random_f64({2, 3}, -1, 1, 4)});
  check_gradients("sub {}-[2,3]", fn, {random_f64({}, -1, 1, 5), random_f64({2, 3}, -1, 1, 6)});
  check_binary_precision([](const Tensor& a, const Tensor& b) { return sub(a, b); },
                         [](double a, double b) { return a - b; }, -2, 2, -2, 2, 0.5);
  check_binary_errors([](const Tensor& a, const Tensor& b) { return sub(a, b); }, "mg::sub");
}

TEST_CASE("mul: forward, gradcheck, low precision and bad input") {
  check_values(mul(from_vector({1, 2, 3, 4, 5, 6}, {2, 3}), from_vector({2, -1, 0.5}, {3})), {2, -2, 1.5, 8, -5, 3});
  check_values(mul(from_vector({2, 3}, {2, 1}), from_vector({1, 10, 100}, {1, 3})), {2, 20, 200, 3, 30, 300});
  auto fn = [](const std::vector<Tensor>& in) { return mul(in[0], in[1]); };
  check_gradients("mul [2,3]*[3]", fn, {random_f64({2, 3}, -1, 1, 1), random_f64({3}, -1, 1, 2)});
  check_gradients("mul [2,1]*[1,3]", fn, {random_f64({2, 1}, -1, 1, 3), random_f64({1, 3}, -1, 1, 4)});
  check_gradients("mul [4,1,3]*[2,1]", fn, {random_f64({4, 1, 3}, -1, 1, 5), random_f64({2, 1}, -1, 1, 6)});
  check_gradients("mul x*x (one input used twice)", [](const std::vector<Tensor>& in) { return mul(in[0], in[0]); },
                  {random_f64({2, 3}, -1, 1, 7)});
  check_binary_precision([](const Tensor& a, const Tensor& b) { return mul(a, b); },
                         [](double a, double b) { return a * b; }, -2, 2, -2, 2, 0.5);
  check_binary_errors([](const Tensor& a, const Tensor& b) { return mul(a, b); }, "mg::mul");
}

TEST_CASE("mul: f16 gradients keep the leaf's dtype") {
  Tensor a = tensor({1, 2, 3}, {.dtype = DType::F16, .requires_grad = true});
  Tensor b = tensor({4, 5, 6}, {.dtype = DType::F16, .requires_grad = true});
  backward(sum(mul(a, b)));
  CHECK(a.grad().dtype() == DType::F16);
  check_values(a.grad(), {4, 5, 6});
  check_values(b.grad(), {1, 2, 3});
}

TEST_CASE("div: forward, division by zero, gradcheck, low precision and bad input") {
  check_values(div(from_vector({1, 2, 3, 4, 5, 6}, {2, 3}), from_vector({2, 4, 8}, {3})),
               {0.5, 0.5, 0.375, 2, 1.25, 0.75});
  std::vector<double> z = div(tensor({1, -1, 0}), zeros({3})).to_vector<double>();  // IEEE: inf, -inf, nan
  CHECK((std::isinf(z[0]) && z[0] > 0));
  CHECK((std::isinf(z[1]) && z[1] < 0));
  CHECK(std::isnan(z[2]));
  auto fn = [](const std::vector<Tensor>& in) { return div(in[0], in[1]); };
  check_gradients("div [2,3]/[3]", fn, {random_f64({2, 3}, -1, 1, 1), random_f64({3}, 0.5, 2, 2)});
  check_gradients("div [2,1]/[1,3]", fn, {random_f64({2, 1}, -1, 1, 3), random_f64({1, 3}, -2, -0.5, 4)});
  check_gradients("div [3]/[2,3]", fn, {random_f64({3}, -1, 1, 5), random_f64({2, 3}, 0.5, 2, 6)});
  // f32 division is correctly rounded: 0.5 ulp.
  check_binary_precision([](const Tensor& a, const Tensor& b) { return div(a, b); },
                         [](double a, double b) { return a / b; }, -2, 2, 0.5, 2, 0.5);
  check_binary_errors([](const Tensor& a, const Tensor& b) { return div(a, b); }, "mg::div");
}

TEST_CASE("pow: tensor exponent forward, gradcheck, low precision and bad input") {
  check_values(pow(tensor({2, 9, 4, 2}), tensor({3, 0.5, -1, 0})), {8, 3, 0.25, 1});
  check_values(pow(from_vector({2}, {1}), from_vector({1, 2, 3}, {3, 1})), {2, 4, 8});
  auto fn = [](const std::vector<Tensor>& in) { return pow(in[0], in[1]); };
  check_gradients("pow [2,3]^[3]", fn, {random_f64({2, 3}, 0.5, 2, 1), random_f64({3}, -2, 2, 2)});
  check_gradients("pow [2,1]^[1,3]", fn, {random_f64({2, 1}, 0.5, 2, 3), random_f64({1, 3}, -2, 2, 4)});
  // powf is within 1 f32 ulp.
  check_binary_precision([](const Tensor& a, const Tensor& b) { return pow(a, b); },
                         [](double a, double b) { return std::pow(a, b); }, 0.5, 2, -2, 2, 1.0);
  check_binary_errors([](const Tensor& a, const Tensor& b) { return pow(a, b); }, "mg::pow");
}

TEST_CASE("where: selection, broadcasting, gradcheck and bad input") {
  Tensor a = tensor({1, 2, 3}), b = tensor({-1, -2, -3});
  check_values(where(tensor({1, 0, 1}, {.dtype = DType::I32}), a, b), {1, -2, 3});
  check_values(where(tensor({0.5, 0, -1}), a, b), {1, -2, 3});  // mask in a's dtype: non-zero selects a
  Tensor mask = from_vector({1, 0}, {2, 1}, {.dtype = DType::I32});
  Tensor w = where(mask, a, from_vector({7}, Shape{}));  // [2,1] x [3] x {} -> [2,3]
  CHECK(w.shape() == Shape{2, 3});
  check_values(w, {1, 2, 3, 7, 7, 7});

  // f16/bf16: the selected values are copied, not rounded.
  for (DType dtype : {DType::F16, DType::BF16}) {
    Tensor a16 = rounded_uniform({2, 3}, -2, 2, 31, dtype), b16 = rounded_uniform({3}, -2, 2, 32, dtype);
    std::vector<double> av = a16.to_vector<double>(), bv = b16.to_vector<double>();
    Tensor w16 = where(mask, a16, b16);
    CHECK(w16.dtype() == dtype);
    check_values(w16, {av[0], av[1], av[2], bv[0], bv[1], bv[2]}, 0, 0);
  }
  check_gradients("where [2,1] ? [3] : {}", [&](const std::vector<Tensor>& in) { return where(mask, in[0], in[1]); },
                  {random_f64({3}, -1, 1, 1), random_f64({}, -1, 1, 2)});
  Tensor mask64 = f64({1, 0, 0, 1, 1, 0}, {2, 3}, false);
  check_gradients("where f64 mask", [&](const std::vector<Tensor>& in) { return where(mask64, in[0], in[1]); },
                  {random_f64({2, 3}, -1, 1, 3), random_f64({2, 3}, -1, 1, 4)});

  // A mask of another floating dtype is read exactly: 2^-24 (the smallest f16) is non-zero and selects a.
  check_values(where(from_vector({0x1p-24, 0.0, -1.0}, {3}, {.dtype = DType::F16}), a, b), {1, -2, 3});
  check_error([&] { where(ones({3}, {.dtype = DType::F64}), a, b); }, "mg::where: the mask must be i32");
  check_error([&] { where(ones({4}), a, b); }, "mg::where: shapes [4] and [3]");
  check_error([&] { where(ones({3}), a, ones({3}, {.dtype = DType::F16})); },
              "mg::where: inputs have different dtypes");
  Tensor i = tensor({1, 2, 3}, {.dtype = DType::I32});
  check_error([&] { where(i, i, i); }, "mg::where: needs a floating-point tensor");
}

TEST_CASE("neg: forward, gradcheck, low precision and bad input") {
  check_values(neg(tensor({1, -2.5, 0})), {-1, 2.5, 0});
  check_unary(
      {"mg::neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, -2, 2, kPoints, 0, true});
}

TEST_CASE("exp: forward, gradcheck, low precision and bad input") {
  check_values(exp(f64({0, 1, -1}, {3}, false)), {1, kE, 1 / kE}, 1e-15);
  // expf is within 1 f32 ulp.
  check_unary(
      {"mg::exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -2, 2, kPoints, 1});
}

TEST_CASE("log: forward, gradcheck, low precision and bad input") {
  check_values(log(f64({1, kE, 0.25}, {3}, false)), {0, 1, -1.3862943611198906}, 1e-15);
  check_values(log(zeros({1})), {-std::numeric_limits<double>::infinity()}, 0, 0);
  check_unary({"mg::log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.5, 3,
               kPositivePoints, 1});  // logf is within 1 f32 ulp
}

TEST_CASE("sqrt: forward, gradcheck, low precision and bad input") {
  check_values(sqrt(tensor({4, 2.25, 0})), {2, 1.5, 0});
  check_unary({"mg::sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.5, 3,
               kPositivePoints, 0.5});  // sqrtf is correctly rounded
}

TEST_CASE("abs: forward, gradient at zero, gradcheck, low precision and bad input") {
  check_values(abs(tensor({-2, 0, 3.5})), {2, 0, 3.5});
  Tensor x = f64({-2, 0, 3}, {3});
  backward(sum(abs(x)));
  check_values(x.grad(), {-1, 0, 1});  // sign(x), 0 at the kink
  check_unary({"mg::abs", [](const Tensor& t) { return abs(t); }, [](double v) { return std::fabs(v); }, -2, 2, kPoints,
               0, true});
}

TEST_CASE("clamp: forward, gradient at the bounds, gradcheck, low precision and bad input") {
  double nan = std::numeric_limits<double>::quiet_NaN();
  check_values(clamp(tensor({-2, -0.5, 0.25, 1.5, nan}), -1, 1), {-1, -0.5, 0.25, 1, nan});
  Tensor x = f64({-2, -1, 0.3, 1, 1.5}, {5});
  backward(sum(clamp(x, -1, 1)));
  check_values(x.grad(), {0, 1, 1, 1, 0});  // passes where min <= x <= max, bounds included
  // Bounds representable in every dtype, so the result is always one of the representable values.
  check_unary({"mg::clamp", [](const Tensor& t) { return clamp(t, -0.5, 0.75); },
               [](double v) { return std::min(std::max(v, -0.5), 0.75); }, -2, 2, kPoints, 0, true});
  check_error([] { clamp(ones({2}), 1, -1); }, "mg::clamp: min 1 is greater than max -1");
}

TEST_CASE("tanh: forward, gradcheck, low precision and bad input") {
  check_values(tanh(f64({0, 1, -1}, {3}, false)), {0, 0.7615941559557649, -0.7615941559557649}, 1e-15);
  // tanhf is within 2 f32 ulps.
  check_unary(
      {"mg::tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -2, 2, kPoints, 2});
}

TEST_CASE("sigmoid: forward, gradcheck, low precision and bad input") {
  check_values(sigmoid(f64({0, std::log(3.0), -std::log(3.0)}, {3}, false)), {0.5, 0.75, 0.25}, 1e-15);
  // 1 / (1 + exp(-x)) in f32: three roundings (exp, add, divide) of at most 0.5 ulp each.
  check_unary({"mg::sigmoid",
               [](const Tensor& x) { return sigmoid(x); },
               [](double x) { return 0.5 * (1 + std::tanh(x / 2)); },
               -4,
               4,
               {-3.5, -0.3, 0.2, 0.7, 1.9, -1},
               2});
}

TEST_CASE("relu: forward, gradient at zero, gradcheck, low precision and bad input") {
  check_values(relu(tensor({-1, 0, 2.5})), {0, 0, 2.5});
  Tensor x = f64({-1, 0, 2}, {3});
  backward(sum(relu(x)));
  check_values(x.grad(), {0, 0, 1});  // 0 at the kink
  check_unary({"mg::relu", [](const Tensor& t) { return relu(t); }, [](double v) { return v > 0 ? v : 0.0; }, -2, 2,
               kPoints, 0, true});
}

TEST_CASE("gelu: exact erf form, gradcheck, low precision and bad input") {
  check_values(gelu(f64({0, 1, -1, 2}, {4}, false)), {0, 0.8413447460685429, -0.15865525393145707, 1.9544997361036416},
               1e-14);
  // 0.5 x (1 + erf(x/sqrt2)) in f32: for x >= -2 the 1 + erf cancels down to 0.0455, amplifying
  // erf's error about 22x, plus the roundings of x/sqrt2 and the products. The CPU's vectorised
  // erf is within kVectorMathUlps = 6 ulps (kernels/cpu/vector_math.h): 22 * 6 + 4 = 136 ulps,
  // an absolute error below 4e-7 on this range.
  check_unary({"mg::gelu", [](const Tensor& x) { return gelu(x); },
               [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }, -2, 3, kPoints,
               22 * kernels::cpu::vector_math::kVectorMathUlps + 4});
}

// The tensor-scalar forms: x op s for exact f16/bf16 inputs is one correctly rounded f32 operation
// (0.5 ulp of f32, often exact), then the store rounds once.

TEST_CASE("add: tensor-scalar form") {
  check_values(add(tensor({1, 2, 4}), 0.5), {1.5, 2.5, 4.5});
  check_unary({"mg::add", [](const Tensor& t) { return add(t, 0.75); }, [](double v) { return v + 0.75; }, -2, 2,
               kPoints, 0.5});
}

TEST_CASE("sub: tensor-scalar form") {
  check_values(sub(tensor({1, 2, 4}), 0.5), {0.5, 1.5, 3.5});
  check_unary({"mg::sub", [](const Tensor& t) { return sub(t, 0.25); }, [](double v) { return v - 0.25; }, -2, 2,
               kPoints, 0.5});
}

TEST_CASE("rsub: scalar minus tensor") {
  check_values(rsub(10, tensor({1, 2, 4})), {9, 8, 6});
  check_unary(
      {"mg::sub", [](const Tensor& t) { return rsub(1.5, t); }, [](double v) { return 1.5 - v; }, -2, 2, kPoints, 0.5});
}

TEST_CASE("mul: tensor-scalar form") {
  check_values(mul(tensor({1, 2, 4}), -3), {-3, -6, -12});
  check_unary(
      {"mg::mul", [](const Tensor& t) { return mul(t, 3.0); }, [](double v) { return v * 3; }, -2, 2, kPoints, 0.5});
}

TEST_CASE("div: tensor-scalar form") {
  check_values(div(tensor({1, 2, 4}), 4), {0.25, 0.5, 1});
  check_unary(
      {"mg::div", [](const Tensor& t) { return div(t, 3.0); }, [](double v) { return v / 3; }, -2, 2, kPoints, 0.5});
}

TEST_CASE("rdiv: scalar divided by tensor") {
  check_values(rdiv(2, tensor({1, 2, 4})), {2, 1, 0.5});
  check_unary({"mg::rdiv", [](const Tensor& t) { return rdiv(2.0, t); }, [](double v) { return 2 / v; }, 0.5, 3,
               kPositivePoints, 0.5});
}

TEST_CASE("pow: scalar exponent") {
  check_values(pow(tensor({2, 3, 0.5}), 2), {4, 9, 0.25});
  check_values(pow(tensor({4, 9, 0.25}), 0.5), {2, 3, 0.5});
  check_values(pow(tensor({2, 4, -0.5}), -1), {0.5, 0.25, -2});
  // powf is within 1 f32 ulp.
  check_unary({"mg::pow", [](const Tensor& t) { return pow(t, 2.5); }, [](double v) { return std::pow(v, 2.5); }, 0.5,
               3, kPositivePoints, 1});
  check_unary({"mg::pow", [](const Tensor& t) { return pow(t, -1.5); }, [](double v) { return std::pow(v, -1.5); }, 0.5,
               3, kPositivePoints, 1});
}

TEST_CASE("operators: + - * / with tensors and scalars, forward and gradcheck") {
  Tensor a = tensor({1, 2, 4}), b = tensor({4, 8, 8});
  check_values(a + b, {5, 10, 12});
  check_values(a - b, {-3, -6, -4});
  check_values(a * b, {4, 16, 32});
  check_values(a / b, {0.25, 0.25, 0.5});
  check_values(-a, {-1, -2, -4});
  check_values(a + 2.0, {3, 4, 6});
  check_values(2.0 + a, {3, 4, 6});
  check_values(a - 2.0, {-1, 0, 2});
  check_values(2.0 - a, {1, 0, -2});
  check_values(a * 3.0, {3, 6, 12});
  check_values(3.0 * a, {3, 6, 12});
  check_values(a / 4.0, {0.25, 0.5, 1});
  check_values(4.0 / a, {4, 2, 1});
  check_gradients("operators",
                  [](const std::vector<Tensor>& in) {
                    const Tensor &x = in[0], &y = in[1];
                    return (x * y + 2.0 - x / y) * 3.0 - 1.0 / x + (0.5 - y) / 4.0 - (-x) + 2.0 * y - x;
                  },
                  {random_f64({2, 3}, 0.5, 2, 1), random_f64({3}, 0.5, 2, 2)});
  check_error([&] { return a + ones({2}); }, "mg::add: shapes [3] and [2]");
  check_error([&] { return a * ones({3}, {.dtype = DType::F16}); }, "mg::mul: inputs have different dtypes");
}
