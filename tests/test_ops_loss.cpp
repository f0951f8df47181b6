// The binary cross entropies: the probability form (banned under autocast) and the stable logits
// form, against f64 values computed by hand and central-difference gradients.
#include <cmath>
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

Tensor i32(const std::vector<double>& values, const Shape& shape) {
  return from_vector(values, shape, {.dtype = DType::I32});
}

}  // namespace

TEST_CASE("binary cross entropy: forward values against f64 by hand") {
  const std::vector<double> xs{-2, 0.5, 3, 0}, ts{0, 1, 0.25, 0.5};
  const std::vector<double> ps{0.1, 0.5, 0.9, 0.75};
  std::vector<double> logit_loss, prob_loss;
  double logit_sum = 0, prob_sum = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    logit_loss.push_back(std::log1p(std::exp(xs[i])) - xs[i] * ts[i]);  // softplus(x) - x t
    prob_loss.push_back(-(ts[i] * std::log(ps[i]) + (1 - ts[i]) * std::log(1 - ps[i])));
    logit_sum += logit_loss.back();
    prob_sum += prob_loss.back();
  }
  Tensor x = f64(xs, {2, 2}, false), t = f64(ts, {2, 2}, false), p = f64(ps, {2, 2}, false);
  check_values(binary_cross_entropy_with_logits(x, t, Reduction::None), logit_loss);
  check_values(binary_cross_entropy_with_logits(x, t, Reduction::Sum), {logit_sum});
  check_values(binary_cross_entropy_with_logits(x, t), {logit_sum / 4});
  CHECK(binary_cross_entropy_with_logits(x, t).shape() == Shape{});
  CHECK(binary_cross_entropy_with_logits(x, t, Reduction::None).shape() == Shape{2, 2});
  check_values(binary_cross_entropy(p, t, Reduction::None), prob_loss);
  check_values(binary_cross_entropy(p, t, Reduction::Sum), {prob_sum});
  check_values(binary_cross_entropy(p, t, Reduction::Mean), {prob_sum / 4});
  // log is clamped at -100 (PyTorch): a confident wrong answer costs 100, not inf.
  check_values(binary_cross_entropy(f64({0, 1}, {2}, false), f64({1, 0}, {2}, false), Reduction::None), {100, 100});
  // The logits form stays finite where exp(-x) would overflow and sigmoid would round to 0.
  check_values(binary_cross_entropy_with_logits(f64({-800, 800}, {2}, false), f64({1, 0}, {2}, false),
                                                Reduction::None), {800, 800});
  // Without autocast the result has the input's dtype (math in f32, one rounding).
  Tensor x16 = x.detach().to(DType::F16), t16 = t.detach().to(DType::F16);
  Tensor loss16 = binary_cross_entropy_with_logits(x16, t16, Reduction::None);
  CHECK(loss16.dtype() == DType::F16);
  check_values(loss16, logit_loss, tolerance(DType::F16, 0.5) + 1e-6);  // inputs exact in f16, 0.5 ulp rounding
}

TEST_CASE("binary cross entropy: gradients by central differences") {
  Tensor x = random_f64({2, 3}, -3, 3, 1), t = random_f64({2, 3}, 0, 1, 2);
  Tensor p = random_f64({2, 3}, 0.05, 0.95, 3), t_const = random_f64({2, 3}, 0, 1, 4, false);
  for (Reduction reduction : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    INFO("reduction " << static_cast<int>(reduction));
    check_gradients("binary_cross_entropy_with_logits",
                    [&](const std::vector<Tensor>& in) { return binary_cross_entropy_with_logits(in[0], in[1], reduction); },
                    {x, t});
    check_gradients("binary_cross_entropy",
                    [&](const std::vector<Tensor>& in) { return binary_cross_entropy(in[0], t_const, reduction); },
                    {p});
  }
  // Targets get no gradient in the probability form (documented).
  Tensor p2 = f64({0.25, 0.5}, {2}), t2 = f64({0, 1}, {2});
  backward(binary_cross_entropy(p2, t2, Reduction::Sum));
  check_values(p2.grad(), {0.25 / (0.25 * 0.75), -0.5 / 0.25});
  CHECK_FALSE(t2.grad().defined());
}

TEST_CASE("binary cross entropy: bad input") {
  Tensor x = f64({1, 2, 3}, {3}, false), t = f64({0, 1}, {2}, false);
  check_error([&] { binary_cross_entropy_with_logits(x, t); }, "mg::binary_cross_entropy_with_logits");
  check_error([&] { binary_cross_entropy(x, t); }, "must have the same shape");
  check_error([&] { binary_cross_entropy_with_logits(x, x.to(DType::F32)); }, "mg::binary_cross_entropy_with_logits");
  check_error([&] { binary_cross_entropy(i32({1}, {1}), i32({1}, {1})); }, "mg::binary_cross_entropy");
  check_error([&] { binary_cross_entropy_with_logits(f64({}, {0}, false), f64({}, {0}, false)); }, "empty");
}
