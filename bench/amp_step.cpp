// bench/amp_step: one training step of a 784-256-256-10 MLP under each precision recipe, in one run.
//
//   build/bench/amp_step                 batches 128 and 512
//   build/bench/amp_step 64 256          chosen batch sizes
//
// A step is what examples/mlp_synthetic.cpp does: forward under the recipe's autocast region,
// cross_entropy, backward of the scaled loss, GradScaler::step (fused unscale + inf check, then
// SGD with momentum), update. The recipes are interleaved in every repetition so that a noisy
// machine slows them alike; each warms up for 3 steps, then runs ~0.5 s; the median is reported,
// with the ratio to fp32. On a CPU there is no f16 arithmetic unit to win from: the f16 GEMM
// widens its operands to f32 (kernels/cpu/gemm.cpp), so the ratio measures what mixed precision
// costs here (casts, the scaler's pass, the f32 master copy), not what it gains on a GPU.
// Threads: mixgrad's pool at its default (every core); MG_NUM_THREADS=1 gives per-core figures.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

#include "bench/machine.h"
#include "bench/timing.h"
#include "mixgrad.h"

namespace {

using namespace mg;
using bench::Clock;

struct Trainer {
  amp::Recipe recipe;
  std::vector<Tensor> parameters;
  std::unique_ptr<optim::Optimizer> optimizer;
  amp::GradScaler scaler;
  Tensor x, labels;

  Trainer(const std::string& name, std::int64_t batch)
      : recipe(amp::Recipe::parse(name)),
        parameters(make_parameters()),
        optimizer(make_optimizer(recipe, parameters)),
        scaler(recipe.make_scaler()) {
    Generator generator(1);
    x = randn({batch, 784}, generator);
    labels = randint(0, 10, {batch}, generator);
  }

  static std::vector<Tensor> make_parameters() {
    Generator generator(0);
    std::vector<Tensor> p;
    const std::int64_t sizes[] = {784, 256, 256, 10};
    for (int layer = 0; layer < 3; ++layer) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(sizes[layer]));
      p.push_back(uniform({sizes[layer + 1], sizes[layer]}, -bound, bound, generator).set_requires_grad(true));
      p.push_back(zeros({sizes[layer + 1]}, {.requires_grad = true}));
    }
    return p;
  }

  static std::unique_ptr<optim::Optimizer> make_optimizer(const amp::Recipe& recipe, std::vector<Tensor>& p) {
    recipe.cast_parameters(p);
    return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.01,
                                                             .momentum = 0.9,
                                                             .master_weights = recipe.master_weights});
  }

  void step() {
    optimizer->zero_grad();
    Tensor loss;
    {
      Autocast region = recipe.autocast();
      Tensor h = x;
      for (std::size_t layer = 0; layer < 3; ++layer) {
        h = linear(h, parameters[2 * layer], parameters[2 * layer + 1]);
        if (layer < 2) h = relu(h);
      }
      loss = cross_entropy(h, labels);
    }
    backward(scaler.scale(loss));
    scaler.step(*optimizer);
    scaler.update();
  }
};

}  // namespace

// The whole body is a try block: an mg::Error (a bad MG_GEMM) ends the run with its message and status 1.
int main(int argc, char** argv) try {
  std::vector<std::int64_t> batches{128, 512};
  if (argc > 1) {
    batches.clear();
    for (int i = 1; i < argc; ++i) batches.push_back(std::atoll(argv[i]));
  }
  const std::vector<std::string> recipes{"fp32", "mixed_float16", "mixed_bfloat16", "float16_master", "float16_pure"};
  fmt::print("{}\n", bench::machine_lines());
  fmt::print("784-256-256-10 MLP training step, SGD with momentum; median ms per step (ratio to fp32)\n");
  for (std::int64_t batch : batches) {
    std::vector<std::unique_ptr<Trainer>> trainers;
    for (const std::string& name : recipes) trainers.push_back(std::make_unique<Trainer>(name, batch));
    for (auto& trainer : trainers)
      for (int i = 0; i < 3; ++i) trainer->step();
    std::vector<std::vector<double>> times(trainers.size());
    const auto start = Clock::now();
    while (std::chrono::duration<double>(Clock::now() - start).count() < 0.5 * static_cast<double>(trainers.size()) ||
           times[0].size() < 10) {
      for (std::size_t i = 0; i < trainers.size(); ++i) {
        const auto begin = Clock::now();
        trainers[i]->step();
        times[i].push_back(std::chrono::duration<double, std::milli>(Clock::now() - begin).count());
      }
    }
    fmt::print("batch {:>4} ({} runs each):", batch, times[0].size());
    const double base = bench::median(times[0]);
    for (std::size_t i = 0; i < trainers.size(); ++i)
      fmt::print("  {} {:.3f} ms ({:.2f}x)", recipes[i], bench::median(times[i]), bench::median(times[i]) / base);
    fmt::print("\n");
  }
  return 0;
} catch (const mg::Error& error) {
  fmt::print(stderr, "error: {}\n", error.what());
  return 1;
}
