// Checkpoints written by an earlier layout keep loading. tests/fixtures/checkpoint_v1_float16_master
// .safetensors was written before issue 17 moved the f32 master weights into the optimizer's state:
// a float16_master run (f16 Linear(4, 3), ReLU, Linear(3, 2); AdamW lr 0.01, weight decay 0.1; a
// dynamic GradScaler with growth_interval 2) after 3 steps, with the batch it trained on and what one
// more step made of it ("extra.expected.*"). Loading it and taking that step must give those values.
#include <fmt/format.h>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

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

TEST_CASE("checkpoint v1: a float16_master run written before issue 17 resumes step for step") {
  nn::Sequential model(std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Linear>(3, 2));
  const amp::Recipe recipe = amp::Recipe::parse("float16_master");
  model.to(recipe.parameter_dtype);
  const std::vector<Tensor> parameters = model.parameters();
  auto optimizer = recipe.make_optimizer(parameters, [](std::vector<Tensor> masters) {
    return std::make_unique<optim::AdamW>(std::move(masters), optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
  });
  amp::GradScaler scaler = recipe.make_scaler();
  const nn::LoadedCheckpoint loaded =
      nn::load_checkpoint(kFixture, {.model = &model, .optimizer = optimizer.get(), .scaler = &scaler});
  CHECK(optimizer->step_count() == 3);
  CHECK(scaler.get_scale() == 131072.0);
  CHECK(scaler.options().growth_interval == 2);  // the scaler's settings come from the file

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
    check_equal(state.at(fmt::format("master.{}", i)), loaded.extra.at(fmt::format("expected.master.{}", i)));
  }
  CHECK(scaler.get_scale() == loaded.extra.at("expected.scale").item());  // grew: 2 clean steps since
  CHECK(scaler.get_scale() == 262144.0);
}
