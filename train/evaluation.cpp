#include "train/evaluation.h"

#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "data/batches.h"
#include "kernels/elementwise.h"

namespace mg::train {

namespace {

// Eval mode and no tape for its lifetime; train mode again after.
class Scoring {
 public:
  explicit Scoring(nn::Module& model) : model_(model) { model_.eval(); }
  ~Scoring() { model_.train(); }
  Scoring(const Scoring&) = delete;
  Scoring& operator=(const Scoring&) = delete;

 private:
  nn::Module& model_;
  NoGradGuard no_grad_;
};

}  // namespace

void standardize_pixels_(Tensor& images) {
  MG_CHECK(images.dtype() == DType::F32 && images.device().is_cpu() && !images.requires_grad(),
           "train::standardize_pixels_: needs f32 images on the CPU that do not require grad, got {} on {}{}",
           images.dtype(), images.device(), images.requires_grad() ? " requiring grad" : "");
  // mg::sub(x, s) is mg::add(x, -s): the AddScalar kernel; mg::div(x, s) the DivScalar one.
  kernels::unary(kernels::UnaryOp::AddScalar, images, images, {.a = -kPixelMean});
  kernels::unary(kernels::UnaryOp::DivScalar, images, images, {.a = kPixelStd});
}

Tensor pixels_of(const Tensor& images) {
  NoGradGuard no_grad;
  return reshape(add(mul(images, kPixelStd), kPixelMean), {images.size(0), -1});
}

void load_fp32_(nn::Module& fp32_model, const nn::Module& trained, const optim::Optimizer& optimizer) {
  NoGradGuard no_grad;
  StateDict state = trained.state_dict();
  const auto parameters = trained.named_parameters();
  if (optimizer.keeps_master_weights())
    for (std::size_t i = 0; i < parameters.size(); ++i)
      if (const Tensor& master = optimizer.master(i); master.defined()) state[parameters[i].first] = master;
  for (auto& [name, value] : state)
    if (is_floating(value.dtype())) value = value.to(DType::F32);
  // An f32 copy runs no FP8 or FP4: the FP8 recipes' delayed-scaling state and the FP4 recipes' step
  // counts (nn::Linear::enable_fp8's and enable_fp4's buffers) stay behind unless the copy holds them too.
  const StateDict target = fp32_model.state_dict();
  std::erase_if(state, [&](const auto& entry) {
    const bool low_precision_state = entry.first.find("fp8_") != std::string::npos ||
                                     entry.first.find("fp4_") != std::string::npos;
    return low_precision_state && !target.contains(entry.first);
  });
  fp32_model.load_state_dict(state);
}

double test_loss(nn::Module& model, const Tensor& inputs, const Tensor& targets, Loss loss, const amp::Recipe& recipe,
                 Device device, std::int64_t batch) {
  MG_CHECK(batch >= 1 && inputs.size(0) == targets.size(0) && inputs.size(0) >= 1,
           "train::test_loss: needs batch "
           ">= 1 and as many targets as inputs (at least one), got batch {}, inputs {}, targets {}",
           batch, inputs.shape(), targets.shape());
  Scoring scoring(model);
  double sum = 0;
  const std::int64_t n = inputs.size(0);
  for (std::int64_t begin = 0; begin < n; begin += batch) {
    const std::int64_t end = std::min(begin + batch, n);
    Autocast region = recipe.autocast();
    const Tensor value = mean_loss(loss, model(inputs.slice(begin, end).to(device)),
                                   targets.slice(begin, end).to(device));
    sum += value.item() * static_cast<double>(end - begin);
  }
  return sum / static_cast<double>(n);
}

double test_accuracy(nn::Module& model, const Tensor& images, const Tensor& labels, const amp::Recipe& recipe,
                     Device device, std::int64_t batch) {
  MG_CHECK(batch >= 1, "train::test_accuracy: batch must be >= 1, got {}", batch);
  Scoring scoring(model);
  std::int64_t correct = 0;
  const std::int64_t n = images.size(0), chunk = batch;
  for (std::int64_t begin = 0; begin < n; begin += chunk) {
    const std::int64_t end = std::min(begin + chunk, n);
    Tensor logits;
    {
      Autocast region = recipe.autocast();
      logits = model(images.slice(begin, end).to(device));
    }
    const std::vector<std::int32_t> predicted = argmax(logits, 1).to_vector<std::int32_t>();
    const std::int32_t* label = labels.data<std::int32_t>() + begin;
    for (std::size_t i = 0; i < predicted.size(); ++i) correct += predicted[i] == label[i];
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

double bits_per_char(nn::Module& model, const Tensor& tokens, std::int64_t context, const amp::Recipe& recipe,
                     Device device) {
  Scoring scoring(model);
  double nats = 0;
  std::int64_t count = 0;
  for (const data::TextBatch& b : data::sequential_batches(tokens, 64, context)) {
    Autocast region = recipe.autocast();
    const Tensor loss = mean_cross_entropy(model(b.inputs.to(device)), b.targets.to(device));
    nats += loss.item() * static_cast<double>(b.targets.numel());
    count += b.targets.numel();
  }
  return nats / static_cast<double>(count) / std::log(2.0);
}

}  // namespace mg::train
