// Optimizer::state_dict / load_state_dict: the keys and values each optimizer saves, a snapshot
// that later steps do not change, every malformed state refused before anything changes, and the
// property that matters: resuming is bit-exact. N steps, state_dict, a fresh copy of the model and a
// fresh optimizer, load_state_dict, N more steps gives the same bits as 2N uninterrupted steps, for
// SGD (momentum + Nesterov), Adam, AdamW, Adagrad and float16_master (AdamW or Adagrad with f32 master
// weights) with groups, a schedule and the GradScaler.
#include <functional>
#include <memory>

#include "optim/adagrad.h"
#include "optim/adamw.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

std::vector<unsigned char> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.data_ptr());
  return {p, p + t.nbytes()};
}

// Same keys, and under each key the same shape, dtype and bits.
bool same_state(const StateDict& a, const StateDict& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [key, value] : a) {
    auto it = b.find(key);
    if (it == b.end() || it->second.shape() != value.shape() || it->second.dtype() != value.dtype() ||
        bytes_of(it->second) != bytes_of(value))
      return false;
  }
  return true;
}

std::vector<std::string> keys_of(const StateDict& state) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : state) keys.push_back(key);
  return keys;
}

}  // namespace

TEST_CASE("state_dict: SGD saves the step count, its groups and the momentum buffers that exist, as a snapshot") {
  Tensor a = f64({1.0, 2.0}, {2}), b = f64({3.0}, {1});
  optim::SGD sgd({a, b}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.5});
  a.set_grad(f64({1.0, -1.0}, {2}, false));  // b has no gradient: no state
  sgd.step();
  const StateDict state = sgd.state_dict();
  CHECK(keys_of(state) == std::vector<std::string>{"group.0.lr", "group.0.parameter_count", "group.0.weight_decay",
                                                   "state.0.momentum_buffer", "step_count"});
  CHECK(state.at("step_count").dtype() == DType::F64);
  CHECK(state.at("step_count").dim() == 0);
  CHECK(state_value(state, "step_count", "test") == 1.0);
  CHECK(state_value(state, "group.0.lr", "test") == 0.1);
  CHECK(state_value(state, "group.0.weight_decay", "test") == 0.5);
  CHECK(state_value(state, "group.0.parameter_count", "test") == 2.0);
  check_values(state.at("state.0.momentum_buffer"), {1.0 + 0.5 * 1.0, -1.0 + 0.5 * 2.0});  // first buffer: g + wd p
  CHECK_FALSE(state.at("state.0.momentum_buffer").shares_storage_with(sgd.state()[0]));
  a.set_grad(f64({1.0, 1.0}, {2}, false));
  sgd.step();  // the snapshot does not move
  check_values(state.at("state.0.momentum_buffer"), {1.5, 0.0});
  CHECK(state_value(state, "step_count", "test") == 1.0);
  // Without momentum SGD has no per-parameter state at all.
  optim::SGD plain({b}, {.lr = 0.1});
  b.set_grad(f64({1.0}, {1}, false));
  plain.step();
  CHECK(plain.state_dict().size() == 4);
}

TEST_CASE("state_dict: Adam and AdamW save both moments and each parameter's own step count") {
  Tensor a = f64({1.0}, {1}), b = f64({2.0, 3.0}, {2});
  optim::AdamW adamw({{.parameters = {a}}, {.parameters = {b}, .lr = 0.01, .weight_decay = 0.0}});
  for (int step = 0; step < 3; ++step) {
    a.set_grad(f64({0.5}, {1}, false));
    if (step > 0) b.set_grad(f64({1.0, 1.0}, {2}, false));  // b misses the first step
    adamw.step();
  }
  const StateDict state = adamw.state_dict();
  CHECK(keys_of(state) == std::vector<std::string>{"group.0.lr", "group.0.parameter_count", "group.0.weight_decay",
                                                   "group.1.lr", "group.1.parameter_count", "group.1.weight_decay",
                                                   "state.0.exp_avg", "state.0.exp_avg_sq", "state.0.step",
                                                   "state.1.exp_avg", "state.1.exp_avg_sq", "state.1.step",
                                                   "step_count"});
  CHECK(state_value(state, "step_count", "test") == 3.0);
  CHECK(state_value(state, "state.0.step", "test") == 3.0);
  CHECK(state_value(state, "state.1.step", "test") == 2.0);
  CHECK(state_value(state, "group.0.weight_decay", "test") == 1e-2);  // AdamW's default
  CHECK(state_value(state, "group.1.lr", "test") == 0.01);
  // m after three gradients of 0.5: 0.5 * (1 - 0.9^3); v likewise with 0.25 and 0.999.
  check_values(state.at("state.0.exp_avg"), {0.5 * (1.0 - 0.9 * 0.9 * 0.9)});
  check_values(state.at("state.0.exp_avg_sq"), {0.25 * (1.0 - 0.999 * 0.999 * 0.999)});
}

TEST_CASE("load_state_dict: every malformed state is refused before anything changes") {
  Tensor a = f64({1.0, 2.0}, {2}), b = f64({3.0}, {1});
  optim::SGD sgd({a, b}, {.lr = 0.1, .momentum = 0.9});
  a.set_grad(f64({1.0, 1.0}, {2}, false));
  sgd.step();
  const StateDict before = sgd.state_dict();
  auto refused = [&](const std::function<void(StateDict&)>& edit, const std::string& message) {
    StateDict state = before;
    edit(state);
    check_error([&] { sgd.load_state_dict(state); }, message);
    CHECK(same_state(sgd.state_dict(), before));
  };
  refused([](StateDict& s) { s.erase("step_count"); },
          "optim::SGD::load_state_dict: the state has no entry 'step_count'");
  refused([](StateDict& s) { s.erase("group.0.lr"); }, "no entry 'group.0.lr'");
  refused([](StateDict& s) { s["step_count"] = state_scalar(1.5); },
          "entry 'step_count' must be a whole number from 0 to 9007199254740992, got 1.5");
  refused([](StateDict& s) { s["group.0.lr"] = state_scalar(-1.0); }, "group 0 has lr -1");
  refused(
      [](StateDict& s) {
        s["state.0.momentum_buffer"] = f64({1, 2, 3}, {3}, false);
      },
      "entry 'state.0.momentum_buffer' is [3] f64, but parameter 0 is [2] f64");
  refused([](StateDict& s) { s["state.0.momentum_buffer"] = ones({2}); }, "is [2] f32, but parameter 0 is [2] f64");
  refused(
      [](StateDict& s) {
        s["state.0.exp_avg"] = f64({0, 0}, {2}, false);
      },
      "entry 'state.0.exp_avg' is not state of optim::SGD with these options (its parameters' state is "
      "[momentum_buffer]); was it saved by another optimizer?");
  refused([](StateDict& s) { s["state.2.momentum_buffer"] = f64({0}, {1}, false); },
          "entry 'state.2.momentum_buffer' is for parameter 2, but optim::SGD has 2 parameters");
  refused([](StateDict& s) { s["group.1.lr"] = state_scalar(0.1); }, "is for group 1, but optim::SGD has 1 group(s)");
  refused([](StateDict& s) { s["group.0.parameter_count"] = state_scalar(3); },
          "group 0 was saved with 3 parameters but has 2 here");
  refused([](StateDict& s) { s["model.0.weight"] = f64({0}, {1}, false); }, "unknown entry 'model.0.weight'");
  refused([](StateDict& s) { s["state.1.momentum_buffer"] = Tensor(); }, "is an undefined tensor");

  // Another optimizer's state, and the same optimizer with other groups.
  Tensor c = f64({1.0, 2.0}, {2}), d = f64({3.0}, {1});
  optim::Adam adam({c, d});
  c.set_grad(f64({1.0, 1.0}, {2}, false));
  adam.step();
  check_error([&] { sgd.load_state_dict(adam.state_dict()); }, "is not state of optim::SGD");
  check_error([&] { adam.load_state_dict(sgd.state_dict()); },
              "entry 'state.0.momentum_buffer' is not state of optim::Adam");
  StateDict no_step = adam.state_dict();
  no_step.erase("state.0.step");
  check_error([&] { adam.load_state_dict(no_step); }, "parameter 0 has state but no entry 'state.0.step'");
  optim::SGD grouped({{.parameters = {a}}, {.parameters = {b}}}, {.lr = 0.1, .momentum = 0.9});
  check_error([&] { grouped.load_state_dict(before); }, "group 0 was saved with 2 parameters but has 1 here");
  CHECK(same_state(sgd.state_dict(), before));
}

TEST_CASE("load_state_dict: copies into the existing state; a parameter without entries loses its state") {
  Tensor a = f64({1.0, 2.0}, {2}), b = f64({3.0}, {1});
  optim::SGD source({a, b}, {.lr = 0.1, .momentum = 0.9});
  a.set_grad(f64({1.0, 1.0}, {2}, false));
  source.step();  // state for a only
  const StateDict saved = source.state_dict();

  Tensor c = f64({1.0, 2.0}, {2}), d = f64({3.0}, {1});
  optim::SGD target({c, d}, {.lr = 0.5, .momentum = 0.9});
  c.set_grad(f64({4.0, 4.0}, {2}, false));
  d.set_grad(f64({4.0}, {1}, false));
  target.step();  // state for both
  const Tensor buffer = target.state()[0];
  target.load_state_dict(saved);
  CHECK(same_state(target.state_dict(), saved));
  REQUIRE(target.state().size() == 1);  // d's buffer is gone with the saved state
  CHECK(target.state()[0].shares_storage_with(buffer));  // a's values, written into c's buffer
  CHECK(target.lr() == 0.1);
  CHECK(target.step_count() == 1);
  // The loaded state is a copy: stepping one optimizer leaves the other alone.
  c.set_grad(f64({1.0, 1.0}, {2}, false));
  target.step();
  CHECK(same_state(source.state_dict(), saved));
}

// ---- resuming is bit-exact

namespace {

// y = tanh(x w1 + b1) w2, loss = mse(y, target): three parameters in two groups (b1 in the second,
// with its own lr and no weight decay), one batch per step.
struct Batch {
  Tensor x, target;
};

std::vector<Tensor> make_model(std::uint64_t seed) {
  Generator gen(seed);
  return {uniform({4, 8}, -0.5, 0.5, gen).set_requires_grad(true), uniform({8}, -0.1, 0.1, gen).set_requires_grad(true),
          uniform({8, 3}, -0.5, 0.5, gen).set_requires_grad(true)};
}

// The model's own checkpoint: fresh leaves with the same values (and dtypes).
std::vector<Tensor> copy_model(const std::vector<Tensor>& model) {
  std::vector<Tensor> copy;
  for (const Tensor& p : model) copy.push_back(p.detach().clone().set_requires_grad(true));
  return copy;
}

std::vector<optim::ParamGroup> groups_of(const std::vector<Tensor>& model) {
  return {{.parameters = {model[0], model[2]}}, {.parameters = {model[1]}, .lr = 0.02, .weight_decay = 0.0}};
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>& model)>;

struct Trainer {
  const amp::Recipe& recipe;
  const std::vector<Batch>& batches;

  void train(std::vector<Tensor>& model, optim::Optimizer& optimizer, amp::GradScaler& scaler, std::size_t from,
             std::size_t to) const {
    for (std::size_t k = from; k < to; ++k) {
      optimizer.zero_grad();
      Tensor loss;
      {
        Autocast region = recipe.autocast();
        loss = mse_loss(matmul(tanh(add(matmul(batches[k].x, model[0]), model[1])), model[2]), batches[k].target);
      }
      backward(scaler.scale(loss));
      scaler.step(optimizer);
      scaler.update();
    }
  }
};

void check_resume_is_bit_exact(const std::string& recipe_name, const MakeOptimizer& make, std::size_t n = 6) {
  const amp::Recipe recipe = amp::Recipe::parse(recipe_name);
  Generator gen(17);
  std::vector<Batch> batches;
  for (std::size_t k = 0; k < 2 * n; ++k)
    batches.push_back({uniform({16, 4}, -1, 1, gen), uniform({16, 3}, -1, 1, gen)});
  const Trainer trainer{recipe, batches};

  std::vector<Tensor> model = make_model(3);
  recipe.cast_parameters(model);
  auto optimizer = make(model);
  amp::GradScaler scaler = recipe.make_scaler({.init_scale = 1024});
  trainer.train(model, *optimizer, scaler, 0, n);
  const StateDict saved = optimizer->state_dict();
  const StateDict saved_scaler = scaler.state_dict();
  std::vector<Tensor> resumed_model = copy_model(model);
  std::vector<Tensor> restarted_model = copy_model(model);  // the same, without the optimizer's state
  trainer.train(model, *optimizer, scaler, n, 2 * n);

  auto resumed = make(resumed_model);
  resumed->load_state_dict(saved);
  amp::GradScaler resumed_scaler = recipe.make_scaler();
  resumed_scaler.load_state_dict(saved_scaler);
  trainer.train(resumed_model, *resumed, resumed_scaler, n, 2 * n);
  CHECK(resumed->step_count() == optimizer->step_count());
  CHECK(resumed->step_count() > state_value(saved, "step_count", "test"));  // the second half took steps
  CHECK(same_state(resumed->state_dict(), optimizer->state_dict()));
  for (std::size_t i = 0; i < model.size(); ++i) {
    INFO("parameter " << i);
    CHECK(bytes_of(resumed_model[i]) == bytes_of(model[i]));
  }
  // Without the state the continuation differs: the comparison above can fail.
  auto restarted = make(restarted_model);
  amp::GradScaler restarted_scaler = recipe.make_scaler();
  restarted_scaler.load_state_dict(saved_scaler);
  trainer.train(restarted_model, *restarted, restarted_scaler, n, 2 * n);
  CHECK(bytes_of(restarted_model[0]) != bytes_of(model[0]));
}

}  // namespace

TEST_CASE("resume: SGD with Nesterov momentum and weight decay, groups and a schedule, is bit-exact") {
  check_resume_is_bit_exact("fp32", [](const std::vector<Tensor>& model) {
    auto sgd = std::make_unique<optim::SGD>(
        groups_of(model), optim::SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
    sgd->set_schedule(optim::step_decay(4, 0.5));
    return sgd;
  });
}

TEST_CASE("resume: Adam (per-parameter step counts) is bit-exact") {
  check_resume_is_bit_exact("fp32", [](const std::vector<Tensor>& model) {
    return std::make_unique<optim::Adam>(model, optim::AdamOptions{.lr = 0.01, .weight_decay = 1e-2});
  });
}

TEST_CASE("resume: AdamW with groups and warm-up + cosine is bit-exact") {
  check_resume_is_bit_exact("fp32", [](const std::vector<Tensor>& model) {
    auto adamw = std::make_unique<optim::AdamW>(groups_of(model), optim::AdamWOptions{.lr = 0.01});
    adamw->set_schedule(optim::linear_warmup(3, optim::cosine_decay(9, 0.1)));
    return adamw;
  });
}

TEST_CASE("resume: Adagrad (lr_decay on per-parameter step counts, groups) is bit-exact, also under float16_master") {
  for (const char* recipe : {"fp32", "float16_master"}) {
    INFO(recipe);
    check_resume_is_bit_exact(recipe, [recipe](const std::vector<Tensor>& model) {
      return std::make_unique<optim::Adagrad>(
          groups_of(model), optim::AdagradOptions{.lr = 0.05,
                                                  .lr_decay = 0.1,
                                                  .weight_decay = 1e-3,
                                                  .master_weights = amp::Recipe::parse(recipe).master_weights});
    });
  }
}

TEST_CASE("resume: float16_master (f32 masters, AdamW, GradScaler, schedule) is bit-exact") {
  check_resume_is_bit_exact("float16_master", [](const std::vector<Tensor>& model) {
    const amp::Recipe recipe = amp::Recipe::parse("float16_master");
    auto optimizer = std::make_unique<optim::AdamW>(groups_of(model),
                                                    optim::AdamWOptions{.lr = 0.01,
                                                                        .master_weights = recipe.master_weights});
    optimizer->set_schedule(optim::linear_warmup(3, optim::cosine_decay(9, 0.1)));
    return optimizer;
  });
}
