#include "tools/repro/runner.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "amp/diagnostics.h"
#include "autograd/ops.h"
#include "data/batches.h"
#include "data/idx.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/models.h"
#include "optim/sgd.h"

namespace mg::tools::repro {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Fashion-MNIST's pixel mean and deviation over the training set (tools/train.cpp uses the same).
constexpr double kPixelMean = 0.2860, kPixelStd = 0.3530;

Tensor standardized(const Tensor& images) {
  NoGradGuard no_grad;
  return div(sub(images, kPixelMean), kPixelStd);
}

// Accuracy on the test subset, under the variant's autocast, in chunks that bound the buffers.
double test_accuracy(nn::Module& model, const ImageData& data, const amp::Recipe& recipe, Device device) {
  NoGradGuard no_grad;
  model.eval();
  std::int64_t correct = 0;
  const std::int64_t n = data.test_images.size(0), chunk = 500;
  for (std::int64_t begin = 0; begin < n; begin += chunk) {
    const std::int64_t end = std::min(begin + chunk, n);
    Tensor logits;
    {
      amp::Autocast region = recipe.autocast();
      logits = model(data.test_images.slice(begin, end).to(device));
    }
    const std::vector<std::int32_t> predicted = argmax(logits, 1).to_vector<std::int32_t>();
    const std::int32_t* label = data.test_labels.data<std::int32_t>() + begin;
    for (std::size_t i = 0; i < predicted.size(); ++i) correct += predicted[i] == label[i];
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(n);
}

// Casts only move a gradient between dtypes (their output's gradient is the next op's input
// gradient again), and moves between devices likewise: counting them would count values twice.
bool is_activation(const amp::GradientRecorder::Entry& entry) {
  return entry.op != "cast" && entry.op != "to_device" && entry.stats.count > 1;
}

// zero / count, and (zero + would-flush-in-f16) / count, over the stats given.
std::pair<double, double> zero_fractions(const amp::GradientStats& stats) {
  return {stats.fraction(stats.zero), stats.fraction(stats.zero + stats.f16_flushed)};
}

void check_config(const RunConfig& c) {
  const char* what = "repro::run";
  MG_CHECK(c.make_model && c.data, "{} ({}): needs make_model and data", what, c.variant.name);
  MG_CHECK(c.steps >= 1 && c.batch >= 1 && c.log_every >= 1, "{} ({}): steps, batch and log_every must be >= 1, got "
           "{}, {}, {}", what, c.variant.name, c.steps, c.batch, c.log_every);
  MG_CHECK(c.lr > 0 && c.loss_multiplier > 0 && std::isfinite(c.loss_multiplier), "{} ({}): lr and loss_multiplier "
           "must be finite and > 0, got {} and {}", what, c.variant.name, c.lr, c.loss_multiplier);
  MG_CHECK(c.eval_every == 0 || c.eval_every % c.log_every == 0, "{} ({}): eval_every ({}) must be a multiple of "
           "log_every ({}), so that each evaluation has its StepLog", what, c.variant.name, c.eval_every, c.log_every);
}

}  // namespace

std::shared_ptr<const ImageData> load_fashion_mnist_subset(std::int64_t train_examples, std::int64_t test_examples) {
  MG_CHECK(train_examples >= 1 && test_examples >= 1, "repro::load_fashion_mnist_subset: needs at least one training "
           "and one test image, got {} and {}", train_examples, test_examples);
  const std::string dir = data::default_fashion_mnist_dir();
  data::LabeledImages train = data::load_fashion_mnist(dir, data::Split::Train, train_examples);
  data::LabeledImages test = data::load_fashion_mnist(dir, data::Split::Test, test_examples);
  auto result = std::make_shared<ImageData>();
  result->train_images = standardized(train.images);
  result->train_labels = train.labels;
  result->test_images = standardized(test.images);
  result->test_labels = test.labels;
  return result;
}

std::shared_ptr<nn::Module> mlp_784_256_256_10(Generator& generator) { return nn::mlp({784, 256, 256, 10}, generator); }

ModelFactory deep_tanh_mlp(std::int64_t depth, std::int64_t hidden) {
  MG_CHECK(depth >= 1 && hidden >= 1, "repro::deep_tanh_mlp: depth and hidden must be >= 1, got {} and {}", depth,
           hidden);
  return [depth, hidden](Generator& generator) -> std::shared_ptr<nn::Module> {
    auto model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Flatten>());
    std::int64_t in = 784;
    for (std::int64_t layer = 0; layer < depth; ++layer, in = hidden) {
      model->push_back(std::make_shared<nn::Linear>(in, hidden, true, generator));
      model->push_back(std::make_shared<nn::Tanh>());
    }
    model->push_back(std::make_shared<nn::Linear>(in, 10, true, generator));
    return model;
  };
}

RunResult run(const RunConfig& c) {
  check_config(c);
  const auto start = std::chrono::steady_clock::now();
  const amp::Recipe& recipe = c.variant.recipe;

  // Same seed, same f32 initial weights and batch order for every variant; then the variant's dtype.
  Generator init(c.seed);
  std::shared_ptr<nn::Module> model = c.make_model(init);
  model->to(recipe.parameter_dtype);
  model->to(c.device);
  data::DataLoader loader(c.data->train_images, c.data->train_labels,
                          data::DataLoaderOptions{.batch_size = c.batch, .drop_last = true, .seed = c.seed});
  const double lr = c.lr / c.loss_multiplier;
  auto optimizer = recipe.make_optimizer(model->parameters(), [&](std::vector<Tensor> parameters) {
    return std::make_unique<optim::SGD>(std::move(parameters), optim::SgdOptions{.lr = lr, .momentum = c.momentum});
  });
  if (c.schedule) optimizer->set_schedule(c.schedule);
  amp::GradScaler scaler = c.variant.make_scaler();

  RunResult result;
  result.variant = c.variant;
  result.loss_multiplier = c.loss_multiplier;
  std::vector<Tensor> weights;
  for (const auto& [name, p] : model->named_parameters())
    if (p.dim() >= 2) {
      result.weight_names.push_back(name);
      weights.push_back(p);
    }

  std::int64_t lost = 0, nonzero = 0;
  for (std::int64_t step = 1; step <= c.steps; ++step) {
    const bool logged = step % c.log_every == 0 || step == c.steps;
    const bool evaluated = step == c.steps || (c.eval_every > 0 && step % c.eval_every == 0);
    data::Batch batch = loader.next();
    optimizer->zero_grad();
    Tensor loss;
    {
      amp::Autocast region = recipe.autocast();
      loss = cast(cross_entropy(model->forward(batch.inputs.to(c.device)), batch.labels.to(c.device)), DType::F32);
    }
    StepLog entry{.step = step, .loss = loss.item(), .lr = optimizer->lr(), .scale = scaler.get_scale()};
    Tensor objective = c.loss_multiplier == 1.0 ? loss : mul(loss, c.loss_multiplier);
    if (logged && c.record_activation_gradients) {
      amp::GradientRecorder recorder;  // watches this backward pass only
      backward(scaler.scale(objective));
      amp::GradientStats activations;
      for (const auto& e : recorder.entries())
        if (is_activation(e)) activations.merge(e.stats);
      std::tie(entry.activation_zero_fraction, entry.activation_zero_in_f16_fraction) = zero_fractions(activations);
    } else {
      backward(scaler.scale(objective));
      entry.activation_zero_fraction = entry.activation_zero_in_f16_fraction = kNaN;
    }
    if (logged && c.record_weight_gradients)
      for (const Tensor& w : weights) {
        const auto [zero, zero_in_f16] = w.grad().defined() ? zero_fractions(amp::gradient_stats(w.grad()))
                                                            : std::pair{1.0, 1.0};
        entry.weight_grad_zero_fraction.push_back(zero);
        entry.weight_grad_zero_in_f16_fraction.push_back(zero_in_f16);
      }
    const bool stepped = scaler.step(*optimizer);
    scaler.update();
    entry.skipped = !stepped;
    entry.lost_update_fraction = kNaN;
    if (stepped) {
      const kernels::UpdateCount count = optimizer->last_update();
      lost += count.lost;
      nonzero += count.nonzero;
      if (count.nonzero > 0) entry.lost_update_fraction = static_cast<double>(count.lost) / static_cast<double>(count.nonzero);
    }
    result.diverged = result.diverged || !std::isfinite(entry.loss);
    if (evaluated) entry.test_accuracy = test_accuracy(*model, *c.data, recipe, c.device);
    if (logged) result.log.push_back(std::move(entry));
  }

  result.final_accuracy = result.log.back().test_accuracy.value_or(kNaN);
  const std::size_t tail = std::max<std::size_t>(1, result.log.size() / 10);
  double sum = 0;
  for (std::size_t i = result.log.size() - tail; i < result.log.size(); ++i) sum += result.log[i].loss;
  result.final_loss = sum / static_cast<double>(tail);
  result.skipped_steps = scaler.skipped_steps();
  result.final_scale = scaler.get_scale();
  result.lost_update_fraction = nonzero > 0 ? static_cast<double>(lost) / static_cast<double>(nonzero) : kNaN;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace mg::tools::repro
