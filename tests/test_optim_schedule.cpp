// Learning-rate schedules (optim/schedule.h) and gradient clipping (optim/clip.h): what shapes a
// step between backward and the update. Schedule factors against hand-computed values at their
// boundaries; a schedule scales every group; a step the GradScaler skips advances nothing;
// clip_grad_norm_ against hand-computed norms, in f16, with non-finite gradients, and after the
// GradScaler's unscale_ (the same step as an unscaled run).
#include <cmath>
#include <functional>
#include <limits>
#include <memory>

#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/schedule.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

// ---- schedules

TEST_CASE("schedule: step_decay multiplies by gamma every step_size steps (StepLR)") {
  const optim::Schedule f = optim::step_decay(3, 0.5);
  for (std::int64_t s : {0, 1, 2}) CHECK(f(s) == 1.0);
  for (std::int64_t s : {3, 4, 5}) CHECK(f(s) == 0.5);
  CHECK(f(6) == 0.25);
  CHECK(f(30) == std::ldexp(1.0, -10));
  CHECK(optim::step_decay(1, 0.1)(2) == doctest::Approx(0.01).epsilon(1e-15));
}

TEST_CASE("schedule: cosine_decay is half a cosine from 1 to min_factor, then holds (CosineAnnealingLR)") {
  const double half_sqrt2 = std::sqrt(2.0) / 2.0;  // cos(pi / 4)
  const optim::Schedule f = optim::cosine_decay(4);
  CHECK(f(0) == 1.0);
  CHECK(f(1) == doctest::Approx((1.0 + half_sqrt2) / 2.0).epsilon(1e-15));
  CHECK(f(2) == doctest::Approx(0.5).epsilon(1e-15));
  CHECK(f(3) == doctest::Approx((1.0 - half_sqrt2) / 2.0).epsilon(1e-15));
  CHECK(f(4) == 0.0);  // total_steps: exactly the minimum
  CHECK(f(1000) == 0.0);
  const optim::Schedule floor = optim::cosine_decay(4, 0.1);
  CHECK(floor(0) == 1.0);
  CHECK(floor(2) == doctest::Approx(0.1 + 0.9 * 0.5).epsilon(1e-15));
  CHECK(floor(4) == 0.1);
  CHECK(floor(5) == 0.1);
  CHECK(optim::cosine_decay(1)(0) == 1.0);
  CHECK(optim::cosine_decay(4, 1.0)(2) == 1.0);  // min_factor 1: constant
}

TEST_CASE("schedule: linear_warmup ramps (s + 1) / W, then follows `then` from its own step 0") {
  const optim::Schedule ramp = optim::linear_warmup(4);
  CHECK(ramp(0) == 0.25);
  CHECK(ramp(1) == 0.5);
  CHECK(ramp(2) == 0.75);
  CHECK(ramp(3) == 1.0);  // the last warm-up step has the full rate
  CHECK(ramp(4) == 1.0);
  CHECK(ramp(1000) == 1.0);
  const optim::Schedule decay = optim::linear_warmup(2, optim::step_decay(2, 0.5));
  const std::vector<double> expected{0.5, 1.0, 1.0, 1.0, 0.5, 0.5, 0.25};
  for (std::size_t s = 0; s < expected.size(); ++s) {
    INFO("step " << s);
    CHECK(decay(static_cast<std::int64_t>(s)) == expected[s]);
  }
  // Warm-up and cosine over 100 steps in all: the cosine's middle is at step 10 + 45.
  const optim::Schedule cosine = optim::linear_warmup(10, optim::cosine_decay(90));
  CHECK(cosine(0) == 0.1);
  CHECK(cosine(9) == 1.0);
  CHECK(cosine(10) == 1.0);
  CHECK(cosine(55) == doctest::Approx(0.5).epsilon(1e-15));
  CHECK(cosine(100) == 0.0);
}

TEST_CASE("schedule: nonsense arguments are errors when the schedule is made") {
  check_error([] { optim::step_decay(0, 0.5); }, "optim::step_decay: step_size must be >= 1");
  check_error([] { optim::step_decay(2, 0.0); }, "optim::step_decay: gamma must be finite and > 0");
  check_error([] { optim::step_decay(2, -0.5); }, "steps), got -0.5");
  check_error([] { optim::step_decay(2, NAN); }, "gamma must be finite and > 0");
  check_error([] { optim::cosine_decay(0); }, "optim::cosine_decay: total_steps must be >= 1, got 0");
  check_error([] { optim::cosine_decay(10, -0.1); }, "min_factor must be in [0, 1]");
  check_error([] { optim::cosine_decay(10, 1.5); }, "min_factor must be in [0, 1]");
  check_error([] { optim::linear_warmup(0); }, "optim::linear_warmup: warmup_steps must be >= 1");
  check_error([] { optim::linear_warmup(2, optim::cosine_decay(3))(-1); }, "optim::linear_warmup: the step count");
}

TEST_CASE("optim: set_schedule scales the learning rate per step; set_lr changes the base") {
  Tensor w = f64({1.0, -1.0}, {2});
  optim::SGD sgd({w}, {.lr = 0.5});
  sgd.set_schedule([](std::int64_t step) { return std::ldexp(1.0, -static_cast<int>(step)); });  // 2^-step
  std::vector<double> expected{1.0, -1.0};
  for (int step = 0; step < 4; ++step) {
    CHECK(sgd.lr() == std::ldexp(0.5, -step));
    w.set_grad(f64({1.0, 2.0}, {2}, false));
    sgd.step();
    expected[0] -= std::ldexp(0.5, -step) * 1.0;
    expected[1] -= std::ldexp(0.5, -step) * 2.0;
    check_values(w, expected, 0.0, 0.0);  // powers of two: exact
  }
  sgd.set_lr(2.0);
  CHECK(sgd.lr() == 2.0 / 16.0);
  check_error([&] { sgd.set_lr(-1.0); }, "the learning rate must be finite and >= 0");
  check_error([&] { sgd.set_lr(NAN); }, "the learning rate must be finite and >= 0");
  CHECK(sgd.lr() == 2.0 / 16.0);
}

TEST_CASE("schedule: the factor multiplies every group's lr; a bad factor stops the step before any update") {
  Tensor a = f64({1.0}, {1}), b = f64({1.0}, {1});
  optim::SGD sgd({{.parameters = {a}}, {.parameters = {b}, .lr = 0.25}}, {.lr = 1.0});
  sgd.set_schedule(optim::linear_warmup(2, optim::step_decay(1, 0.5)));  // 0.5, 1, 1, 0.5, ...
  const std::vector<double> factors{0.5, 1.0, 1.0, 0.5};
  double expected_a = 1.0, expected_b = 1.0;
  for (std::size_t s = 0; s < factors.size(); ++s) {
    INFO("step " << s);
    CHECK(sgd.lr(0) == factors[s]);
    CHECK(sgd.lr(1) == 0.25 * factors[s]);
    a.set_grad(f64({1.0}, {1}, false));
    b.set_grad(f64({1.0}, {1}, false));
    sgd.step();
    expected_a -= factors[s];
    expected_b -= 0.25 * factors[s];
    check_values(a, {expected_a}, 0.0, 0.0);  // powers of two: exact
    check_values(b, {expected_b}, 0.0, 0.0);
  }
  sgd.set_schedule([](std::int64_t) { return NAN; });
  check_error([&] { sgd.step(); }, "optim::SGD: the schedule returned nan at step 4");
  check_values(a, {expected_a}, 0.0, 0.0);
  CHECK(sgd.step_count() == 4);
  sgd.set_schedule({});  // no schedule: the groups' own rates
  CHECK(sgd.lr(1) == 0.25);
}

// ---- with the GradScaler: a skipped step is not a step

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<unsigned char> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.data_ptr());
  return {p, p + t.nbytes()};
}

// A clean step, then an overflowing one: weights, optimizer state, step count and scheduled lr
// must be bit-identical across the second. base_lr: the optimizer's lr without the schedule.
void check_skip_is_invisible(double base_lr,
                             const std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>& make) {
  Generator gen(7);
  std::vector<Tensor> params{uniform({3}, -1, 1, gen).set_requires_grad(true),
                             uniform({2, 2}, -1, 1, gen).set_requires_grad(true)};
  // A twin that only ever sees the clean steps, with the unscaled gradients (S is a power of two,
  // so unscaling is exact): after the run it must match bit for bit (Adam's private step counts).
  std::vector<Tensor> twins{params[0].detach().clone().set_requires_grad(true),
                            params[1].detach().clone().set_requires_grad(true)};
  auto opt = make(params);
  auto twin = make(twins);
  for (auto* o : {opt.get(), twin.get()})
    o->set_schedule([](std::int64_t step) { return 1.0 / static_cast<double>(step + 1); });
  amp::GradScaler scaler;
  auto clean_step = [&] {
    for (std::size_t i = 0; i < 2; ++i) {
      Tensor u = uniform(params[i].shape(), -1, 1, gen);
      params[i].set_grad(mul(u, scaler.get_scale()));
      twins[i].set_grad(u);
    }
    CHECK(scaler.step(*opt));
    scaler.update();
    twin->step();
  };
  auto snapshot = [](const std::vector<Tensor>& ps, const optim::Optimizer& o) {
    std::vector<std::vector<unsigned char>> all;
    for (const Tensor& p : ps) all.push_back(bytes_of(p));
    for (const Tensor& s : o.state()) all.push_back(bytes_of(s));
    return all;
  };
  clean_step();
  REQUIRE_FALSE(opt->state().empty());
  const auto before = snapshot(params, *opt);
  const std::size_t state_count = opt->state().size();
  const kernels::UpdateCount update_before = opt->last_update();
  CHECK(opt->lr() == base_lr / 2.0);  // schedule at step_count 1
  for (double bad : {kInf, kNaN}) {
    params[0].set_grad(mul(uniform({3}, -1, 1, gen), scaler.get_scale()));
    params[1].set_grad(from_vector({0.5, bad, 0.25, 1.0}, {2, 2}));
    CHECK_FALSE(scaler.step(*opt));
    scaler.update();
    CHECK(snapshot(params, *opt) == before);
    CHECK(opt->state().size() == state_count);
    CHECK(opt->step_count() == 1);
    CHECK(opt->lr() == base_lr / 2.0);  // the schedule did not advance
    CHECK(opt->last_update().nonzero == update_before.nonzero);
    CHECK(opt->last_update().lost == update_before.lost);
  }
  clean_step();
  CHECK(snapshot(params, *opt) != before);
  CHECK(opt->step_count() == 2);
  CHECK(opt->lr() == base_lr * (1.0 / 3.0));  // lr * schedule(2), the same product
  clean_step();
  CHECK(snapshot(params, *opt) == snapshot(twins, *twin));
}

}  // namespace

TEST_CASE("scaler: a skipped step leaves weights and SGD momentum state bit-identical") {
  check_skip_is_invisible(0.1, [](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(std::move(p), optim::SgdOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
  });
}

TEST_CASE("scaler: a skipped step leaves weights and Adam moments and step counts bit-identical") {
  check_skip_is_invisible(0.01, [](std::vector<Tensor> p) {
    return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 0.01});
  });
}

// ---- clip_grad_norm_

TEST_CASE("clip: the total norm over all gradients, and in-place scaling by max_norm / (total + 1e-6)") {
  // |(3, 4, 12)| = 13; the norm is of all gradients together, not of each one.
  Tensor a = f64({3.0, 4.0}, {2}, false), b = f64({12.0}, {1}, false);
  const std::uint64_t version = a.impl().storage->version();
  CHECK(optim::clip_grad_norm_({a, b}, 6.5) == 13.0);
  const double coefficient = 6.5 / (13.0 + 1e-6);
  check_values(a, {3.0 * coefficient, 4.0 * coefficient}, 1e-15, 0.0);  // f64 gradients: scaled in f64
  check_values(b, {12.0 * coefficient}, 1e-15, 0.0);
  CHECK(a.impl().storage->version() > version);  // written in place, as unscale_ does
  // Below max_norm: returned, untouched.
  Tensor c = f64({3.0, 4.0}, {2}, false);
  CHECK(optim::clip_grad_norm_({c}, 5.0 + 1e-3) == 5.0);
  check_values(c, {3.0, 4.0}, 0.0, 0.0);
  CHECK(optim::clip_grad_norm_({c}, INFINITY) == 5.0);  // never clips
  check_values(c, {3.0, 4.0}, 0.0, 0.0);
  // Other norms: p = 1 sums magnitudes, p = inf takes the largest, p = 3 as the formula says.
  Tensor d = f64({-3.0, 4.0, 12.0}, {3}, false);
  CHECK(optim::clip_grad_norm_({d}, 100.0, 1.0) == 19.0);
  CHECK(optim::clip_grad_norm_({d}, 100.0, INFINITY) == 12.0);
  CHECK(optim::clip_grad_norm_({d}, 100.0, 3.0) == doctest::Approx(std::cbrt(27.0 + 64.0 + 1728.0)).epsilon(1e-14));
  CHECK(optim::clip_grad_norm_({d}, 6.0, INFINITY) == 12.0);
  check_values(d, {-3.0 * 6.0 / (12.0 + 1e-6), 4.0 * 6.0 / (12.0 + 1e-6), 6.0 / (1.0 + 1e-6 / 12.0)}, 1e-15, 0.0);
  CHECK(optim::clip_grad_norm_({}, 1.0) == 0.0);  // nothing to clip, as PyTorch
}

TEST_CASE("clip: f16 gradients are summed in f64 (no overflow) and scaled in place, rounded once") {
  // 300^2 + 400^2 = 250000 is far beyond f16's 65504; the norm, 500, is exact in f64.
  Tensor g = from_vector({300.0, 400.0, -0.0}, {3}, {.dtype = DType::F16});
  CHECK(optim::clip_grad_norm_({g}, 5.0) == 500.0);
  CHECK(g.dtype() == DType::F16);
  const double coefficient = 5.0 / (500.0 + 1e-6);
  check_values(g, {300.0 * coefficient, 400.0 * coefficient, 0.0}, tolerance(DType::F16, 0.5), 0.0);
}

TEST_CASE("clip: a non-finite norm is returned and scales as PyTorch does (error_if_nonfinite = false)") {
  // An inf total gives a factor of 0: finite elements become 0, the inf becomes inf * 0 = NaN.
  Tensor a = f64({1.0, INFINITY}, {2}, false), b = f64({2.0}, {1}, false);
  CHECK(std::isinf(optim::clip_grad_norm_({a, b}, 1.0)));
  check_values(a, {0.0, NAN});
  check_values(b, {0.0});
  // A NaN total gives a NaN factor: every element is NaN. So does the inf norm of a NaN.
  Tensor c = f64({1.0, NAN}, {2}, false), d = f64({NAN, 2.0}, {2}, false);
  CHECK(std::isnan(optim::clip_grad_norm_({c}, 1.0)));
  check_values(c, {NAN, NAN});
  CHECK(std::isnan(optim::clip_grad_norm_({d}, 1.0, INFINITY)));
  check_values(d, {NAN, NAN});
}

TEST_CASE("clip: bad arguments are refused before any gradient changes") {
  Tensor g = f64({3.0, 4.0}, {2}, false);
  check_error([&] { optim::clip_grad_norm_({g}, 0.0); }, "optim::clip_grad_norm_: max_norm must be > 0");
  check_error([&] { optim::clip_grad_norm_({g}, NAN); }, "max_norm must be > 0");
  check_error([&] { optim::clip_grad_norm_({g}, 1.0, 0.0); }, "norm_type must be > 0");
  check_error([&] { optim::clip_grad_norm_({g, Tensor()}, 1.0); }, "gradient 1 is undefined");
  check_error(
      [&] {
        optim::clip_grad_norm_({g, from_vector({1.0}, {1}, {.dtype = DType::I32})}, 1.0);
      },
      "gradient 1 is i32");
  check_values(g, {3.0, 4.0}, 0.0, 0.0);
}

TEST_CASE("clip: scale, backward, unscale_, clip, step equals the unscaled f32 step") {
  Generator gen(5);
  const Tensor x = uniform({8, 4}, -1, 1, gen), target = uniform({8, 3}, -4, 4, gen);
  const std::vector<double> init = uniform({4, 3}, -1, 1, gen).to_vector<double>();
  const double max_norm = 0.1;
  // Returns the norm before clipping; w ends up stepped.
  auto train_step = [&](Tensor& w, bool scaled) {
    optim::SGD sgd({w}, {.lr = 0.5, .momentum = 0.9});
    amp::GradScaler scaler({.init_scale = 4096, .enabled = scaled});
    backward(scaler.scale(mse_loss(matmul(x, w), target)));
    scaler.unscale_(sgd);
    const double norm = optim::clip_grad_norm_(sgd, max_norm);
    CHECK(scaler.step(sgd));
    scaler.update();
    return norm;
  };
  Tensor reference = from_vector(init, {4, 3}, {.requires_grad = true});
  Tensor w = from_vector(init, {4, 3}, {.requires_grad = true});
  const double reference_norm = train_step(reference, false);
  const double norm = train_step(w, true);
  REQUIRE(reference_norm > 10 * max_norm);  // the clipping is active
  // S = 2^12 scales every gradient exactly in f32 (no overflow, no subnormals), and 1/S unscales
  // exactly: the two runs see the same gradients. The tolerance only allows for that argument
  // being wrong by a rounding or two, not for a missed unscale_ (a factor of 4096).
  CHECK(norm == doctest::Approx(reference_norm).epsilon(4 * dtype_eps(DType::F32)));
  check_close(w, reference, 4 * dtype_eps(DType::F32), 4 * dtype_eps(DType::F32));
  CHECK(std::fabs(w.to_vector<double>()[0] - init[0]) > 0.01);  // the step moved the weights
}
