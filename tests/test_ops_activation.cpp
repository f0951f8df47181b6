// The activations added beside relu and gelu (autograd/unary.cpp): silu and leaky_relu, and their
// layers nn::SiLU and nn::LeakyReLU. Values against the exact math in f64, f16/bf16 rounded once from
// f32 math, PyTorch's gradient at 0 and NaN handling, f64 gradchecks, autocast leaving the dtype
// alone, and errors that name the op. Then exp, log, tanh, sigmoid and gelu at +-inf, NaN, +-0, the
// largest finite values and subnormals, forward and backward on every backend, and gelu's left tail.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/vector_math.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

double exact_silu(double x) { return x / (1 + std::exp(-x)); }

std::vector<double> map_values(const Tensor& x, double (*f)(double)) {
  std::vector<double> out = x.to_vector<double>();
  for (double& v : out) v = f(v);
  return out;
}

}  // namespace

TEST_CASE("silu: values, f16/bf16 rounded once, infinities and NaN, gradient") {
  check_values(silu(f64({0, 1, -1, 20}, {4}, false)), {0, 0.7310585786300049, -0.2689414213699951, 19.999999958776925},
               1e-15);
  const Tensor x32 = uniform_in({256}, DType::F32, 1, -8, 8);
  // exp and the division in f32: a few ulps, and the store.
  check_values(silu(x32), map_values(x32, exact_silu), tolerance(DType::F32, 4), 1e-30);
  for (DType dtype : {DType::F16, DType::BF16}) {
    INFO("dtype " << dtype_name(dtype));
    const Tensor x = uniform_in({256}, dtype, 2, -8, 8);
    const Tensor y = silu(x);
    CHECK(y.dtype() == dtype);
    // f32 math (a few f32 ulps) rounded once on store: 0.5 ulp, and half f16's subnormal spacing near 0.
    check_values(y, map_values(x, exact_silu), tolerance(dtype, 0.5) + tolerance(DType::F32, 4),
                 dtype == DType::F16 ? 0x1p-25 : 0.0);
  }
  // torch 1.13: silu(inf) = inf, silu(-inf) = nan (-inf * 0), silu(nan) = nan; silu(-100) underflows to -0.
  check_values(silu(tensor({kInf, -kInf, kNaN})), {kInf, kNaN, kNaN});
  check_values(silu(tensor({-100})), {0}, 0, 1e-40);
  // d silu = s (1 + x (1 - s)) with s = sigmoid(x): 0.5 at 0.
  Tensor at_zero = f64({0}, {1});
  backward(sum(silu(at_zero)));
  check_values(at_zero.grad(), {0.5}, 1e-15);
  check_gradients("silu", [](const std::vector<Tensor>& in) { return silu(in[0]); },
                  {f64({-4, -1.5, -0.3, 0.2, 1.7, 6}, {2, 3})});
  Tensor h = uniform_in({3}, DType::F16, 3).set_requires_grad(true);
  backward(sum(silu(h)));
  CHECK(h.grad().dtype() == DType::F16);
  check_error([] { silu(tensor({1}, {.dtype = DType::I32})); }, "mg::silu: needs a floating-point tensor");
}

TEST_CASE("leaky_relu: values, slope 0.01 by default, NaN passes, gradient negative_slope at 0") {
  check_values(leaky_relu(f64({-2, -0.5, 0, 3}, {4}, false)), {-0.02, -0.005, 0, 3}, 1e-15);
  check_values(leaky_relu(f64({-2, 3}, {2}, false), 0.2), {-0.4, 3}, 1e-15);
  check_values(leaky_relu(f64({-2, 3}, {2}, false), -1.0), {2, 3}, 0, 0);  // any slope, as PyTorch
  check_values(leaky_relu(tensor({kNaN, -kInf, kInf})), {kNaN, -kInf, kInf});
  // torch 1.13: leaky_relu([-1, 0, 2]).backward(ones) gives [0.01, 0.01, 1]: the slope at 0.
  Tensor x = f64({-1, 0, 2}, {3});
  backward(sum(leaky_relu(x)));
  check_values(x.grad(), {0.01, 0.01, 1}, 1e-15);
  for (double slope : {0.01, 0.3}) {
    check_gradients("leaky_relu", [slope](const std::vector<Tensor>& in) { return leaky_relu(in[0], slope); },
                    {f64({-1.5, -0.3, 0.2, 0.7, 1.9, -1}, {2, 3})});
  }
  for (DType dtype : {DType::F16, DType::BF16}) {
    INFO("dtype " << dtype_name(dtype));
    const Tensor h = uniform_in({200}, dtype, 4, -4, 4);
    std::vector<double> expected = h.to_vector<double>();
    for (double& v : expected) v = v > 0 ? v : 0.01 * v;
    CHECK(leaky_relu(h).dtype() == dtype);
    // The product in f32 (exact for these inputs to 2^-24 relative) and one rounding on store.
    check_values(leaky_relu(h), expected, tolerance(dtype, 0.5) + tolerance(DType::F32, 1),
                 dtype == DType::F16 ? 0x1p-25 : 0.0);
  }
  check_error([] { leaky_relu(tensor({1}, {.dtype = DType::I32})); }, "mg::leaky_relu: needs a floating-point tensor");
  check_error([] { leaky_relu(ones({2}), kNaN); }, "mg::leaky_relu: negative_slope must be finite");
}

TEST_CASE("silu and leaky_relu keep their input's dtype under autocast; the layers call the ops") {
  {
    Autocast autocast(DType::F16);
    const Tensor f32 = uniform_in({2, 3}, DType::F32, 5), f16 = uniform_in({2, 3}, DType::F16, 6);
    CHECK(silu(f32).dtype() == DType::F32);
    CHECK(silu(f16).dtype() == DType::F16);
    CHECK(leaky_relu(f32).dtype() == DType::F32);
    CHECK(leaky_relu(f16).dtype() == DType::F16);
  }
  const Tensor x = uniform_in({4, 5}, DType::F32, 7, -2, 2);
  nn::SiLU silu_layer;
  nn::LeakyReLU leaky_default, leaky(0.2);
  check_close(silu_layer(x), silu(x), 0);
  check_close(leaky_default(x), leaky_relu(x), 0);
  check_close(leaky(x), leaky_relu(x, 0.2), 0);
  CHECK(silu_layer.type_name() == "SiLU");
  CHECK(leaky.type_name() == "LeakyReLU(negative_slope=0.2)");
  CHECK(leaky_default.parameters().empty());
}

// ---- exp, log, tanh, sigmoid and gelu at the edges of the number line, forward and backward.
//
// The rule (kernels/cpu/vector_math.h): a NaN input gives a NaN output and a NaN gradient, always;
// at +-inf each op gives PyTorch 1.13's values, so GELU's gradient there is NaN (x phi(x) = inf * 0),
// and so is gelu(-inf) (-inf * Phi(-inf) = -inf * 0). Never a finite value where PyTorch has NaN: a
// NaN that disappears in backward hides an overflow from the GradScaler.

namespace {

// One input and what the op gives for it: the value and the gradient for an upstream gradient of 1,
// both exact (in f64), rounded once to the case's dtype before they are compared.
struct Edge {
  const char* input;
  double x, y, dy;
};

// The inputs every op is run on, in terms of the dtype's largest finite value and smallest
// subnormal, with the expected results of `op` for each.
std::vector<Edge> edges(const std::string& op, double largest, double smallest) {
  const double nan = kNaN, inf = kInf;
  if (op == "exp")  // dy = g y
    return {{"+inf", inf, inf, inf},
            {"-inf", -inf, 0, 0},
            {"NaN", nan, nan, nan},
            {"+0", 0.0, 1, 1},
            {"-0", -0.0, 1, 1},
            {"largest", largest, inf, inf},
            {"-largest", -largest, 0, 0},
            {"subnormal", smallest, 1, 1},
            {"-subnormal", -smallest, 1, 1}};
  if (op == "log")  // dy = g / x
    return {{"+inf", inf, inf, 0},
            {"-inf", -inf, nan, -0.0},
            {"NaN", nan, nan, nan},
            {"+0", 0.0, -inf, inf},
            {"-0", -0.0, -inf, -inf},
            {"largest", largest, std::log(largest), 1 / largest},
            {"-largest", -largest, nan, -1 / largest},
            {"subnormal", smallest, std::log(smallest), 1 / smallest},
            {"-subnormal", -smallest, nan, -1 / smallest}};
  if (op == "tanh")  // dy = g (1 - y^2)
    return {{"+inf", inf, 1, 0},
            {"-inf", -inf, -1, 0},
            {"NaN", nan, nan, nan},
            {"+0", 0.0, 0.0, 1},
            {"-0", -0.0, -0.0, 1},
            {"largest", largest, 1, 0},
            {"-largest", -largest, -1, 0},
            {"subnormal", smallest, smallest, 1},
            {"-subnormal", -smallest, -smallest, 1}};
  if (op == "sigmoid")  // dy = g y (1 - y)
    return {{"+inf", inf, 1, 0},
            {"-inf", -inf, 0, 0},
            {"NaN", nan, nan, nan},
            {"+0", 0.0, 0.5, 0.25},
            {"-0", -0.0, 0.5, 0.25},
            {"largest", largest, 1, 0},
            {"-largest", -largest, 0, 0},
            {"subnormal", smallest, 0.5, 0.25},
            {"-subnormal", -smallest, 0.5, 0.25}};
  REQUIRE(op == "gelu");  // dy = g (Phi(x) + x phi(x)); x Phi(x) of a subnormal is x / 2, a tie that rounds to even
  return {{"+inf", inf, inf, nan},
          {"-inf", -inf, nan, nan},
          {"NaN", nan, nan, nan},
          {"+0", 0.0, 0.0, 0.5},
          {"-0", -0.0, -0.0, 0.5},
          {"largest", largest, largest, 1},
          {"-largest", -largest, -0.0, 0},
          {"subnormal", smallest, smallest / 2, 0.5},
          {"-subnormal", -smallest, -smallest / 2, 0.5}};
}

// `expected` rounded once to `dtype`, as the op's result is.
double rounded(double expected, DType dtype) {
  return from_vector({expected}, {1}, {.dtype = DType::F64}).to(dtype).item();
}

// got must be expected (rounded to the dtype): NaN for NaN, the same infinity, the same zero with its
// sign, and otherwise within 2 ulps of the dtype (f32 math within a few f32 ulps, then one rounding).
void check_edge(const char* what, double got, double exact, DType dtype) {
  const double expected = rounded(exact, dtype);
  INFO(std::string(what) << ": got " << got << ", expected " << expected);
  if (std::isnan(expected))
    CHECK(std::isnan(got));
  else if (std::isinf(expected) || expected == 0)
    CHECK((got == expected && std::signbit(got) == std::signbit(expected)));
  else
    CHECK(std::fabs(got - expected) <= 2 * dtype_eps(dtype) * std::fabs(expected));
}

}  // namespace

TEST_CASE("exp, log, tanh, sigmoid, gelu at +-inf, NaN, +-0, the largest finite and subnormals: values and gradients") {
  std::vector<Device> devices{Device::cpu()};
  if (cuda_device_count() > 0) devices.push_back(Device::cuda());  // the CUDA kernels (or the emulator build's)
  const std::vector<std::pair<std::string, Tensor (*)(const Tensor&)>> ops = {
      {"exp", exp}, {"log", log}, {"tanh", tanh}, {"sigmoid", sigmoid}, {"gelu", gelu}};
  for (const Device& device : devices) {
    for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
      // The largest finite value (f32 3.4e38, f16 65504, bf16 3.39e38) and the smallest subnormal.
      const double largest = dtype == DType::F16 ? 65504.0 : dtype == DType::BF16 ? 0x1.fep127 : 0x1.fffffep127;
      const double smallest = dtype == DType::F16 ? 0x1p-24 : dtype == DType::BF16 ? 0x1p-133 : 0x1p-149;
      for (const auto& [name, op] : ops) {
        const std::vector<Edge> cases = edges(name, largest, smallest);
        std::vector<double> inputs;
        for (const Edge& e : cases) inputs.push_back(e.x);
        const auto n = static_cast<std::int64_t>(inputs.size());
        Tensor x = from_vector(inputs, {n}, {.dtype = dtype}).to(device).detach().set_requires_grad(true);
        const Tensor y = op(x);
        backward(y, ones({n}, {.dtype = dtype, .device = device}));
        const std::vector<double> values = y.to_vector<double>(), grads = x.grad().to_vector<double>();
        for (std::size_t i = 0; i < cases.size(); ++i) {
          INFO(name << "(" << std::string(cases[i].input) << ") in " << dtype_name(dtype) << " on "
                    << std::string(device.is_cuda() ? "cuda" : "cpu"));
          check_edge("value", values[i], cases[i].y, dtype);
          check_edge("gradient", grads[i], cases[i].dy, dtype);
        }
      }
    }
  }
}

TEST_CASE("gelu's left tail is accurate element by element on every backend, not only relative to |x|") {
  // x Phi(x) for x in [-14, -1]: 1 + erf(x / sqrt 2) would cancel there (gelu(-5) = -1.4e-6 from
  // terms of size 1), leaving errors of 2^-24 |x| / 2, a million ulps of the result. The CPU's packet
  // code (kernels/cpu/vector_math.h) is within kGeluUlps of each element. The CUDA kernels compute the
  // functor, x / 2 erfc(-x / sqrt 2) in f32: no cancellation, but erfc(z) changes by 2 z^2 of its value
  // per unit of relative change in z, and -x / sqrt 2 is rounded twice (1 / sqrt 2 to f32, then the
  // product: 1.3 2^-24 of relative error), which costs up to 1.3 x^2 ulps; erfcf adds its own few
  // (CUDA's is within 4 ulps, glibc's, the emulator's, within 2).
  std::vector<Device> devices{Device::cpu()};
  if (cuda_device_count() > 0) devices.push_back(Device::cuda());
  std::vector<double> inputs;
  for (int i = 0; i <= 1300; ++i) inputs.push_back(-1.0 - i / 100.0);
  for (const Device& device : devices) {
    INFO("on " << std::string(device.is_cuda() ? "cuda" : "cpu"));
    const Tensor x = from_vector(inputs, {static_cast<std::int64_t>(inputs.size())}).to(device);
    const std::vector<double> got = gelu(x).to_vector<double>(), rounded = x.to_vector<double>();
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double v = rounded[i], exact = 0.5 * v * std::erfc(-v / std::sqrt(2.0));
      INFO("gelu(" << v << ") = " << got[i] << ", exact " << exact);
      const double ulps = device.is_cuda() ? 8 + 1.5 * v * v : kernels::cpu::vector_math::kGeluUlps;
      CHECK(std::fabs(got[i] - exact) <= ulps * std::ldexp(1.0, std::max(std::ilogb(exact), -126) - 23));
    }
  }
}
