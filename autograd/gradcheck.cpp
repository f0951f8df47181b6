#include "autograd/gradcheck.h"

#include <algorithm>
#include <cmath>

#include "autograd/ops.h"
#include "core/factory.h"

namespace mg {

namespace {

double weighted_sum(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
                    const Tensor& weights) {
  NoGradGuard no_grad;
  return sum(mul(fn(inputs), weights)).item();
}

}  // namespace

GradcheckResult gradcheck(const std::string& name, const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions options) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    MG_CHECK(input.defined(), "gradcheck {}: input {} is undefined", name, i);
    MG_CHECK(!input.requires_grad() || (input.dtype() == DType::F64 && input.device().is_cpu() && input.is_leaf()),
             "gradcheck {}: input {} requires grad, so it must be an f64 CPU leaf (got {} on {}, {})", name, i,
             input.dtype(), input.device(), input.is_leaf() ? "a leaf" : "made by an op");
  }

  // Analytic gradients from one backward, with each input's previous .grad put aside.
  std::vector<Tensor> saved_grads;
  for (Tensor input : inputs) {  // a Tensor is a handle: the copy refers to the same tensor
    saved_grads.push_back(input.defined() ? input.grad() : Tensor());
    if (input.defined()) input.zero_grad();
  }
  Tensor output = fn(inputs);
  MG_CHECK(output.defined(), "gradcheck {}: the function returned an undefined tensor", name);
  MG_CHECK(output.dtype() == DType::F64, "gradcheck {}: the function must return f64, got {}", name, output.dtype());
  Generator generator(options.seed);
  Tensor weights = uniform(output.shape(), -1.0, 1.0, generator, {.dtype = DType::F64});
  backward(sum(mul(output, weights)));

  GradcheckResult result{true, 0.0, ""};
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor input = inputs[i];
    if (!input.requires_grad()) continue;
    Tensor analytic = input.grad();
    double* value = input.data<double>();
    double worst = -1.0, worst_expected = 0.0, worst_got = 0.0;
    std::int64_t worst_at = 0;
    for (std::int64_t e = 0; e < input.numel(); ++e) {
      const double original = value[e];
      value[e] = original + options.step;
      const double plus = weighted_sum(fn, inputs, weights);
      value[e] = original - options.step;
      const double minus = weighted_sum(fn, inputs, weights);
      value[e] = original;
      const double expected = (plus - minus) / (2.0 * options.step);
      const double got = analytic.defined() ? analytic.data<double>()[e] : 0.0;
      double error = std::fabs(got - expected) / std::max(1.0, std::fabs(expected));
      if (std::isnan(error)) error = INFINITY;
      if (error > worst) {
        worst = error;
        worst_at = e;
        worst_expected = expected;
        worst_got = got;
      }
    }
    const bool ok = worst <= options.tolerance;
    result.passed = result.passed && ok;
    result.max_error = std::max(result.max_error, worst);
    result.report += fmt::format(
        "gradcheck {}: input {} (shape {}): worst element {}: expected {:.10g}, got {:.10g}, error {:.3g} ({})\n", name,
        i, input.shape(), worst_at, worst_expected, worst_got, worst,
        ok ? "ok" : fmt::format("above tolerance {:.3g}", options.tolerance));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor input = inputs[i];
    if (input.defined()) input.set_grad(saved_grads[i]);
  }
  return result;
}

}  // namespace mg
