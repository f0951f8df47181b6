// The optimizers' master weights (optim/optimizer.h, {.master_weights = true}) and the paper's
// numerical claims: f32 master weights keep updates that f16 weights lose, one float16_master step
// equals an fp32 step up to f16 rounding, loss scaling rescues gradients below f16's smallest
// subnormal, and a skipped step changes nothing.
#include <cmath>
#include <memory>

#include "kernels/amp.h"
#include "optim/clip.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

TEST_CASE("master weights: float16_master keeps updates of 2^-12 that float16_pure loses") {
  const double update = std::ldexp(1.0, -12);  // below half of f16's spacing at 1.0 (2^-11)
  // float16_master: f16 parameter, f32 master, dynamic loss scale (gradients arrive scaled by S).
  const amp::Recipe master = amp::Recipe::parse("float16_master");
  Tensor w = ones({4}, {.requires_grad = true});
  master.cast_parameters({w});
  optim::SGD opt({w}, {.lr = 1.0, .master_weights = master.master_weights});
  amp::GradScaler scaler = master.make_scaler();
  for (int k = 1; k <= 16; ++k) {
    INFO("step " << k);
    opt.zero_grad();
    w.set_grad(full({4}, update * scaler.get_scale(), {.dtype = DType::F16}));  // 16: exact in f16
    REQUIRE(scaler.step(opt));
    scaler.update();
    const double m = 1.0 - k * update;  // exact in f32
    check_values(opt.master(0), std::vector<double>(4, m), 0.0, 0.0);
    check_values(w, std::vector<double>(4, to_f16(m)), 0.0, 0.0);  // the f16 copy: round(master)
    CHECK(amp::lost_update_fraction(opt) == 0.0);  // counted in the masters
  }
  check_values(w, std::vector<double>(4, 1.0 - std::ldexp(1.0, -8)), 0.0, 0.0);  // the copy moved too

  // float16_pure: the same updates, rounded straight into f16, all vanish.
  const amp::Recipe pure = amp::Recipe::parse("float16_pure");
  Tensor v = ones({4}, {.requires_grad = true});
  pure.cast_parameters({v});
  optim::SGD sgd({v}, {.lr = 1.0, .master_weights = pure.master_weights});
  amp::GradScaler off = pure.make_scaler();
  for (int k = 1; k <= 16; ++k) {
    v.set_grad(full({4}, update, {.dtype = DType::F16}));
    CHECK(off.step(sgd));
    off.update();
    CHECK(amp::lost_update_fraction(sgd) == 1.0);
  }
  check_values(v, {1, 1, 1, 1}, 0.0, 0.0);
}

TEST_CASE("master weights: one float16_master step equals one fp32 step up to f16 rounding of the forward") {
  const std::int64_t n = 8, in = 4, out = 3;
  const double lr = 0.1;
  Generator gen(3);
  Tensor x = uniform({n, in}, -1, 1, gen), target = uniform({n, out}, -1, 1, gen);
  const std::vector<double> init = uniform({in, out}, -0.5, 0.5, gen, {.dtype = DType::F16}).to_vector<double>();
  // fp32
  Tensor w32 = from_vector(init, {in, out}, {.requires_grad = true});
  optim::SGD sgd({w32}, {.lr = lr});
  backward(mse_loss(matmul(x, w32), target));
  sgd.step();
  // float16_master: same (f16-representable) init, forward under f16 autocast, scaled backward.
  const amp::Recipe recipe = amp::Recipe::parse("float16_master");
  Tensor w16 = from_vector(init, {in, out}, {.requires_grad = true});
  recipe.cast_parameters({w16});
  check_values(w16, init, 0.0, 0.0);
  optim::SGD opt({w16}, {.lr = lr, .master_weights = recipe.master_weights});
  amp::GradScaler scaler = recipe.make_scaler({.init_scale = 1024});  // x^T dy * S stays below 65504
  Tensor loss;
  {
    Autocast region = recipe.autocast();
    loss = mse_loss(matmul(x, w16), target);
  }
  CHECK(loss.dtype() == DType::F32);
  backward(scaler.scale(loss));
  REQUIRE(scaler.step(opt));
  scaler.update();
  const Tensor master = opt.master(0);
  // Bound on the gradient error, in f64: with r = y - t and dW = 2/(n*out) x^T r, the f16 path
  // rounds x, y = xW, dL/dy and dW once each (0.5 eps16 each); propagated through the sums that is
  // <= 1.5 eps16 * (2/(n*out)) * sum_n |x| (|r| + |y| + |x||W|); factor 2 covers second-order terms.
  const std::vector<double> xv = x.to_vector<double>(), tv = target.to_vector<double>();
  const std::vector<double> got = master.to_vector<double>(), want = w32.to_vector<double>();
  for (std::int64_t i = 0; i < in; ++i) {
    for (std::int64_t j = 0; j < out; ++j) {
      double bound = 0.0;
      for (std::int64_t r = 0; r < n; ++r) {
        double y = 0.0, xw = 0.0;
        for (std::int64_t k = 0; k < in; ++k) {
          y += xv[r * in + k] * init[k * out + j];
          xw += std::fabs(xv[r * in + k] * init[k * out + j]);
        }
        bound += std::fabs(xv[r * in + i]) * (std::fabs(y - tv[r * out + j]) + std::fabs(y) + xw);
      }
      bound *= lr * tolerance(DType::F16, 2.0) * 2.0 / static_cast<double>(n * out);
      const std::size_t e = static_cast<std::size_t>(i * out + j);
      INFO("element " << e << ": master " << got[e] << ", fp32 " << want[e] << ", bound " << bound);
      CHECK(std::fabs(got[e] - want[e]) <= bound + 4 * dtype_eps(DType::F32));
      CHECK(std::fabs(want[e] - init[e]) > 10 * bound);  // the step is far larger than the tolerance
    }
  }
  check_close(w16, master.to(DType::F16), 0.0);  // the f16 copy is round(master)
}

TEST_CASE("master weights: a gradient below 2^-25 vanishes in f16 and survives a static loss scale of 2^10") {
  // loss = w * a * b in f16 with w = 1: dloss/dw = a * b ~ 0.78 * 2^-25, below half of f16's smallest
  // subnormal (2^-24), so it rounds to zero. Scaled by 2^10 it is ~0.78 * 2^-15, a subnormal with spacing 2^-24.
  Tensor a = full({1}, 0.6 * std::ldexp(1.0, -11), {.dtype = DType::F16});
  Tensor b = full({1}, 1.3 * std::ldexp(1.0, -14), {.dtype = DType::F16});
  const double truth = a.item() * b.item();  // f64 product of the f16 constants
  REQUIRE(truth < std::ldexp(1.0, -25));
  REQUIRE(truth > std::ldexp(1.0, -26));
  Tensor w = ones({1}, {.dtype = DType::F16, .requires_grad = true});
  backward(sum(mul(mul(w, a), b)));
  CHECK(w.grad().item() == 0.0);  // exactly zero: the update is gone

  amp::Recipe recipe = amp::Recipe::parse("float16_master");
  recipe.loss_scaling = amp::LossScaling::Static;  // the paper's constant S
  recipe.static_scale = 1024;
  Tensor w2 = ones({1}, {.requires_grad = true});
  recipe.cast_parameters({w2});
  optim::SGD opt({w2}, {.lr = 1.0, .master_weights = recipe.master_weights});
  amp::GradScaler scaler = recipe.make_scaler();
  backward(scaler.scale(sum(mul(mul(w2, a), b))));
  CHECK(w2.grad().item() != 0.0);
  scaler.unscale_(opt);
  const Tensor master_grad = opt.master(0).grad();
  REQUIRE(master_grad.defined());
  CHECK(master_grad.dtype() == DType::F32);
  // S*b is exact (a power-of-two shift of a normal number); S*a*b rounds once into the subnormal
  // range: error <= 2^-25 / (0.78 * 2^-15) = 1.28 eps16 relative; unscaling in f32 is exact.
  check_values(master_grad, {truth}, tolerance(DType::F16, 1.5), 0.0);
  CHECK(scaler.step(opt));
  scaler.update();
}

TEST_CASE("master weights: the optimizer updates f32 masters and refreshes the f16 copy as round(master)") {
  Generator gen(11);
  std::vector<Tensor> params{uniform({64}, -1, 1, gen, {.dtype = DType::F16}).set_requires_grad(true),
                             uniform({3, 5}, -1, 1, gen, {.dtype = DType::F16}).set_requires_grad(true),
                             uniform({2}, -1, 1, gen, {.dtype = DType::F16}).set_requires_grad(true)};
  const optim::SgdOptions options{.lr = 0.37, .momentum = 0.9, .weight_decay = 0.01, .master_weights = true};
  optim::SGD mw(params, options);
  // The same SGD on f32 copies must give the masters bit for bit (f32 parameters get no master).
  std::vector<Tensor> twins;
  for (const Tensor& p : params) twins.push_back(p.to(DType::F32).detach().set_requires_grad(true));
  optim::SGD twin(twins, options);
  CHECK(mw.keeps_master_weights());
  CHECK(twin.master_bytes() == 0);
  CHECK(mw.master_bytes() == (64 + 15 + 2) * 4);
  for (std::size_t i = 0; i < 3; ++i) {
    const Tensor& m = mw.master(i);
    CHECK(m.dtype() == DType::F32);
    CHECK(m.is_leaf());
    CHECK(m.requires_grad());
    CHECK_FALSE(m.shares_storage_with(params[i]));
    check_close(m, params[i], 0.0);
  }
  const std::vector<double> untouched = params[2].to_vector<double>();
  for (int step = 0; step < 3; ++step) {
    for (std::size_t i = 0; i < 2; ++i) {  // parameter 2 never gets a gradient
      Tensor g = uniform(params[i].shape(), -1, 1, gen, {.dtype = DType::F16});
      params[i].set_grad(g);
      twins[i].set_grad(g.to(DType::F32));
    }
    const std::vector<double> old = params[0].to_vector<double>();
    mw.step();
    twin.step();
    CHECK(mw.step_count() == step + 1);
    for (std::size_t i = 0; i < 3; ++i) {
      check_close(mw.master(i), twins[i], 0.0);
      check_close(params[i], mw.master(i).to(DType::F16), 0.0);
    }
    CHECK(params[0].to_vector<double>() != old);
    CHECK(params[2].to_vector<double>() == untouched);
    CHECK_FALSE(mw.master(2).grad().defined());
  }
  CHECK(mw.state().size() == 2);  // momentum buffers of the two updated masters, in f32
  CHECK(mw.state()[0].dtype() == DType::F32);
  mw.zero_grad();
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK_FALSE(params[i].grad().defined());
    CHECK_FALSE(mw.master(i).grad().defined());
  }
  // The refresh is an in-place write: a graph that saved the f16 parameter refuses backward.
  Tensor y = sum(mul(params[0], params[0]));
  params[0].set_grad(zeros({64}, {.dtype = DType::F16}));
  mw.step();
  check_error([&] { backward(y); }, "modified in place");
  // Masters are for f16 and bf16 parameters only: an f32 one is its own master.
  optim::SGD f32_only({ones({2}, {.requires_grad = true})}, {.master_weights = true});
  CHECK_FALSE(f32_only.master(0).defined());
}

TEST_CASE("master weights: an overflow under float16_master is skipped; masters, f16 copies and state unchanged") {
  const amp::Recipe recipe = amp::Recipe::parse("float16_master");
  Tensor w1 = from_vector({0.5, -0.25, 1.0}, {3}, {.requires_grad = true});
  Tensor w2 = from_vector({2.0, -1.0}, {2}, {.requires_grad = true});
  recipe.cast_parameters({w1, w2});
  optim::SGD opt({w1, w2}, {.lr = 0.5, .momentum = 0.9, .master_weights = recipe.master_weights});
  amp::GradScaler scaler = recipe.make_scaler();
  amp::ScaleMonitor monitor(scaler);
  auto grads = [&](double second) {
    opt.zero_grad();
    w1.set_grad(full({3}, 0.25 * scaler.get_scale(), {.dtype = DType::F16}));  // 16384: finite in f16
    w2.set_grad(from_vector({0.5 * scaler.get_scale(), second}, {2}, {.dtype = DType::F16}));
  };
  grads(1.0);
  REQUIRE(scaler.step(opt));
  monitor.update(&opt);
  auto values = [&] {
    std::vector<std::vector<double>> all;
    for (const Tensor& t : {w1, w2, opt.master(0), opt.master(1)}) all.push_back(t.to_vector<double>());
    for (const Tensor& t : opt.state()) all.push_back(t.to_vector<double>());
    return all;
  };
  const auto before = values();
  REQUIRE(before.size() == 6);  // 2 f16 params, 2 masters, 2 momentum buffers
  for (double bad : {INFINITY, NAN}) {
    grads(bad);
    CHECK_FALSE(scaler.step(opt));
    monitor.update(&opt);
    CHECK(monitor.nonfinite_parameters() == std::vector<std::size_t>{1});
    CHECK(values() == before);
    CHECK(opt.step_count() == 1);
  }
  CHECK(scaler.get_scale() == 65536.0 / 4);
  grads(1.0);
  CHECK(scaler.step(opt));
  scaler.update();
  check_values(opt.master(0), {0.5 - 0.5 * 0.25 * 2.9, -0.25 - 0.5 * 0.25 * 2.9, 1.0 - 0.5 * 0.25 * 2.9},
               4 * dtype_eps(DType::F32));  // two momentum steps of g = 0.25: lr * (0.25 + (0.9 * 0.25 + 0.25))
}

TEST_CASE("master weights: after a skipped step, step() reads the new gradients, not the stale ones") {
  // Regression: the scaler's unscale_ filled the master gradients (with inf) and the skipped step
  // never consumed them; a later direct step() reused them and wrote -inf into the weights.
  Tensor w = ones({1}, {.dtype = DType::F16, .requires_grad = true});
  optim::SGD mw({w}, {.lr = 1.0, .master_weights = true});
  amp::GradScaler scaler;
  w.set_grad(full({1}, INFINITY, {.dtype = DType::F16}));
  scaler.unscale_(mw);
  CHECK_FALSE(scaler.step(mw));
  scaler.update();
  w.set_grad(full({1}, 0.5, {.dtype = DType::F16}));  // new gradients, no scaler this time
  mw.step();
  CHECK(mw.master(0).item() == 0.5);
  CHECK(w.item() == 0.5);
  // The ordinary path still uses what unscale_ produced (and what a user clipped in the masters).
  w.set_grad(full({1}, 0.25 * scaler.get_scale(), {.dtype = DType::F16}));
  scaler.unscale_(mw);
  mw.master(0).grad().copy_(full({1}, 0.125));
  CHECK(scaler.step(mw));
  scaler.update();
  CHECK(mw.master(0).item() == 0.375);
}

TEST_CASE("master weights: gradients() are the unscaled f32 masters; changed model gradients are converted again") {
  Tensor w = ones({2}, {.dtype = DType::F16, .requires_grad = true});
  optim::SGD mw({w}, {.lr = 1.0, .master_weights = true});
  amp::GradScaler scaler({.init_scale = 1024});
  w.set_grad(full({2}, 0.5 * 1024, {.dtype = DType::F16}));
  scaler.unscale_(mw);
  std::vector<Tensor> grads = mw.gradients();  // what clipping must act on
  REQUIRE(grads.size() == 1);
  CHECK(grads[0].dtype() == DType::F32);
  check_values(grads[0], {0.5, 0.5}, 0.0, 0.0);
  {
    NoGradGuard no_grad;  // the model gradient changes in place after unscale_ (a version bump)
    w.grad().copy_(full({2}, 0.25, {.dtype = DType::F16}));
  }
  CHECK(scaler.step(mw));  // read again from the f16 gradient, unscaled (factor 1), as without a scaler
  scaler.update();
  check_values(w, {0.75, 0.75}, 0.0, 0.0);
}

TEST_CASE("master weights: f16 gradients are never unscaled in place, and the scaler survives the error") {
  Tensor w = ones({2}, {.dtype = DType::F16, .requires_grad = true});
  optim::SGD sgd({w}, {.lr = 1.0});
  amp::GradScaler scaler;
  w.set_grad(full({2}, 4.0, {.dtype = DType::F16}));
  check_error([&] { scaler.unscale_(sgd); }, "cannot unscale f16 gradients in place");
  check_values(w.grad(), {4, 4}, 0.0, 0.0);  // untouched
  check_values(w, {1, 1}, 0.0, 0.0);
  check_error([&] { scaler.update(); }, "no inf/NaN checks were recorded");  // nothing half-recorded
  optim::SGD mw({w}, {.lr = 1.0, .master_weights = true});
  w.set_grad(full({2}, 0.5 * scaler.get_scale(), {.dtype = DType::F16}));
  CHECK(scaler.step(mw));
  scaler.update();
  check_values(w, {0.5, 0.5}, 0.0, 0.0);
  // step() without unscale_ never unscales in place either: the fused update reads the f16 gradient
  // times 1/S in f32, so the pure recipe under a scaler keeps its small gradients too.
  Tensor v = ones({2}, {.dtype = DType::F16, .requires_grad = true});
  optim::SGD pure({v}, {.lr = 1.0});
  v.set_grad(full({2}, std::ldexp(1.0, -20) * scaler.get_scale(), {.dtype = DType::F16}));  // 2^-20 unscaled
  CHECK(scaler.step(pure));
  scaler.update();
  check_values(v.grad(), {std::ldexp(1.0, -4), std::ldexp(1.0, -4)}, 0.0, 0.0);  // the f16 gradient untouched
  check_values(v, {1.0, 1.0}, 0.0, 0.0);  // 1 - 2^-20 rounds back to 1 in f16: the pure recipe's lost update
  CHECK(pure.last_update().lost == 2);
  // The kernel itself refuses malformed arguments before writing anything.
  Tensor g = ones({2}), bad_flag = zeros({2}), half = full({}, 0.5);
  check_error([&] { kernels::unscale({g}, {g}, half, bad_flag); }, "found_inf must be one f32 element");
  Tensor flag = zeros({});
  check_error([&] { kernels::unscale({g}, {}, half, flag); }, "1 sources but 0 destinations");
  check_error([&] { kernels::unscale({g}, {g}, full({2}, 0.5), flag); }, "the factor must be one f32 element");
  check_values(g, {1, 1}, 0.0, 0.0);
}

TEST_CASE("master weights: groups keep their overrides over the masters") {
  Tensor w = ones({2, 2}, {.dtype = DType::F16, .requires_grad = true});
  Tensor b = ones({2}, {.dtype = DType::F16, .requires_grad = true});
  optim::SGD mw({{.parameters = {w}}, {.parameters = {b}, .lr = 0.25, .weight_decay = 0.0}},
                {.lr = 0.5, .weight_decay = 0.5, .master_weights = true});
  REQUIRE(mw.groups().size() == 2);
  CHECK(mw.groups()[1].begin == 1);
  CHECK(mw.master(1).dtype() == DType::F32);
  CHECK(mw.lr(0) == 0.5);
  CHECK(mw.lr(1) == 0.25);
  w.set_grad(full({2, 2}, 1.0, {.dtype = DType::F16}));
  b.set_grad(full({2}, 1.0, {.dtype = DType::F16}));
  mw.step();
  check_values(w, std::vector<double>(4, 1.0 - 0.5 * (1.0 + 0.5)), 0.0, 0.0);  // lr 0.5, wd 0.5: exact
  check_values(b, {0.75, 0.75}, 0.0, 0.0);  // lr 0.25, no decay
  mw.set_lr(1, 0.125);
  CHECK(mw.lr(1) == 0.125);
  mw.set_lr(0.0625);  // every group
  CHECK(mw.lr(0) == 0.0625);
}

TEST_CASE("master weights: clipping after unscale_ acts on the f32 master gradients, as in an f32 run") {
  // loss = sum(w * c): the gradient is c, exact in f16 and, times S = 2^10, exact again.
  const std::vector<double> c{3.0, -4.0, 12.0, 0.5};
  const double expected_norm = std::sqrt(9.0 + 16.0 + 144.0 + 0.25);
  const double lr = 0.5, max_norm = 1.0;
  Tensor w = ones({4}, {.dtype = DType::F16, .requires_grad = true});
  optim::SGD mw({w}, {.lr = lr, .master_weights = true});
  amp::GradScaler scaler({.init_scale = 1024});
  backward(scaler.scale(sum(mul(w, from_vector(c, {4}, {.dtype = DType::F16})))));
  scaler.unscale_(mw);
  CHECK(optim::clip_grad_norm_(mw, max_norm) == doctest::Approx(expected_norm).epsilon(1e-15));
  check_values(w.grad(), {3.0 * 1024, -4.0 * 1024, 12.0 * 1024, 0.5 * 1024}, 0.0, 0.0);  // the f16 ones: untouched
  REQUIRE(scaler.step(mw));
  scaler.update();
  // The f32 run: the same gradient, clipped and stepped in f32.
  Tensor reference = ones({4}, {.requires_grad = true});
  optim::SGD sgd({reference}, {.lr = lr});
  reference.set_grad(from_vector(c, {4}));
  CHECK(optim::clip_grad_norm_(sgd, max_norm) == doctest::Approx(expected_norm).epsilon(1e-15));
  sgd.step();
  check_close(mw.master(0), reference, 0.0, 0.0);
  check_close(w, reference.to(DType::F16), 0.0, 0.0);

  // Without a scaler, gradients() converts the model's gradients first: the clip is not lost.
  mw.zero_grad();
  w.set_grad(from_vector(c, {4}, {.dtype = DType::F16}));
  const std::vector<double> before = mw.master(0).to_vector<double>();
  CHECK(optim::clip_grad_norm_(mw, max_norm) == doctest::Approx(expected_norm).epsilon(1e-15));
  mw.step();
  const std::vector<double> after = mw.master(0).to_vector<double>();
  double moved = 0.0;
  for (std::size_t i = 0; i < 4; ++i) moved += (before[i] - after[i]) * (before[i] - after[i]);
  CHECK(std::sqrt(moved) == doctest::Approx(lr * max_norm).epsilon(1e-6));  // a step of norm lr * max_norm
}

TEST_CASE("master weights: state_dict holds the masters; a bad one changes nothing; loading refreshes the model") {
  Tensor w = from_vector({1.0, 2.0}, {2}, {.dtype = DType::F16, .requires_grad = true});
  optim::SGD mw({w}, {.lr = std::ldexp(1.0, -12), .momentum = 0.5, .master_weights = true});
  w.set_grad(full({2}, 1.0, {.dtype = DType::F16}));
  mw.step();  // masters move by 2^-12, the f16 copy of 2.0 cannot (its ulp is 2^-9)
  const StateDict saved = mw.state_dict();
  CHECK(saved.contains("state.0.master"));
  CHECK(saved.contains("state.0.momentum_buffer"));
  CHECK(saved.at("state.0.master").dtype() == DType::F32);
  CHECK(saved.at("state.0.momentum_buffer").dtype() == DType::F32);
  check_values(saved.at("state.0.master"), {1.0 - std::ldexp(1.0, -12), 2.0 - std::ldexp(1.0, -12)}, 0.0, 0.0);

  Tensor v = from_vector({5.0, 5.0}, {2}, {.dtype = DType::F16, .requires_grad = true});
  optim::SGD fresh({v}, {.lr = 1.0, .momentum = 0.5, .master_weights = true});
  StateDict wrong = saved;
  wrong["state.0.master"] = saved.at("state.0.master").to(DType::F16);
  check_error([&] { fresh.load_state_dict(wrong); }, "entry 'state.0.master' must be f32 [2]");
  wrong = saved;
  wrong.erase("state.0.master");
  check_error([&] { fresh.load_state_dict(wrong); }, "has no entry 'state.0.master'");
  wrong = saved;
  wrong.erase("step_count");
  check_error([&] { fresh.load_state_dict(wrong); },
              "optim::SGD::load_state_dict: the state has no entry 'step_count'");
  check_values(fresh.master(0), {5.0, 5.0}, 0.0, 0.0);  // the masters were checked first, then not copied
  check_values(v, {5.0, 5.0}, 0.0, 0.0);
  CHECK(fresh.step_count() == 0);
  // An optimizer without masters refuses them, and one with masters refuses a state without.
  Tensor u = from_vector({5.0, 5.0}, {2}, {.dtype = DType::F16, .requires_grad = true});
  optim::SGD no_masters({u}, {.lr = 1.0, .momentum = 0.5});
  check_error([&] { no_masters.load_state_dict(saved); }, "build the optimizer with master_weights = true");

  fresh.load_state_dict(saved);
  check_close(fresh.master(0), saved.at("state.0.master"), 0.0, 0.0);
  check_values(v, {to_f16(1.0 - std::ldexp(1.0, -12)), 2.0}, 0.0, 0.0);  // round(master)
  CHECK(fresh.step_count() == 1);
  CHECK(fresh.lr() == std::ldexp(1.0, -12));  // the saved lr, not the constructor's
  // The layout of amp::MasterWeights (before issue 17): the master as "master.0".
  StateDict legacy = saved;
  legacy["master.0"] = legacy.at("state.0.master");
  legacy.erase("state.0.master");
  optim::SGD again({v}, {.lr = 1.0, .momentum = 0.5, .master_weights = true});
  again.load_state_dict(legacy);
  check_close(again.master(0), saved.at("state.0.master"), 0.0, 0.0);
}
