// train/checkpoint.h: a round trip of every part of a checkpoint (model, optimizer, scaler, generator,
// the caller's entries); a file that does not fit leaves everything as it was; and a checkpoint
// written by an earlier layout keeps loading.
//
// tests/fixtures/checkpoint_v1_float16_master.safetensors was written before issue 17 moved the f32
// master weights into the optimizer's state: a float16_master run (f16 Linear(4, 3), ReLU,
// Linear(3, 2); AdamW lr 0.01, weight decay 0.1; a dynamic GradScaler with growth_interval 2) after 3
// steps, with the batch it trained on and what one more step made of it ("extra.expected.*").
// Loading it and taking that step must give those values, bit for bit. (The expected f32 masters
// were taken again when Adam's constants moved to PyTorch's rounding, issue 21: 8 of 23 values moved
// by 1 or 2 ulps; the f16 parameters and everything the run saved are as written before issue 17.)
#include <fmt/format.h>

#include "data/safetensors.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/norm.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"
#include "train/checkpoint.h"

using namespace mg;
using namespace mg::testing;

namespace {

// Parameters, a buffer (BatchNorm's running statistics) and nested names: "0.weight", "1.running_mean".
std::shared_ptr<nn::Sequential> make_net() {
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(3, 2, false));
}

// A few SGD steps on fixed data, so that weights, momentum and the scaler have moved.
void train_steps(nn::Module& net, optim::Optimizer& optimizer, amp::GradScaler& scaler, int steps) {
  Generator data(5);
  const Tensor x = randn({6, 4}, data);
  for (int i = 0; i < steps; ++i) {
    optimizer.zero_grad();
    backward(scaler.scale(sum(mul(net(x), net(x)))));
    scaler.step(optimizer);
    scaler.update();
  }
}

std::vector<std::vector<double>> values_of(const StateDict& state) {
  std::vector<std::vector<double>> values;
  for (const auto& [name, t] : state) values.push_back(t.to_vector<double>());
  return values;
}

const std::string kFixture = std::string(MG_SOURCE_DIR) + "/tests/fixtures/checkpoint_v1_float16_master.safetensors";

// Every element equal, bit for bit (both are f16 or both f32, read as f64 exactly).
void check_equal(const Tensor& got, const Tensor& want) {
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i);
    CHECK(g[i] == w[i]);
  }
}

}  // namespace

TEST_CASE("checkpoints: model, optimizer, scaler, generator and extra entries come back exactly") {
  TempDir tmp;
  auto net = make_net();
  optim::SGD sgd(net->parameters(), {.lr = 0.01, .momentum = 0.9});
  amp::GradScaler scaler({.init_scale = 1024.0, .rule = {.growth_interval = 2}});
  train_steps(*net, sgd, scaler, 3);
  manual_seed(77);
  train::save_checkpoint(tmp / "run.safetensors", {net.get(), &sgd, &scaler}, {{"epoch", state_scalar(4.0)}},
                         {{"note", "test"}});
  const auto expected_model = values_of(net->state_dict());
  const auto expected_optimizer = values_of(sgd.state_dict());
  const auto expected_scaler = scalars_of(scaler.state_dict());
  const double expected_draw = randn({1}).item();

  auto other = make_net();  // different initial weights
  optim::SGD other_sgd(other->parameters(), {.lr = 0.01, .momentum = 0.9});
  amp::GradScaler other_scaler({.init_scale = 1024.0, .rule = {.growth_interval = 2}});
  manual_seed(1);
  train::LoadedCheckpoint loaded = train::load_checkpoint(tmp / "run.safetensors",
                                                          {other.get(), &other_sgd, &other_scaler});
  CHECK(values_of(other->state_dict()) == expected_model);
  CHECK(values_of(other_sgd.state_dict()) == expected_optimizer);
  CHECK(scalars_of(other_scaler.state_dict()) == expected_scaler);
  CHECK(randn({1}).item() == expected_draw);  // the default generator continues where it was saved
  CHECK(state_value(loaded.extra, "epoch", "test") == 4.0);
  CHECK(loaded.metadata["note"] == "test");
  CHECK(loaded.metadata["format"] == "mixgrad-checkpoint");
}

TEST_CASE("checkpoints: a file that does not fit changes nothing, even when only the optimizer is wrong") {
  TempDir tmp;
  auto net = make_net();
  optim::SGD sgd(net->parameters(), {.lr = 0.01, .momentum = 0.9});
  amp::GradScaler scaler;
  train_steps(*net, sgd, scaler, 2);
  train::save_checkpoint(tmp / "sgd.safetensors", {net.get(), &sgd, &scaler});
  train::save_checkpoint(tmp / "model.safetensors", {net.get(), nullptr, nullptr});

  auto other = make_net();
  optim::Adam adam(other->parameters(), {.lr = 1e-3});
  amp::GradScaler other_scaler;
  train_steps(*other, adam, other_scaler, 1);
  const auto model_before = values_of(other->state_dict());
  const auto adam_before = values_of(adam.state_dict());
  // The model part fits and is written first; the optimizer part (SGD's momentum, not Adam's
  // moments) is refused, and the model is put back.
  CHECK_THROWS_AS(train::load_checkpoint(tmp / "sgd.safetensors", {other.get(), &adam, &other_scaler}), Error);
  CHECK(values_of(other->state_dict()) == model_before);
  CHECK(values_of(adam.state_dict()) == adam_before);
  // A model-only file cannot restore an optimizer; a plain safetensors file is not a checkpoint.
  check_error(
      [&] {
        train::load_checkpoint(tmp / "model.safetensors", {other.get(), &adam, nullptr});
      },
      "holds no optimizer state");
  data::save_safetensors(tmp / "plain.safetensors", {{"w", ones({2})}});
  check_error(
      [&] {
        train::load_checkpoint(tmp / "plain.safetensors", {other.get(), nullptr, nullptr});
      },
      "not a mixgrad checkpoint");
  CHECK(values_of(other->state_dict()) == model_before);
}

TEST_CASE("checkpoint v1: a float16_master run written before issue 17 resumes step for step") {
  nn::Sequential model(std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Linear>(3, 2));
  const amp::Recipe recipe = amp::Recipe::parse("float16_master");
  model.to(recipe.parameter_dtype);
  const std::vector<Tensor> parameters = model.parameters();
  auto optimizer = std::make_unique<optim::AdamW>(
      parameters, optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1, .master_weights = recipe.master_weights});
  amp::GradScaler scaler = recipe.make_scaler();
  amp::ScaleMonitor monitor(scaler);
  const train::LoadedCheckpoint loaded = train::load_checkpoint(
      kFixture, {.model = &model, .optimizer = optimizer.get(), .scaler = &scaler, .monitor = &monitor});
  CHECK(optimizer->step_count() == 3);
  CHECK(monitor.steps() == 3);  // the counters the GradScaler saved before issue 17 reach the monitor
  CHECK(monitor.skipped_steps() == 0);
  CHECK(scaler.get_scale() == 131072.0);
  CHECK(scaler.options().rule.growth_interval == 2);  // the scaler's settings come from the file

  optimizer->zero_grad();
  Tensor loss;
  {
    Autocast region = recipe.autocast();
    loss = cross_entropy(model.forward(loaded.extra.at("batch.x")), loaded.extra.at("batch.labels"));
  }
  backward(scaler.scale(loss));
  CHECK(scaler.step(*optimizer));
  scaler.update();

  for (std::size_t i = 0; i < parameters.size(); ++i) {
    INFO("parameter " << i);
    check_equal(parameters[i], loaded.extra.at(fmt::format("expected.parameter.{}", i)));
  }
  const StateDict state = optimizer->state_dict();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    INFO("master " << i);
    check_equal(state.at(fmt::format("state.{}.master", i)), loaded.extra.at(fmt::format("expected.master.{}", i)));
  }
  CHECK(scaler.get_scale() == loaded.extra.at("expected.scale").item());  // grew: 2 clean steps since
  CHECK(scaler.get_scale() == 262144.0);
}
