// An MLP on Fashion-MNIST under any precision recipe, through train::Trainer: the setup and the
// training step that `mixgrad train` and `mixgrad repro` use, in a program of its own.
//
//   build/examples/fashion_mnist                     fp32, 600 steps of SGD with momentum
//   build/examples/fashion_mnist float16_master      f16 weights, f32 masters, dynamic loss scaling
//   build/examples/fashion_mnist <recipe> <steps>    any name of amp::Recipe::names()
//
// Needs the Debian package dataset-fashion-mnist (scripts/deps installs it). About 85% test
// accuracy after 600 steps of batch 128 (a few seconds on one CPU core: 2.4 s on an AMD EPYC with
// AVX-512); the loop written out op by op is examples/mlp_synthetic.cpp.
#include <cstdlib>

#include "mixgrad.h"

using namespace mg;

int main(int argc, char** argv) try {
  const std::string recipe = argc > 1 ? argv[1] : "fp32";
  const std::int64_t steps = argc > 2 ? std::atoll(argv[2]) : 600;
  MG_CHECK(steps >= 1, "fashion_mnist: the number of steps must be >= 1, got '{}'", argv[2]);

  // Pixels standardized as mixgrad train does; the test set scores the model at the end.
  const std::string dir = data::default_fashion_mnist_dir();
  data::LabeledImages train_set = data::load_fashion_mnist(dir, data::Split::Train);
  data::LabeledImages test_set = data::load_fashion_mnist(dir, data::Split::Test);
  train::standardize_pixels_(train_set.images);
  train::standardize_pixels_(test_set.images);
  data::DataLoader loader(train_set.images, train_set.labels, {.batch_size = 128, .seed = 0});

  // The model's parameters take the recipe's dtype; the optimizer keeps masters if the recipe says
  // so; the GradScaler is the recipe's. A step never waits for the device: its numbers (loss, scale,
  // skipped) are read back every 16 steps, all at once, and come with the step that read them.
  Generator generator(0);
  train::Trainer trainer(nn::mlp({784, 256, 256, 10}, generator),
                         {.recipe = amp::Recipe::parse(recipe),
                          .optimizer = {.name = "sgd", .lr = 0.05, .momentum = 0.9}});
  fmt::print("{}\n", trainer.recipe().describe());
  for (std::int64_t step = 1; step <= steps; ++step) {
    const data::Batch batch = loader.next();
    train::StepResult result = trainer.step(batch.inputs, batch.labels);
    if (step == steps) result.read = trainer.read_steps();  // the steps since the last read
    for (const train::StepNumbers& n : result.read)
      if (n.step % 100 == 0 || n.step == steps)
        fmt::print("step {:>4}  loss {:.4f}  scale {:g}  skipped {}\n", n.step, n.loss, n.scale,
                   trainer.monitor().skipped_steps());
  }
  const double accuracy = train::test_accuracy(trainer.model(), test_set.images, test_set.labels, trainer.recipe(),
                                               trainer.device(), 128);
  fmt::print("test accuracy {:.2f}% on {} images\n", 100 * accuracy, test_set.labels.numel());
  return 0;
} catch (const Error& error) {
  fmt::print(stderr, "error: {}\n", error.what());
  return 1;
}
