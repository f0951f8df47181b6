// optim::Adagrad (optim/adagrad.h) against a hand-written f64 reference of torch.optim.Adagrad's
// formula (kernels/optim.h), in f64 and f32: lr_decay on each parameter's own step count, L2 weight
// decay, the initial accumulator, parameter groups; its kernel's step count; f32 master weights of
// f16 parameters; a step skipped on found_inf; state_dict round trips and bad state; option checks.
// The GPU against the CPU: test_cuda_amp (tests/optim_update_cases.h) and test_cuda_host_waits;
// resuming under a GradScaler: test_optim_state.
#include <cmath>
#include <functional>
#include <limits>

#include "kernels/optim.h"
#include "optim/adagrad.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

using Vec = std::vector<double>;

// torch.optim.Adagrad (the single-tensor path), one parameter, in f64, with its own step count.
struct AdagradState {
  Vec sum;
  int step = 0;
};
void adagrad_reference(const optim::AdagradOptions& o, Vec& p, AdagradState& s, const Vec& g_in, double lr,
                       double weight_decay) {
  if (s.sum.empty()) s.sum.assign(p.size(), o.initial_accumulator_value);
  ++s.step;
  const double clr = lr / (1.0 + (s.step - 1) * o.lr_decay);
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double g = g_in[i] + weight_decay * p[i];
    s.sum[i] += g * g;
    p[i] -= clr * g / (std::sqrt(s.sum[i]) + o.eps);
  }
}

// The error bound of a few steps against the f64 reference, in eps of the dtype (rtol and atol).
// A step rounds about six values once each (the gradient with its decay, the sum, its root, the
// denominator, the change, the parameter: 0.5 eps each, relative), the change is at most clr <= 0.1
// and the parameters stay below 2.5, so a step adds <= 2 eps of absolute error; earlier errors carry
// over through the sum and the decay. Five steps: <= 10 eps, and 32 leaves a margin of three.
double reference_tolerance(DType dtype) { return tolerance(dtype, 32); }

std::vector<std::string> keys_of(const StateDict& state) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : state) keys.push_back(key);
  return keys;
}

// Same keys, and under each the same shape, dtype and values (compared as doubles: exact for f64 and below).
void check_same_state(const StateDict& got, const StateDict& expected) {
  REQUIRE(keys_of(got) == keys_of(expected));
  for (const auto& [key, value] : expected) {
    INFO(key);
    CHECK(got.at(key).dtype() == value.dtype());
    check_close(got.at(key), value, 0.0, 0.0);
  }
}

struct Config {
  const char* name;
  optim::AdagradOptions options;
};
const std::vector<Config> kConfigs{
    {"PyTorch's defaults, lr 0.1", {.lr = 0.1}},
    {"lr_decay", {.lr = 0.1, .lr_decay = 0.5}},
    {"L2 weight decay", {.lr = 0.1, .weight_decay = 0.2}},
    {"initial accumulator, larger eps", {.lr = 0.1, .initial_accumulator_value = 0.3, .eps = 1e-3}},
    {"everything", {.lr = 0.05, .lr_decay = 0.25, .weight_decay = 0.1, .initial_accumulator_value = 0.1, .eps = 1e-6}},
};

// Five steps over two parameters in two groups (group 1: half the rate, no weight decay), fresh random
// gradients each step. Parameter 1 has no gradient at steps 0, 2 and 4, so its own step count (the t of
// lr_decay) lags the optimizer's. Parameters and sums checked after every step.
void check_against_reference(DType dtype, const optim::AdagradOptions& o) {
  Generator gen(42);
  std::vector<Tensor> params{uniform({3}, -2, 2, gen, {.dtype = dtype}).set_requires_grad(true),
                             uniform({2, 2}, -2, 2, gen, {.dtype = dtype}).set_requires_grad(true)};
  optim::Adagrad adagrad({{.parameters = {params[0]}},
                          {.parameters = {params[1]}, .lr = o.lr / 2, .weight_decay = 0.0}},
                         o);
  std::vector<Vec> expected{params[0].to_vector<double>(), params[1].to_vector<double>()};
  std::vector<AdagradState> states(2);
  const double tol = reference_tolerance(dtype);
  for (int step = 0; step < 5; ++step) {
    INFO("step " << step);
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (i == 1 && step % 2 == 0) {
        params[i].zero_grad();
        continue;
      }
      const Tensor g = uniform(params[i].shape(), -1, 1, gen, {.dtype = dtype});
      params[i].set_grad(g);
      const optim::Group& group = adagrad.groups()[i];
      adagrad_reference(o, expected[i], states[i], g.to_vector<double>(), group.lr, group.weight_decay);
    }
    adagrad.step();
    CHECK(adagrad.step_count() == step + 1);
    std::vector<Vec> expected_sums;
    for (std::size_t i = 0; i < params.size(); ++i) {
      check_values(params[i], expected[i], tol, tol);
      if (!states[i].sum.empty()) expected_sums.push_back(states[i].sum);
    }
    const std::vector<Tensor> sums = adagrad.state();
    REQUIRE(sums.size() == expected_sums.size());
    for (std::size_t k = 0; k < sums.size(); ++k) check_values(sums[k], expected_sums[k], tol, tol);
  }
  const StateDict state = adagrad.state_dict();
  CHECK(state_value(state, "state.0.step", "test") == 5.0);
  CHECK(state_value(state, "state.1.step", "test") == 2.0);
}

}  // namespace

TEST_CASE("Adagrad matches PyTorch's formula in f64 and f32, with lr_decay, weight decay and groups") {
  for (const Config& config : kConfigs) {
    INFO(config.name);
    check_against_reference(DType::F64, config.options);
    check_against_reference(DType::F32, config.options);
  }
}

TEST_CASE("Adagrad: from a zero sum every weight moves by lr / ((1 + (t - 1) lr_decay) sqrt(t)), whatever |g|") {
  // A constant gradient g: after t updates sum = t g^2, so update t moves the weight by
  // clr_t g / (sqrt(t) |g| + eps), the same for a gradient of 0.5 and one of -4 up to eps's share.
  const optim::AdagradOptions o{.lr = 0.1, .lr_decay = 0.5};
  Tensor w = f64({1.0, -2.0}, {2});
  optim::Adagrad adagrad({w}, o);
  double moved = 0.0;
  for (int t = 1; t <= 3; ++t) {
    w.set_grad(f64({0.5, -4.0}, {2}, false));
    adagrad.step();
    moved += o.lr / ((1.0 + (t - 1) * o.lr_decay) * std::sqrt(t));
  }
  const double eps_share = o.eps / 0.5;  // eps against the smaller |g| * sqrt(t)
  check_values(w, {1.0 - moved, -2.0 + moved}, eps_share + tolerance(DType::F64, 8), 0.0);
  check_values(adagrad.state().at(0), {3 * 0.25, 3 * 16.0}, tolerance(DType::F64, 2), 0.0);
}

TEST_CASE("adagrad kernel: the step count lives beside the sum; a skipped update does not advance it") {
  // lr_decay 1: update t has the rate lr / t. Powers of two keep the f32 arithmetic exact but for sqrt(2).
  const kernels::AdagradHyper hyper{.lr = 0.125, .lr_decay = 1.0};
  Tensor w = zeros({2}), sum = zeros({2}), steps = zeros({}, {.dtype = DType::I32});
  const Tensor g = from_vector({0.25, -4.0}, {2});
  kernels::UpdateCount count;
  kernels::adagrad(w, g, sum, steps, hyper, count);
  check_values(w, {-0.125, 0.125}, 0.0, 0.0);  // eps (1e-10) is below half an f32 ulp of |g|
  CHECK(steps.item() == 1);
  Tensor found_inf = ones({});
  const Tensor w_before = w.clone(), sum_before = sum.clone();
  kernels::adagrad(w, g, sum, steps, hyper, count, {.scaling = {.found_inf = &found_inf}});
  check_close(w, w_before, 0.0, 0.0);
  check_close(sum, sum_before, 0.0, 0.0);
  CHECK(steps.item() == 1);  // skipped: not counted
  found_inf = zeros({});
  // The second update has the rate of step 2, lr / 2 (with step 3's, or step 1's again, it would be off
  // by a third or twice): each weight moves by 0.0625 / sqrt(2).
  kernels::adagrad(w, g, sum, steps, hyper, count, {.scaling = {.found_inf = &found_inf}});
  CHECK(steps.item() == 2);
  const double second = 0.0625 / std::sqrt(2.0);
  check_values(w, {-0.125 - second, 0.125 + second}, tolerance(DType::F32, 2), 0.0);
  check_values(sum, {2 * 0.0625, 2 * 16.0}, 0.0, 0.0);
  Tensor f32_steps = zeros({});
  check_error([&] { kernels::adagrad(w, g, sum, f32_steps, hyper, count); }, "kernel adagrad: the step count must be");
}

TEST_CASE("Adagrad with master weights: f32 masters of f16 parameters step like f32, and keep what f16 loses") {
  // The master is updated exactly as an f32 parameter would be (the f16 gradient widens exactly),
  // bit for bit, and the f16 parameter is round(master) after every step.
  const optim::AdagradOptions o{.lr = 0.05, .lr_decay = 0.1, .weight_decay = 0.01, .master_weights = true};
  Generator gen(9);
  Tensor w16 = uniform({37}, -2, 2, gen, {.dtype = DType::F16}).set_requires_grad(true);
  Tensor w32 = w16.detach().to(DType::F32).set_requires_grad(true);
  optim::Adagrad with_master({w16}, o);
  optim::Adagrad f32({w32}, {.lr = o.lr, .lr_decay = o.lr_decay, .weight_decay = o.weight_decay});
  REQUIRE(with_master.master(0).dtype() == DType::F32);
  CHECK(with_master.master_bytes() == 37 * 4);
  for (int step = 0; step < 4; ++step) {
    INFO("step " << step);
    const Tensor g = uniform({37}, -1, 1, gen, {.dtype = DType::F16});
    w16.set_grad(g);
    w32.set_grad(g.to(DType::F32));
    with_master.step();
    f32.step();
    check_close(with_master.master(0), w32, 0.0, 0.0);
    check_close(w16, with_master.master(0).to(DType::F16), 0.0, 0.0);
    check_close(with_master.state().at(0), f32.state().at(0), 0.0, 0.0);
  }
  CHECK(with_master.state().at(0).dtype() == DType::F32);
  CHECK(keys_of(with_master.state_dict()) == std::vector<std::string>{"group.0.lr", "group.0.parameter_count",
                                                                      "group.0.weight_decay", "state.0.master",
                                                                      "state.0.step", "state.0.sum", "step_count"});

  // From a zero sum the first update is lr * sign(g): 2^-12 at 1.0, a tie below half of f16's spacing
  // there (2^-11) that rounds back to 1.0. Without a master every such update is lost; with one, none.
  const double lr = std::ldexp(1.0, -12);
  Tensor pure = ones({4}, {.dtype = DType::F16, .requires_grad = true});
  Tensor kept = ones({4}, {.dtype = DType::F16, .requires_grad = true});
  optim::Adagrad pure_adagrad({pure}, {.lr = lr});
  optim::Adagrad master_adagrad({kept}, {.lr = lr, .master_weights = true});
  pure.set_grad(full({4}, 1.0, {.dtype = DType::F16}));
  kept.set_grad(full({4}, 1.0, {.dtype = DType::F16}));
  pure_adagrad.step();
  master_adagrad.step();
  check_values(pure, {1, 1, 1, 1}, 0.0, 0.0);
  CHECK(pure_adagrad.last_update().lost == 4);
  check_values(master_adagrad.master(0), std::vector<double>(4, 1.0 - lr), 0.0, 0.0);
  CHECK(master_adagrad.last_update().nonzero == 4);
  CHECK(master_adagrad.last_update().lost == 0);
}

TEST_CASE("Adagrad: a step skipped on found_inf changes nothing and does not count for lr_decay") {
  // Under master weights, with what the GradScaler passes (gradients scaled by 2^10 and inv_scale 2^-10,
  // both exact): a clean step, a skipped one (an inf gradient, found_inf set), a clean one. The result
  // is bit for bit that of two plain steps: the skipped one moved neither the weights, nor the sum, nor
  // the step count (which would change the second step's rate).
  const optim::AdagradOptions o{.lr = 0.1, .lr_decay = 0.5, .weight_decay = 0.1, .master_weights = true};
  Generator gen(11);
  const Tensor init = uniform({9}, -1, 1, gen, {.dtype = DType::F16});
  const Tensor g1 = uniform({9}, -1, 1, gen, {.dtype = DType::F16});
  const Tensor g2 = uniform({9}, -1, 1, gen, {.dtype = DType::F16});
  Tensor w = init.clone().set_requires_grad(true), twin = init.clone().set_requires_grad(true);
  optim::Adagrad adagrad({w}, o), plain({twin}, o);
  const Tensor inv_scale = full({}, 1.0 / 1024.0);
  Tensor found_inf = zeros({});

  w.set_grad(mul(g1, 1024.0));
  adagrad.step({.inv_scale = &inv_scale, .found_inf = &found_inf});
  const StateDict after_clean = adagrad.state_dict();
  const Tensor w_after_clean = w.detach().clone();
  const kernels::UpdateCount counted = adagrad.last_update();
  std::vector<double> overflowed = g1.to_vector<double>();
  overflowed[4] = std::numeric_limits<double>::infinity();
  w.set_grad(from_vector(overflowed, {9}, {.dtype = DType::F16}));
  found_inf = ones({});  // as the GradScaler's check would set it
  adagrad.step({.inv_scale = &inv_scale, .found_inf = &found_inf});
  check_same_state(adagrad.state_dict(), after_clean);
  check_close(w, w_after_clean, 0.0, 0.0);
  CHECK(adagrad.step_count() == 1);
  CHECK(adagrad.last_update().nonzero == counted.nonzero);

  found_inf = zeros({});
  w.set_grad(mul(g2, 1024.0));
  adagrad.step({.inv_scale = &inv_scale, .found_inf = &found_inf});
  for (const Tensor& g : {g1, g2}) {
    twin.set_grad(g);
    plain.step();
  }
  check_same_state(adagrad.state_dict(), plain.state_dict());
  check_close(w, twin, 0.0, 0.0);
  CHECK(state_value(adagrad.state_dict(), "state.0.step", "test") == 2.0);
}

TEST_CASE("Adagrad: a state_dict round trip continues bit for bit; without it the continuation differs") {
  const optim::AdagradOptions o{.lr = 0.1, .lr_decay = 0.3, .weight_decay = 0.01, .initial_accumulator_value = 0.1};
  Generator gen(5);
  std::vector<Tensor> grads;
  for (int k = 0; k < 6; ++k) grads.push_back(uniform({5}, -1, 1, gen));
  auto train = [&](Tensor& w, optim::Adagrad& adagrad, int from, int to) {
    for (int k = from; k < to; ++k) {
      w.set_grad(grads[static_cast<std::size_t>(k)]);
      adagrad.step();
    }
  };
  Tensor w = uniform({5}, -1, 1, gen).set_requires_grad(true);
  optim::Adagrad original({w}, o);
  train(w, original, 0, 3);
  const StateDict saved = original.state_dict();
  CHECK(keys_of(saved) == std::vector<std::string>{"group.0.lr", "group.0.parameter_count", "group.0.weight_decay",
                                                   "state.0.step", "state.0.sum", "step_count"});
  CHECK(state_value(saved, "state.0.step", "test") == 3.0);
  Tensor resumed_w = w.detach().clone().set_requires_grad(true);
  Tensor restarted_w = w.detach().clone().set_requires_grad(true);
  train(w, original, 3, 6);

  optim::Adagrad resumed({resumed_w}, o);
  resumed.load_state_dict(saved);
  train(resumed_w, resumed, 3, 6);
  check_close(resumed_w, w, 0.0, 0.0);
  check_same_state(resumed.state_dict(), original.state_dict());
  optim::Adagrad restarted({restarted_w}, o);  // a fresh sum and step count: the comparison above can fail
  train(restarted_w, restarted, 3, 6);
  CHECK(restarted_w.to_vector<double>() != w.to_vector<double>());
}

TEST_CASE("Adagrad: load_state_dict refuses bad state, naming the entry, and changes nothing") {
  Tensor w = f64({1.0, 2.0}, {2});
  optim::Adagrad adagrad({w}, {.lr = 0.1});
  w.set_grad(f64({0.5, -0.5}, {2}, false));
  adagrad.step();
  const StateDict before = adagrad.state_dict();
  auto refused = [&](const std::function<void(StateDict&)>& edit, const std::string& message) {
    StateDict state = before;
    edit(state);
    check_error([&] { adagrad.load_state_dict(state); }, message);
    check_same_state(adagrad.state_dict(), before);
  };
  refused([](StateDict& s) { s.erase("state.0.step"); },
          "optim::Adagrad::load_state_dict: parameter 0 has state but no entry 'state.0.step'");
  refused([](StateDict& s) { s.erase("state.0.sum"); }, "no entry 'state.0.sum'");
  refused(
      [](StateDict& s) {
        s["state.0.sum"] = f64({1, 2, 3}, {3}, false);
      },
      "entry 'state.0.sum' is [3] f64, but parameter 0 is [2] f64");
  refused([](StateDict& s) { s["state.0.sum"] = ones({2}); },
          "entry 'state.0.sum' is [2] f32, but parameter 0 is [2] f64");
  refused([](StateDict& s) { s["state.0.step"] = state_scalar(2.5); },
          "entry 'state.0.step' must be a whole number from 0 to 2147483647, got 2.5");
  refused([](StateDict& s) { s["state.0.master"] = zeros({2}); }, "entry 'state.0.master' is an f32 master");
  // Adam's state is not Adagrad's, and the other way round.
  Tensor v = f64({1.0, 2.0}, {2});
  optim::Adam adam({v});
  v.set_grad(f64({1.0, 1.0}, {2}, false));
  adam.step();
  check_error([&] { adagrad.load_state_dict(adam.state_dict()); },
              "entry 'state.0.exp_avg' is not state of optim::Adagrad");
  check_error([&] { adam.load_state_dict(before); }, "entry 'state.0.sum' is not state of optim::Adam");
  check_same_state(adagrad.state_dict(), before);
}

TEST_CASE("Adagrad has PyTorch's defaults and refuses bad options, naming the option and the value") {
  const optim::AdagradOptions defaults;
  CHECK(defaults.lr == 0.01);
  CHECK(defaults.lr_decay == 0.0);
  CHECK(defaults.weight_decay == 0.0);
  CHECK(defaults.initial_accumulator_value == 0.0);
  CHECK(defaults.eps == 1e-10);
  CHECK_FALSE(defaults.master_weights);
  Tensor w = f64({1, 2}, {2});
  const double inf = std::numeric_limits<double>::infinity();
  check_error([&] { optim::Adagrad({w}, {.lr = -0.5}); },
              "optim::Adagrad: the learning rate must be finite and >= 0, got -0.5");
  check_error([&] { optim::Adagrad({w}, {.lr = inf}); }, "the learning rate must be finite and >= 0, got inf");
  check_error([&] { optim::Adagrad({w}, {.lr_decay = -1.0}); },
              "optim::Adagrad: lr_decay must be finite and >= 0, got -1");
  check_error([&] { optim::Adagrad({w}, {.lr_decay = NAN}); }, "lr_decay must be finite and >= 0, got nan");
  check_error([&] { optim::Adagrad({w}, {.weight_decay = -0.1}); },
              "optim::Adagrad: weight_decay must be finite and >= 0, got -0.1");
  check_error([&] { optim::Adagrad({w}, {.initial_accumulator_value = -0.1}); },
              "optim::Adagrad: initial_accumulator_value must be finite and >= 0, got -0.1");
  check_error([&] { optim::Adagrad({w}, {.eps = 0.0}); }, "optim::Adagrad: eps must be finite and > 0, got 0");
  check_error([&] { optim::Adagrad({w}, {.eps = -1e-10}); }, "eps must be finite and > 0, got -1e-10");
  check_error([&] { optim::Adagrad({{.parameters = {w}, .weight_decay = -1.0}}); }, "group 0's weight_decay");
  check_error([] { optim::Adagrad(std::vector<Tensor>{}); }, "optim::Adagrad: got no parameters to optimize");
  CHECK_NOTHROW(optim::Adagrad({w}, {.lr = 0.0, .lr_decay = 0.0, .initial_accumulator_value = 0.0}));
}
