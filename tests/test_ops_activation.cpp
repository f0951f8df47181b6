// The activations added beside relu and gelu (autograd/unary.cpp): silu and leaky_relu, and their
// layers nn::SiLU and nn::LeakyReLU. Values against the exact math in f64, f16/bf16 rounded once from
// f32 math, PyTorch's gradient at 0 and NaN handling, f64 gradchecks, autocast leaving the dtype
// alone, and errors that name the op.
#include <cmath>
#include <limits>
#include <vector>

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
  check_values(silu(f64({0, 1, -1, 20}, {4}, false)),
               {0, 0.7310585786300049, -0.2689414213699951, 19.999999958776925}, 1e-15);
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
