// optim::SGD, Adam and AdamW against a hand-written f64 reference of PyTorch's formulas
// (kernels/optim.h), in f64 and f32; skipped parameters, parameter groups, constructor checks, the
// lost-update count of f16 parameters, the data version bump that protects saved graphs, and Adam's
// step count kept beside its moments (the kernel advances it, a skipped update does not).
// Schedules, skipped steps and clipping: test_optim_schedule; state_dict and resuming: test_optim_state.
#include <cmath>
#include <functional>
#include <memory>

#include "kernels/optim.h"
#include "optim/adamw.h"
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

// torch.optim.Adam / AdamW (decoupled), one parameter, in f64, with its own step count.
struct AdamState {
  Vec m, v;
  int t = 0;
};
void adam_reference(const optim::AdamOptions& o, bool decoupled, Vec& p, AdamState& s, const Vec& g_in, double lr) {
  if (s.m.empty()) s.m.assign(p.size(), 0.0), s.v.assign(p.size(), 0.0);
  ++s.t;
  const double bias1 = 1.0 - std::pow(o.beta1, s.t), bias2 = 1.0 - std::pow(o.beta2, s.t);
  for (std::size_t i = 0; i < p.size(); ++i) {
    double g = g_in[i];
    if (decoupled)
      p[i] *= 1.0 - lr * o.weight_decay;
    else
      g += o.weight_decay * p[i];
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

void check_sgd(DType dtype, optim::SgdOptions o, double tol,
               const std::function<bool(int, std::size_t)>& present = {}) {
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

// Adam with `o`, or AdamW with the same numbers when `decoupled`.
void check_adam(DType dtype, optim::AdamOptions o, bool decoupled, double tol,
                const std::function<bool(int, std::size_t)>& present = {}) {
  auto states = std::make_shared<std::vector<AdamState>>(2);
  check_against_reference(
      dtype,
      [o, decoupled](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
        if (!decoupled) return std::make_unique<optim::Adam>(std::move(p), o);
        return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = o.lr,
                                                                                .beta1 = o.beta1,
                                                                                .beta2 = o.beta2,
                                                                                .eps = o.eps,
                                                                                .weight_decay = o.weight_decay});
      },
      [o, decoupled, states](std::size_t i, Vec& p, const Vec& g, double lr) {
        adam_reference(o, decoupled, p, (*states)[i], g, lr);
      },
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
struct AdamConfig {
  const char* name;
  optim::AdamOptions options;
  bool decoupled;  // AdamW
};
const std::vector<AdamConfig> kAdamConfigs{
    {"adam", {.lr = 0.1, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-3}, false},
    {"adam + L2 weight decay", {.lr = 0.05, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1}, false},
    {"adamw", {.lr = 0.05, .beta1 = 0.85, .beta2 = 0.9, .eps = 1e-6, .weight_decay = 0.2}, true},
    {"adamw, PyTorch's other defaults", {.lr = 0.01, .weight_decay = 1e-2}, true},
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
  for (const AdamConfig& config : kAdamConfigs) {
    INFO(config.name);
    check_adam(DType::F64, config.options, config.decoupled, kF64Tol);
    check_adam(DType::F32, config.options, config.decoupled, kF32Tol);
  }
}

TEST_CASE("optim: a parameter without .grad is skipped; its state starts with its first gradient") {
  // Parameter 1 gets no gradient at steps 0 and 2: it must be left alone (bit-identical, no state),
  // its momentum buffer starts from its own first update, and Adam counts its own steps (bias
  // correction with t = 1 at optimizer step 1).
  auto present = [](int step, std::size_t index) { return index == 0 || step % 2 == 1; };
  check_sgd(DType::F64, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5}, kF64Tol, present);
  check_adam(DType::F64, {.lr = 0.1, .beta1 = 0.8, .beta2 = 0.95}, false, kF64Tol, present);

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

TEST_CASE("optim: constructors refuse bad parameters and hyper-parameters") {
  Tensor w = f64({1, 2}, {2});
  check_error([] { optim::SGD(std::vector<Tensor>{}); }, "optim::SGD: got no parameters to optimize");
  check_error([] { optim::SGD(std::vector<optim::ParamGroup>{{}, {}}); }, "optim::SGD: got no parameters");
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

TEST_CASE("optim: AdamW has PyTorch's defaults and decays the weight itself, not through the moments") {
  const optim::AdamWOptions defaults;
  CHECK(defaults.lr == 1e-3);
  CHECK(defaults.beta1 == 0.9);
  CHECK(defaults.beta2 == 0.999);
  CHECK(defaults.eps == 1e-8);
  CHECK(defaults.weight_decay == 1e-2);
  // A zero gradient: AdamW's moments stay 0, so only the decay moves p, by lr * wd * p = 1e-5.
  Tensor w = f64({1.0}, {1}), v = f64({1.0}, {1});
  optim::AdamW adamw({w});
  CHECK(adamw.decoupled_weight_decay());
  CHECK(adamw.name() == "optim::AdamW");
  w.set_grad(f64({0.0}, {1}, false));
  adamw.step();
  check_values(w, {1.0 - 1e-3 * 1e-2});
  // Adam's L2 decay enters the moments as a gradient of wd * p = 0.01 and is normalised by sqrt(v):
  // m = 0.1 * 0.01, v = 0.001 * 1e-4, and the step is lr * (m / 0.1) / (sqrt(v / 0.001) + eps),
  // almost a full lr of 1e-3: a hundred times AdamW's decay.
  optim::Adam adam({v}, {.weight_decay = 1e-2});
  CHECK_FALSE(adam.decoupled_weight_decay());
  v.set_grad(f64({0.0}, {1}, false));
  adam.step();
  check_values(v, {1.0 - 1e-3 * 0.01 / (0.01 + 1e-8)});
}

TEST_CASE("optim: parameter groups step with their own lr and weight decay; set_lr per group or all") {
  // SGD, one step: p -= lr * (g + wd * p). Group 0 takes the defaults (lr 0.1, wd 0.5), group 1
  // sets lr 0.01 and no weight decay.
  Tensor a = f64({1.0, 2.0}, {2}), b = f64({4.0}, {1}), c = f64({-2.0}, {1});
  optim::SGD sgd({{.parameters = {a, b}}, {.parameters = {c}, .lr = 0.01, .weight_decay = 0.0}},
                 {.lr = 0.1, .weight_decay = 0.5});
  REQUIRE(sgd.groups().size() == 2);
  CHECK(sgd.parameters().size() == 3);
  CHECK(sgd.parameters()[2].id() == c.id());  // group after group
  CHECK(sgd.groups()[0].begin == 0);
  CHECK(sgd.groups()[0].end == 2);
  CHECK(sgd.groups()[1].size() == 1);
  CHECK(sgd.groups()[0].weight_decay == 0.5);
  CHECK(sgd.groups()[1].weight_decay == 0.0);
  CHECK(sgd.lr() == 0.1);
  CHECK(sgd.lr(1) == 0.01);
  for (Tensor p : {a, b, c}) p.set_grad(full(p.shape(), 1.0, {.dtype = DType::F64}));
  sgd.step();
  check_values(a, {1.0 - 0.1 * (1.0 + 0.5), 2.0 - 0.1 * (1.0 + 1.0)});
  check_values(b, {4.0 - 0.1 * (1.0 + 2.0)});
  check_values(c, {-2.0 - 0.01 * 1.0});
  sgd.set_lr(1, 0.5);
  CHECK(sgd.lr(0) == 0.1);
  CHECK(sgd.lr(1) == 0.5);
  sgd.set_lr(0.25);  // every group
  CHECK(sgd.lr(0) == 0.25);
  CHECK(sgd.lr(1) == 0.25);
  check_error([&] { sgd.set_lr(2, 0.1); }, "optim::SGD::set_lr: there is no group 2");
  check_error([&] { sgd.set_lr(1, -0.1); }, "the learning rate must be finite and >= 0");
  check_error([&] { (void)sgd.lr(2); }, "optim::SGD::lr: there is no group 2");

  // The same groups for Adam and AdamW; an empty group is allowed (a model without biases).
  Tensor d = f64({3.0}, {1}), e = f64({3.0}, {1});
  optim::AdamW adamw({{.parameters = {d}}, {.parameters = {e}, .weight_decay = 0.0}, {}}, {.lr = 0.1});
  d.set_grad(f64({0.0}, {1}, false));
  e.set_grad(f64({0.0}, {1}, false));
  adamw.step();
  check_values(d, {3.0 * (1.0 - 0.1 * 1e-2)});
  check_values(e, {3.0}, 0.0, 0.0);  // no decay and no gradient: untouched
}

TEST_CASE("optim: parameter groups refuse a parameter in two groups and bad overrides") {
  Tensor w = f64({1, 2}, {2}), b = f64({3}, {1});
  check_error(
      [&] {
        optim::SGD({{.parameters = {w, b}}, {.parameters = {b}}});
      },
      "optim::SGD: parameter 2 ([1]) is in group 0 and again in group 1; a parameter may belong to only one");
  check_error([&] { optim::Adam({{.parameters = {w}}, {.parameters = {b, b}}}); }, "appears twice in group 1");
  check_error([&] { optim::AdamW({{.parameters = {w}, .lr = -1.0}}); }, "optim::AdamW: group 0's learning rate");
  check_error([&] { optim::SGD({{.parameters = {w}, .weight_decay = NAN}}); }, "group 0's weight_decay");
  check_error(
      [&] {
        optim::SGD({{.parameters = {w}}, {.parameters = {f64({1}, {1}, false)}}});
      },
      "parameter 1 ([1] f64, in group 1) must be a floating leaf that requires grad");
  check_error([&] { optim::AdamW({w}, {.weight_decay = -0.1}); }, "optim::AdamW: weight_decay must be finite");
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

TEST_CASE("adam kernel: the step count lives beside the moments; a skipped update does not advance it") {
  // Betas whose 1 - beta is exact in f32, so that the f64 reference below differs only by roundings.
  const kernels::AdamHyper hyper{.lr = 0.125, .beta1 = 0.5, .beta2 = 0.75, .eps = 0.0};
  Tensor w = zeros({2}), m = zeros({2}), v = zeros({2}), steps = zeros({}, {.dtype = DType::I32});
  const Tensor g = from_vector({0.25, -4.0}, {2});
  kernels::UpdateCount count;
  // The first update of a fresh state moves each weight by lr * sign(g): m / sqrt(v) = g / |g| once
  // both corrections divide out.
  kernels::adam(w, g, m, v, steps, hyper, count);
  check_values(w, {-0.125, 0.125}, 4 * dtype_eps(DType::F32), 0.0);
  CHECK(steps.item() == 1);
  Tensor found_inf = ones({});
  const Tensor w_before = w.clone(), m_before = m.clone();
  kernels::adam(w, g, m, v, steps, hyper, count, {.scaling = {.found_inf = &found_inf}});
  check_close(w, w_before, 0.0, 0.0);
  check_close(m, m_before, 0.0, 0.0);
  CHECK(steps.item() == 1);  // skipped: not counted
  found_inf = zeros({});
  // The second update uses step 2's corrections, read from the stored count (with step 3's, or step
  // 1's again, the result would be 25% off).
  kernels::adam(w, g, m, v, steps, hyper, count, {.scaling = {.found_inf = &found_inf}});
  CHECK(steps.item() == 2);
  const double m2 = 0.5 * 0.5 * 0.25 + 0.5 * 0.25, v2 = 0.75 * 0.25 * 0.0625 + 0.25 * 0.0625;
  const double expected = -0.125 - 0.125 / (1 - 0.25) * m2 / (std::sqrt(v2) / std::sqrt(1 - 0.5625));
  check_values(w.slice(0, 1), {expected}, 8 * dtype_eps(DType::F32), 0.0);
}
