// train::Trainer, the one setup and step of mixgrad train, mixgrad repro and the examples: its step
// is the loop written out by hand (bit for bit, under every recipe), its setup follows the recipe,
// observers see the phases in order without changing them, and its objects checkpoint and resume.
#include <filesystem>
#include <memory>

#include "tests/testing.h"
#include "tests/trainer_fixtures.h"

using namespace mg;
using namespace mg::testing;

namespace {

// Records the phases it sees, and the first weight's gradient after backward.
struct PhaseLog : train::StepObserver {
  std::vector<std::string> phases;
  Tensor gradient;
  void before_forward() override { phases.push_back("before_forward"); }
  void after_forward(const Tensor& loss) override {
    phases.push_back("after_forward");
    CHECK(loss.dtype() == DType::F32);
  }
  void before_backward() override { phases.push_back("before_backward"); }
  void after_backward(const optim::Optimizer& optimizer) override {
    phases.push_back("after_backward");
    gradient = optimizer.parameters()[0].grad().clone();
  }
};

}  // namespace

TEST_CASE("trainer: a step is the loop written out by hand, bit for bit, under every recipe") {
  const std::vector<Batch> data = batches(6);
  for (const std::string& name : amp::Recipe::names()) {
    INFO(name);
    const amp::Recipe recipe = amp::Recipe::parse(name);
    train::Trainer trainer(small_mlp(), {.recipe = recipe,
                                         .optimizer = {.name = "sgd", .lr = 0.1, .momentum = 0.9},
                                         .scaler = {.init_scale = 1024}});
    // The same by hand: dtype, the recipe's state, optimizer with the recipe's masters, scaler, then the loop.
    std::shared_ptr<nn::Module> model = small_mlp();
    model->to(recipe.parameter_dtype);
    recipe.prepare(*model);
    optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9, .master_weights = recipe.master_weights});
    amp::GradScaler scaler = recipe.make_scaler({.init_scale = 1024});
    for (const Batch& batch : data) {
      const train::StepResult step = trainer.step(batch.x, batch.y);
      sgd.zero_grad();
      Tensor loss;
      {
        Autocast region = recipe.autocast();
        loss = cast(cross_entropy((*model)(batch.x), batch.y), DType::F32);
      }
      const double scale = scaler.get_scale();
      backward(scaler.scale(loss));
      const bool stepped = scaler.step(sgd);
      scaler.update();
      CHECK(step.loss.item() == loss.item());
      CHECK(step.scale() == scale);
      CHECK(step.skipped() == !stepped);
      CHECK(step.lr == 0.1);
    }
    CHECK(bytes_of(trainer.model().parameters()) == bytes_of(model->parameters()));
    CHECK(trainer.optimizer().step_count() == sgd.step_count());
    CHECK(trainer.optimizer().step_count() > 0);
  }
}

TEST_CASE("trainer: the setup follows the recipe; make_optimizer knows four optimizers") {
  train::Trainer master(small_mlp(), {.recipe = amp::Recipe::parse("float16_master"), .optimizer = {.name = "adamw"}});
  CHECK(master.model().parameters()[0].dtype() == DType::F16);
  CHECK(master.optimizer().name() == "optim::AdamW");
  CHECK(master.optimizer().master(0).dtype() == DType::F32);
  CHECK(master.scaler().is_enabled());
  train::Trainer bf16(small_mlp(), {.recipe = amp::Recipe::parse("mixed_bfloat16"), .optimizer = {.name = "adam"}});
  CHECK(bf16.model().parameters()[0].dtype() == DType::F32);
  CHECK_FALSE(bf16.optimizer().master(0).defined());
  CHECK_FALSE(bf16.scaler().is_enabled());
  train::Trainer adagrad(small_mlp(),
                         {.recipe = amp::Recipe::parse("float16_master"), .optimizer = {.name = "adagrad", .lr = 0.2}});
  CHECK(adagrad.optimizer().name() == "optim::Adagrad");
  CHECK(adagrad.optimizer().lr() == 0.2);
  CHECK(adagrad.optimizer().master(0).dtype() == DType::F32);
  check_error([] { train::make_optimizer({.name = "lamb"}, {ones({2}, {.requires_grad = true})}, false); },
              "unknown optimizer 'lamb'; choose one of sgd, adam, adamw, adagrad");
  auto scheduled = train::make_optimizer({.lr = 0.5, .schedule = optim::step_decay(1, 0.5)},
                                         {ones({2}, {.requires_grad = true})}, false);
  CHECK(scheduled->lr() == 0.5);
  check_error([] { train::Trainer(small_mlp(), {.loss_multiplier = 0.0}); }, "loss_multiplier must be finite and > 0");
}

TEST_CASE("trainer: observers see the phases in order; the gradients they see carry the scale and the multiplier") {
  const std::vector<Batch> data = batches(1);
  train::Trainer plain(small_mlp(), {.recipe = amp::Recipe::parse("fp32")});
  PhaseLog plain_log;
  plain.step(data[0].x, data[0].y, {&plain_log});
  CHECK(plain_log.phases ==
        std::vector<std::string>{"before_forward", "after_forward", "before_backward", "after_backward"});
  // A static scale of 2^10 and a multiplier of 2^3, in f32: powers of two, so the gradient the
  // observer sees is the plain one times 2^13 exactly.
  amp::Recipe scaled_recipe = amp::Recipe::parse("fp32");
  scaled_recipe.loss_scaling = amp::LossScaling::Static;
  scaled_recipe.static_scale = 1024;
  train::Trainer scaled(small_mlp(), {.recipe = scaled_recipe, .loss_multiplier = 8.0});
  PhaseLog scaled_log;
  scaled.step(data[0].x, data[0].y, {&scaled_log});
  CHECK(scaled.scaler().get_scale() == 1024);
  check_close(scaled_log.gradient, mul(plain_log.gradient, 8.0 * 1024), 0.0, 0.0);
}

TEST_CASE("trainer: an observer that throws after the forward stops the step; nothing has changed") {
  struct Stop : train::StepObserver {
    void after_forward(const Tensor&) override { throw Error("stop"); }
  } stop;
  const std::vector<Batch> data = batches(1);
  train::Trainer trainer(small_mlp(), {.recipe = amp::Recipe::parse("float16_master")});
  const auto before = bytes_of(trainer.model().parameters());
  check_error([&] { trainer.step(data[0].x, data[0].y, {&stop}); }, "stop");
  CHECK(tape_size() == 0);  // the step cleared what its forward pass recorded
  CHECK(bytes_of(trainer.model().parameters()) == before);
  CHECK(trainer.optimizer().step_count() == 0);
  CHECK(trainer.monitor().steps() == 0);
}

TEST_CASE("trainer: checkpoint_objects save and restore a run that continues bit for bit") {
  const std::vector<Batch> data = batches(6);
  const auto path = std::filesystem::temp_directory_path() / "mixgrad_test_trainer.safetensors";
  const train::TrainerOptions options{.recipe = amp::Recipe::parse("float16_master"),
                                      .optimizer = {.name = "adam", .lr = 1e-2},
                                      .scaler = {.rule = {.growth_interval = 2}}};
  train::Trainer straight(small_mlp(), options);
  for (int i = 0; i < 3; ++i) straight.step(data[i].x, data[i].y);
  train::save_checkpoint(path.string(), straight.checkpoint_objects());
  for (int i = 3; i < 6; ++i) straight.step(data[i].x, data[i].y);

  train::Trainer resumed(small_mlp(), options);
  train::load_checkpoint(path.string(), resumed.checkpoint_objects());
  CHECK(resumed.monitor().steps() == 3);
  for (int i = 3; i < 6; ++i) resumed.step(data[i].x, data[i].y);
  CHECK(bytes_of(resumed.model().parameters()) == bytes_of(straight.model().parameters()));
  CHECK(resumed.scaler().get_scale() == straight.scaler().get_scale());
  CHECK(resumed.monitor().steps() == straight.monitor().steps());
  std::filesystem::remove(path);
}
