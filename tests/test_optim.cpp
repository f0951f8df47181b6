// optim::SGD and optim::Adam/AdamW against a hand-written f64 reference of PyTorch's formulas
// (kernels/optim.h), in f64 and f32; skipped parameters, schedules, constructor checks, the
// lost-update count of f16 parameters, and the data version bump that protects saved graphs.
#include <cmath>
#include <functional>
#include <limits>
#include <memory>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

using Vec = std::vector<double>;

// torch.optim.SGD, one parameter, in f64. `buf` empty: no momentum step yet.
void sgd_reference(const optim::SgdOptions& o, Vec& p, Vec& buf, const Vec& g, double lr) {
  const bool first = buf.empty();
  if (first && o.momentum != 0.0) buf.assign(p.size(), 0.0);
  for (std::size_t i = 0; i < p.size(); ++i) {
    double d = g[i] + o.weight_decay * p[i];
    if (o.momentum != 0.0) {
      buf[i] = first ? d : o.momentum * buf[i] + (1.0 - o.dampening) * d;
      d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
    }
    p[i] -= lr * d;
  }
}

// torch.optim.Adam / AdamW, one parameter, in f64, with its own step count.
struct AdamState {
  Vec m, v;
  int t = 0;
};
void adam_reference(const optim::AdamOptions& o, Vec& p, AdamState& s, const Vec& g_in, double lr) {
  if (s.m.empty()) s.m.assign(p.size(), 0.0), s.v.assign(p.size(), 0.0);
  ++s.t;
  const double bias1 = 1.0 - std::pow(o.beta1, s.t), bias2 = 1.0 - std::pow(o.beta2, s.t);
  for (std::size_t i = 0; i < p.size(); ++i) {
    double g = g_in[i];
    if (o.decoupled_weight_decay) p[i] *= 1.0 - lr * o.weight_decay;
    else g += o.weight_decay * p[i];
    s.m[i] = o.beta1 * s.m[i] + (1.0 - o.beta1) * g;
    s.v[i] = o.beta2 * s.v[i] + (1.0 - o.beta2) * g * g;
    p[i] -= lr / bias1 * s.m[i] / (std::sqrt(s.v[i]) / std::sqrt(bias2) + o.eps);
  }
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
// Reference step of parameter `index`; returns nothing, updates p and its own state.
using ReferenceStep = std::function<void(std::size_t index, Vec& p, const Vec& g, double lr)>;
// The reference's state tensors, in the order of optimizer.state().
using ReferenceState = std::function<std::vector<Vec>()>;

// Four steps over two parameters with fresh random gradients each step; every value after every
// step within rtol/atol of the reference. `present(step, index)`: does the parameter get a grad?
void check_against_reference(DType dtype, const MakeOptimizer& make, const ReferenceStep& reference,
                             const ReferenceState& reference_state, double tol,
                             const std::function<bool(int, std::size_t)>& present = {}) {
  Generator gen(42);
  std::vector<Tensor> params{uniform({3}, -2, 2, gen, {.dtype = dtype}).set_requires_grad(true),
                             uniform({2, 2}, -2, 2, gen, {.dtype = dtype}).set_requires_grad(true)};
  std::vector<Vec> expected{params[0].to_vector<double>(), params[1].to_vector<double>()};
  auto opt = make(params);
  for (int step = 0; step < 4; ++step) {
    INFO("step " << step);
    const double lr = opt->lr();
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (present && !present(step, i)) {
        params[i].zero_grad();
        continue;
      }
      Tensor g = uniform(params[i].shape(), -1, 1, gen, {.dtype = dtype});
      params[i].set_grad(g);
      reference(i, expected[i], g.to_vector<double>(), lr);
    }
    opt->step();
    CHECK(opt->step_count() == step + 1);
    for (std::size_t i = 0; i < params.size(); ++i) check_values(params[i], expected[i], tol, tol);
    const std::vector<Tensor> state = opt->state();
    const std::vector<Vec> expected_state = reference_state();
    REQUIRE(state.size() == expected_state.size());
    for (std::size_t k = 0; k < state.size(); ++k) check_values(state[k], expected_state[k], tol, tol);
  }
}

void check_sgd(DType dtype, optim::SgdOptions o, double tol, const std::function<bool(int, std::size_t)>& present = {}) {
  auto buffers = std::make_shared<std::vector<Vec>>(2);
  check_against_reference(
      dtype, [o](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(std::move(p), o); },
      [o, buffers](std::size_t i, Vec& p, const Vec& g, double lr) { sgd_reference(o, p, (*buffers)[i], g, lr); },
      [buffers] {
        std::vector<Vec> state;
        for (const Vec& b : *buffers)
          if (!b.empty()) state.push_back(b);
        return state;
      },
      tol, present);
}

void check_adam(DType dtype, optim::AdamOptions o, double tol, const std::function<bool(int, std::size_t)>& present = {}) {
  auto states = std::make_shared<std::vector<AdamState>>(2);
  check_against_reference(
      dtype, [o](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(std::move(p), o); },
      [o, states](std::size_t i, Vec& p, const Vec& g, double lr) { adam_reference(o, p, (*states)[i], g, lr); },
      [states] {
        std::vector<Vec> state;
        for (const AdamState& s : *states)
          if (!s.m.empty()) state.insert(state.end(), {s.m, s.v});
        return state;
      },
      tol, present);
}

// f64: the kernel computes the same formula in f64; only the order of a few operations may differ.
constexpr double kF64Tol = 1e-12;
// f32: each step rounds ~6 intermediate values of magnitude <= ~4 (parameter, gradient, buffer)
// to f32 (0.5 eps each), over 4 steps, with momentum carrying earlier errors: 64 eps of f32 covers it.
const double kF32Tol = 64 * dtype_eps(DType::F32);

const std::vector<std::pair<const char*, optim::SgdOptions>> kSgdConfigs{
    {"plain", {.lr = 0.1}},
    {"momentum", {.lr = 0.1, .momentum = 0.9}},
    {"momentum + dampening", {.lr = 0.1, .momentum = 0.9, .dampening = 0.3}},
    {"nesterov", {.lr = 0.1, .momentum = 0.9, .nesterov = true}},
    {"weight decay", {.lr = 0.1, .weight_decay = 0.05}},
    {"nesterov + weight decay", {.lr = 0.05, .momentum = 0.8, .weight_decay = 0.1, .nesterov = true}},
};
const std::vector<std::pair<const char*, optim::AdamOptions>> kAdamConfigs{
    {"adam", {.lr = 0.1, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-3}},
    {"adam + L2 weight decay", {.lr = 0.05, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1}},
    {"adamw", {.lr = 0.05, .beta1 = 0.85, .beta2 = 0.9, .eps = 1e-6, .weight_decay = 0.2, .decoupled_weight_decay = true}},
    {"adamw defaults", optim::adamw_options(0.01)},
};

}  // namespace

TEST_CASE("optim: SGD matches the PyTorch formula in f64 and f32") {
  for (const auto& [name, options] : kSgdConfigs) {
    INFO("SGD " << name);
    check_sgd(DType::F64, options, kF64Tol);
    check_sgd(DType::F32, options, kF32Tol);
  }
}

TEST_CASE("optim: Adam and AdamW match the PyTorch formula in f64 and f32") {
  for (const auto& [name, options] : kAdamConfigs) {
    INFO(name);
    check_adam(DType::F64, options, kF64Tol);
    check_adam(DType::F32, options, kF32Tol);
  }
}

TEST_CASE("optim: a parameter without .grad is skipped; its state starts with its first gradient") {
  // Parameter 1 gets no gradient at steps 0 and 2: it must be left alone (bit-identical, no state),
  // its momentum buffer starts from its own first update, and Adam counts its own steps (bias
  // correction with t = 1 at optimizer step 1).
  auto present = [](int step, std::size_t index) { return index == 0 || step % 2 == 1; };
  check_sgd(DType::F64, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5}, kF64Tol, present);
  check_adam(DType::F64, {.lr = 0.1, .beta1 = 0.8, .beta2 = 0.95}, kF64Tol, present);

  Tensor a = f64({1, 2}, {2}), b = f64({3, 4}, {2});
  optim::Adam adam({a, b}, {.lr = 0.1});
  a.set_grad(f64({1, 1}, {2}, false));
  adam.step();
  CHECK(b.to_vector<double>() == Vec{3, 4});
  CHECK(adam.state().size() == 2);  // a's moments only
  CHECK(adam.last_update().nonzero == 2);
  a.zero_grad();
  adam.step();  // nothing has a gradient: nothing changes, but the step is counted
  CHECK(adam.step_count() == 2);
  CHECK(adam.last_update().nonzero == 0);
}

TEST_CASE("optim: set_schedule scales the learning rate per step; set_lr changes the base") {
  Tensor w = f64({1.0, -1.0}, {2});
  optim::SGD sgd({w}, {.lr = 0.5});
  sgd.set_schedule([](std::int64_t step) { return std::ldexp(1.0, -static_cast<int>(step)); });  // 2^-step
  Vec expected{1.0, -1.0};
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

TEST_CASE("optim: constructors refuse bad parameters and hyper-parameters") {
  Tensor w = f64({1, 2}, {2});
  check_error([] { optim::SGD({}); }, "optim::SGD: got no parameters to optimize");
  check_error([&] { optim::SGD({w, w}); }, "appears twice");
  check_error([&] { optim::Adam({w, f64({1}, {1}, false)}); }, "optim::Adam: parameter 1");
  check_error([&] { optim::SGD({f64({1}, {1}, false)}); }, "requires grad");
  check_error([&] { optim::SGD({mul(w, 2.0)}); }, "must be a floating leaf");
  clear_tape();
  check_error([&] { optim::SGD({w}, {.lr = -0.1}); }, "learning rate must be finite and >= 0, got -0.1");
  check_error([&] { optim::Adam({w}, {.lr = -1.0}); }, "optim::Adam: the learning rate");
  check_error([&] { optim::SGD({w}, {.momentum = -0.5}); }, "must be >= 0");
  check_error([&] { optim::SGD({w}, {.nesterov = true}); }, "Nesterov momentum needs momentum > 0");
  check_error([&] { optim::SGD({w}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}); }, "dampening = 0");
  check_error([&] { optim::Adam({w}, {.beta1 = 1.0}); }, "betas must be in [0, 1)");
  check_error([&] { optim::Adam({w}, {.beta2 = -0.1}); }, "betas must be in [0, 1)");
  check_error([&] { optim::Adam({w}, {.eps = -1e-8}); }, "eps");
  CHECK_NOTHROW(optim::Adam({w}, {.beta1 = 0.0, .beta2 = 0.0}));
}

TEST_CASE("optim: last_update counts the updates an f16 parameter loses") {
  // f16 spacing just below 1.0 is 2^-11: 1 - 2^-12 is a tie and rounds back to 1.0 (even), so an
  // update of 2^-12 is lost; 1 - 2^-10 is representable, so an update of 2^-10 is kept.
  Tensor w = ones({4}, {.dtype = DType::F16, .requires_grad = true});
  optim::SGD sgd({w}, {.lr = 1.0});
  const double small = std::ldexp(1.0, -12), large = std::ldexp(1.0, -10);
  w.set_grad(from_vector({small, small, small, small}, {4}, {.dtype = DType::F16}));
  sgd.step();
  check_values(w, {1, 1, 1, 1}, 0.0, 0.0);
  CHECK(sgd.last_update().nonzero == 4);
  CHECK(sgd.last_update().lost == 4);
  CHECK(amp::lost_update_fraction(sgd) == 1.0);
  w.set_grad(from_vector({large, large, large, large}, {4}, {.dtype = DType::F16}));
  sgd.step();
  check_values(w, std::vector<double>(4, 1.0 - large), 0.0, 0.0);
  CHECK(sgd.last_update().nonzero == 4);
  CHECK(sgd.last_update().lost == 0);
  // Mixed: zero updates are not counted at all.
  Tensor v = ones({4}, {.dtype = DType::F16, .requires_grad = true});
  optim::SGD mixed({v}, {.lr = 1.0});
  v.set_grad(from_vector({small, large, 0.0, small}, {4}, {.dtype = DType::F16}));
  mixed.step();
  check_values(v, {1, 1 - large, 1, 1}, 0.0, 0.0);
  CHECK(mixed.last_update().nonzero == 3);
  CHECK(mixed.last_update().lost == 2);
  CHECK(amp::lost_update_fraction(mixed) == doctest::Approx(2.0 / 3.0));
  // The same update to an f32 parameter is never lost.
  Tensor x = ones({1}, {.requires_grad = true});
  optim::SGD f32({x}, {.lr = 1.0});
  x.set_grad(full({1}, small));
  f32.step();
  CHECK(x.item() == 1.0 - small);
  CHECK(f32.last_update().lost == 0);
}

TEST_CASE("optim: step bumps the data version of updated parameters only") {
  Tensor w = f64({1, 2}, {2}), v = f64({3, 4}, {2});
  optim::SGD sgd({w, v}, {.lr = 0.1});
  // v has no gradient this step: a graph that saved it is still valid.
  Tensor z = sum(mul(v, v));
  w.set_grad(f64({1, 1}, {2}, false));
  sgd.step();
  backward(z);
  check_values(v.grad(), {6, 8});
  // w is updated in place: a graph that saved it before the step refuses to run backward.
  v.zero_grad();
  Tensor y = sum(mul(w, w));
  w.set_grad(f64({1, 1}, {2}, false));
  sgd.step();
  check_error([&] { backward(y); }, "modified in place");
  CHECK(tape_size() == 0);
}

// ---- with the GradScaler: a skipped step is not a step

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<unsigned char> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.data_ptr());
  return {p, p + t.nbytes()};
}

}  // namespace

namespace {

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
    return std::make_unique<optim::Adam>(std::move(p), optim::adamw_options(0.01));
  });
}
