// The binary cross entropies: the probability form (banned under autocast) and the stable logits
// form, against f64 values computed by hand and central-difference gradients; cross_entropy's
// accuracy with large logits and its non-finite rows (PyTorch's results), on every device of the
// build. (cross_entropy's values, reductions and ignore_index: tests/test_ops_softmax.cpp.)
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/vector_math.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

Tensor i32(const std::vector<double>& values, const Shape& shape) {
  return from_vector(values, shape, {.dtype = DType::I32});
}

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// The CPU, and the GPU where one is visible (the CUDA emulator included): the kernels of both.
std::vector<Device> devices() {
  std::vector<Device> all{Device::cpu()};
  if (cuda_device_count() > 0) all.push_back(Device::cuda());
  return all;
}

// cross_entropy with Reduction::None on `device`, and the gradient of sum(loss): (loss, dlogits) on the CPU.
std::pair<Tensor, Tensor> loss_and_gradient(const std::vector<double>& logit_values, const Shape& shape,
                                            const std::vector<double>& labels, Device device) {
  Tensor logits = from_vector(logit_values, shape, {.device = device}).set_requires_grad(true);
  Tensor loss = cross_entropy(logits, i32(labels, {shape[0]}).to(device), {.reduction = Reduction::None});
  backward(loss, ones({shape[0]}, {.device = device}));
  return {loss.to(Device::cpu()), logits.grad().to(Device::cpu())};
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
  check_values(binary_cross_entropy_with_logits(f64({-800, 800}, {2}, false), f64({1, 0}, {2}, false), Reduction::None),
               {800, 800});
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
                    [&](const std::vector<Tensor>& in) {
                      return binary_cross_entropy_with_logits(in[0], in[1], reduction);
                    },
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

TEST_CASE("cross_entropy: logits near 1e4 keep the max out of every probability's rounding") {
  // An f32 logit near 1e4 is a multiple of 2^-10. Rounding logsumexp = max + log(sum) to f32 moves it
  // by up to 2^-11 and with it every exp(x - logsumexp): 2^-11 relative, ~4000 eps. Kept apart,
  // (x - max) is exact and only small numbers round, as in PyTorch's log_softmax.
  const std::int64_t rows = 4, classes = 7;
  Generator generator(7);
  std::vector<double> offsets =
      uniform({rows, classes}, -5.0, 0.0, generator, {.dtype = DType::F64}).to_vector<double>();
  const double centres[rows] = {1e4, -1e4, 3e4, 0.5};
  std::vector<double> logit_values(offsets.size());
  for (std::size_t i = 0; i < offsets.size(); ++i) logit_values[i] = centres[i / classes] + offsets[i];
  logit_values = from_vector(logit_values, {rows, classes}).to_vector<double>();  // the f32 values, exactly
  const std::vector<double> labels{3, 0, 6, 2};

  // The reference, in f64 from the f32 logits: a = (x - max) - log(sum exp(x - max)), p = exp(a).
  std::vector<double> loss_f64(rows), dlogits_f64(logit_values.size()), exponent(logit_values.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* x = logit_values.data() + r * classes;
    const double max = *std::max_element(x, x + classes);
    double sum = 0;
    for (std::int64_t c = 0; c < classes; ++c) sum += std::exp(x[c] - max);
    for (std::int64_t c = 0; c < classes; ++c) {
      const std::size_t at = static_cast<std::size_t>(r * classes + c);
      exponent[at] = (x[c] - max) - std::log(sum);
      dlogits_f64[at] = std::exp(exponent[at]) - (c == labels[r] ? 1.0 : 0.0);
    }
    loss_f64[r] = -exponent[static_cast<std::size_t>(r * classes + static_cast<std::int64_t>(labels[r]))];
  }
  // f32 error, in eps: each exp within kVectorMathUlps (a GPU's expf: 2), the sum's classes - 1
  // roundings (0.5 each), log(sum) within kVectorMathUlps of |log sum| <= log(classes) < 2, then a and
  // the loss (a itself, negated) one rounding of |a| each, and p - [c == label] one more of 1.
  const double eps = dtype_eps(DType::F32), exp_ulps = kernels::cpu::vector_math::kVectorMathUlps;
  const double log_sum_error = (0.5 * (classes - 1) + exp_ulps + 2 * exp_ulps) * eps;
  for (Device device : devices()) {
    INFO("on " << fmt::format("{}", device));
    const auto [loss, dlogits] = loss_and_gradient(logit_values, {rows, classes}, labels, device);
    const std::vector<double> got_loss = loss.to_vector<double>(), got_dlogits = dlogits.to_vector<double>();
    for (std::int64_t r = 0; r < rows; ++r) {
      INFO("row " << r << ": loss " << got_loss[r] << ", f64 " << loss_f64[r]);
      CHECK(std::fabs(got_loss[r] - loss_f64[r]) <= log_sum_error + eps * std::fabs(loss_f64[r]));
    }
    for (std::size_t i = 0; i < got_dlogits.size(); ++i) {
      const double p = std::exp(exponent[i]);
      const double bound = p * (log_sum_error + 0.5 * eps * std::fabs(exponent[i]) + exp_ulps * eps) + 0.5 * eps;
      INFO("logit " << i << ": gradient " << got_dlogits[i] << ", f64 " << dlogits_f64[i] << ", error "
                    << std::fabs(got_dlogits[i] - dlogits_f64[i]) / eps << " eps, bound " << bound / eps);
      CHECK(std::fabs(got_dlogits[i] - dlogits_f64[i]) <= bound);
    }
  }
}

TEST_CASE("cross_entropy: a row holding +inf or NaN, or only -inf, is NaN in loss and gradient, as in PyTorch") {
  // torch.nn.functional.cross_entropy(x[r:r+1], label[r:r+1]) and its gradient (torch 1.13): a lone
  // -inf is a probability of 0 (and an infinite loss where it is the label); anything else that is
  // not finite makes the whole row NaN.
  const std::vector<double> logit_values{1,     kInf,  2,  // +inf
                                         1,     kNaN,  2,  // NaN
                                         -kInf, 0,     1,  // a -inf alone: finite probabilities
                                         -kInf, 0,     1,  // ... and the label on it
                                         -kInf, -kInf, -kInf,  // only -inf: NaN (no class has any weight)
                                         kInf,  kInf,  0};  // two +inf
  const std::vector<double> labels{0, 2, 1, 0, 1, 2};
  const double p1 = 0.2689414322376251, p2 = 0.7310585975646973;  // softmax([0, 1]), torch in f32
  const std::vector<double> loss_torch{kNaN, kNaN, 1.31326162815094, kInf, kNaN, kNaN};
  const std::vector<double> dlogits_torch{kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, 0,    -p2,  p2,
                                          -1,   p1,   p2,   kNaN, kNaN, kNaN, kNaN, kNaN, kNaN};
  for (Device device : devices()) {
    INFO("on " << fmt::format("{}", device));
    const auto [loss, dlogits] = loss_and_gradient(logit_values, {6, 3}, labels, device);
    check_values(loss, loss_torch, 4 * dtype_eps(DType::F32), 0.0);
    check_values(dlogits, dlogits_torch, 0.0, 4 * dtype_eps(DType::F32));
  }
}

TEST_CASE("cross_entropy: label_smoothing as PyTorch's, with ignore_index and every reduction") {
  // torch 1.13 in f64: F.cross_entropy(x, [0, -100, 2], label_smoothing=0.2, reduction=...) and the
  // gradient of the mean.
  const std::vector<double> logits = {1, 2, 0.5, 0.3, -1, 2, 0, 0, 1};
  const Tensor labels = i32({0, -100, 2}, {3});
  const CrossEntropyOptions smoothed{.label_smoothing = 0.2};
  check_values(cross_entropy(f64(logits, {3, 3}, false), labels, smoothed), {1.057906749019998}, 1e-15);
  check_values(cross_entropy(f64(logits, {3, 3}, false), labels, {.reduction = Reduction::Sum, .label_smoothing = 0.2}),
               {2.115813498039996}, 1e-15);
  check_values(cross_entropy(f64(logits, {3, 3}, false), labels,
                             {.reduction = Reduction::None, .label_smoothing = 0.2}),
               {1.4310354507746117, 0.0, 0.6847780472653844}, 1e-15, 1e-15);
  Tensor x = f64(logits, {3, 3});
  backward(cross_entropy(x, labels, smoothed));
  check_values(x.grad(),
               {-0.31772138452225884, 0.2809325262725479, 0.036788858249710905, 0, 0, 0, 0.0726374454752094,
                0.0726374454752094, -0.1452748909504188},
               1e-14, 1e-16);
  // Smoothing 1: the target is uniform, so the loss is each row's mean of -log p; 0 is the plain loss.
  const Tensor t = f64(logits, {3, 3}, false), labels_all = i32({0, 1, 2}, {3});
  const Tensor uniform_target = mean(neg(mean(log_softmax(t, 1), 1)));
  check_values(cross_entropy(t, labels_all, {.label_smoothing = 1.0}), {uniform_target.item()}, 1e-15);
  check_values(cross_entropy(t, labels_all, {.label_smoothing = 0.0}), {cross_entropy(t, labels_all).item()}, 0, 0);
  for (Reduction reduction : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    check_gradients("cross_entropy label_smoothing",
                    [&](const std::vector<Tensor>& in) {
                      return cross_entropy(in[0], labels, {.reduction = reduction, .label_smoothing = 0.3});
                    },
                    {random_f64({3, 3}, -2, 2, 21)});
  }
  // f16 logits: f32 math, the loss rounded once into f16; every row ignored: NaN, as PyTorch.
  const Tensor h = f64(logits, {3, 3}, false).to(DType::F16);
  const Tensor loss = cross_entropy(h, labels, smoothed);
  CHECK(loss.dtype() == DType::F16);
  check_values(loss, {1.057906749019998}, tolerance(DType::F16, 0.5) + tolerance(DType::F32, 8));
  CHECK(std::isnan(cross_entropy(f64(logits, {3, 3}, false), i32({-100, -100, -100}, {3}), smoothed).item()));
  check_error(
      [] {
        cross_entropy(ones({2, 3}), i32({0, 1}, {2}), {.label_smoothing = 1.5});
      },
      "mg::cross_entropy: label_smoothing must be in [0, 1], got 1.5");
  check_error(
      [] {
        cross_entropy(ones({2, 3}), i32({0, 3}, {2}), {.label_smoothing = 0.1});
      },
      "mg::cross_entropy: label 3 at row 1 is out of range");
}
