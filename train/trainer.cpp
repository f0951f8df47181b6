#include "train/trainer.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "train/evaluation.h"

namespace mg::train {

namespace {
[[noreturn]] void unknown_optimizer(const std::string& name) {
  throw Error(
      fmt::format("train::make_optimizer: unknown optimizer '{}'; choose one of sgd, adam, adamw, adagrad", name));
}
}  // namespace

double default_lr(const std::string& optimizer) {
  if (optimizer == "sgd") return optim::SgdOptions{}.lr;
  if (optimizer == "adam") return optim::AdamOptions{}.lr;
  if (optimizer == "adamw") return optim::AdamWOptions{}.lr;
  if (optimizer == "adagrad") return optim::AdagradOptions{}.lr;
  unknown_optimizer(optimizer);
}

std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerSpec& spec, std::vector<Tensor> parameters,
                                                 bool master_weights) {
  const double lr = spec.lr ? *spec.lr : default_lr(spec.name);
  const optim::UpdateRounding rounding = spec.update_rounding;
  const std::uint64_t seed = spec.rounding_seed;
  MG_CHECK(!spec.state_dtype || spec.name == "adam" || spec.name == "adamw",
           "train::make_optimizer: a state dtype ({}) is an option of adam and adamw (their moments), not of {}",
           spec.state_dtype.value_or(DType::F32), spec.name);
  std::unique_ptr<optim::Optimizer> optimizer;
  if (spec.name == "sgd")
    optimizer = std::make_unique<optim::SGD>(std::move(parameters), optim::SgdOptions{.lr = lr,
                                                                                      .momentum = spec.momentum,
                                                                                      .master_weights = master_weights,
                                                                                      .update_rounding = rounding,
                                                                                      .rounding_seed = seed});
  else if (spec.name == "adam")
    optimizer = std::make_unique<optim::Adam>(std::move(parameters),
                                              optim::AdamOptions{.lr = lr,
                                                                 .master_weights = master_weights,
                                                                 .update_rounding = rounding,
                                                                 .rounding_seed = seed,
                                                                 .state_dtype = spec.state_dtype});
  else if (spec.name == "adamw")
    optimizer = std::make_unique<optim::AdamW>(std::move(parameters),
                                               optim::AdamWOptions{.lr = lr,
                                                                   .master_weights = master_weights,
                                                                   .update_rounding = rounding,
                                                                   .rounding_seed = seed,
                                                                   .state_dtype = spec.state_dtype});
  else if (spec.name == "adagrad")
    optimizer = std::make_unique<optim::Adagrad>(std::move(parameters),
                                                 optim::AdagradOptions{.lr = lr,
                                                                       .master_weights = master_weights,
                                                                       .update_rounding = rounding,
                                                                       .rounding_seed = seed});
  else
    unknown_optimizer(spec.name);
  if (spec.schedule) optimizer->set_schedule(spec.schedule);
  return optimizer;
}

namespace {

// Step 1 of the setup: the recipe's dtype and state (FP8's amax histories), then the device (before the optimizer, whose state lives
// beside the parameters); data-parallel, then rank 0's weights on every rank. Returns the replicas'
// synchronisation (null in one process).
std::unique_ptr<DataParallel> prepare(nn::Module& model, const TrainerOptions& options) {
  MG_CHECK(options.loss_multiplier > 0.0 && std::isfinite(options.loss_multiplier),
           "train::Trainer: "
           "loss_multiplier must be finite and > 0, got {}",
           options.loss_multiplier);
  model.to(options.recipe.parameter_dtype);
  options.recipe.prepare(model);
  model.to(options.device);
  if (!options.process_group) return nullptr;
  return std::make_unique<DataParallel>(options.process_group, model, options.data_parallel);
}

}  // namespace

Trainer::Trainer(std::shared_ptr<nn::Module> model, TrainerOptions options)
    : options_(std::move(options)),
      model_(std::move(model)),
      data_parallel_(prepare(*model_, options_)),
      optimizer_(make_optimizer(options_.optimizer, model_->parameters(), options_.recipe.master_weights)),
      scaler_(options_.recipe.make_scaler(options_.scaler)),
      monitor_(scaler_, options_.monitor),
      readout_(options_.read_every) {
  scaler_.set_process_group(options_.process_group);
}

double StepResult::scale() const { return scale_used.defined() ? scale_used.item() : 1.0; }
bool StepResult::skipped() const { return found_inf.defined() && found_inf.item() != 0.0; }

void Trainer::observe_queued_steps() {
  if (readout_.empty()) return;
  const std::vector<StepNumbers> read = readout_.read();
  for (const StepNumbers& n : read) {
    unread_.push_back(n);
    // The gradients are still those of the last step taken: only its skip can name them.
    monitor_.record(n.scale, n.skipped, n.step == steps_ ? optimizer_.get() : nullptr);
  }
}

std::vector<StepNumbers> Trainer::read_steps() {
  observe_queued_steps();
  return std::exchange(unread_, {});
}

const amp::ScaleMonitor& Trainer::monitor() {
  observe_queued_steps();
  return monitor_;
}

TrainingObjects Trainer::checkpoint_objects() {
  observe_queued_steps();
  return {model_.get(), optimizer_.get(), &scaler_, &monitor_};
}

StepResult Trainer::step(const Tensor& inputs, const Tensor& targets, std::initializer_list<StepObserver*> observers) {
  return step_or_clean_up(inputs, targets, 0, observers);
}

StepResult Trainer::step(const data::Batch& batch, std::initializer_list<StepObserver*> observers) {
  return step_or_clean_up(batch.inputs, batch.labels, batch.global_rows, observers);
}

StepResult Trainer::step_or_clean_up(const Tensor& inputs, const Tensor& targets, std::int64_t global_rows,
                                     std::initializer_list<StepObserver*> observers) {
  try {
    return take_step(inputs, targets, global_rows, observers);
  } catch (...) {
    // The nodes the forward pass recorded hold its activations, and backward may have made some
    // gradients: neither may outlive a failed step, or the memory that ran out stays taken (and the
    // next backward would walk this step's nodes).
    clear_tape();
    optimizer_->zero_grad();
    throw;
  }
}

StepResult Trainer::take_step(const Tensor& inputs, const Tensor& targets, std::int64_t global_rows,
                              std::initializer_list<StepObserver*> observers) {
  auto notify = [&](auto&& call) {
    for (StepObserver* observer : observers)
      if (observer) call(*observer);
  };
  StepResult result;
  optimizer_->zero_grad();  // drops the gradients: backward brings them back
  notify([](StepObserver& o) { o.before_forward(); });
  Tensor loss;  // this process's mean loss
  {
    // The batch on the trainer's device, dropped after the forward but for what the tape saved.
    const Tensor x = inputs.to(options_.device), y = targets.to(options_.device);
    notify([&](StepObserver& o) { o.batch_on_device(x, y); });
    Autocast region = options_.recipe.autocast();
    loss = cast(mean_loss(options_.loss, (*model_)(x), y), DType::F32);
  }
  // Data-parallel: this rank's rows are `fraction` of the global batch. Its loss times fraction,
  // summed over the ranks, is the global batch's mean; its gradient times fraction * size, averaged
  // over the ranks, is that mean's gradient (fraction * size is 1 when the shards are equal).
  double multiplier = options_.loss_multiplier;
  result.loss = loss;
  if (data_parallel_) {
    const int size = data_parallel_->group().size();
    const double fraction = global_rows > 0 ? static_cast<double>(inputs.size(0)) / static_cast<double>(global_rows)
                                            : 1.0 / size;
    result.loss = data_parallel_->global_mean(loss, fraction);
    multiplier *= fraction * size;
  }
  notify([&](StepObserver& o) { o.after_forward(result.loss); });
  result.lr = optimizer_->lr();
  const Tensor objective = multiplier == 1.0 ? loss : mul(loss, multiplier);
  notify([](StepObserver& o) { o.before_backward(); });
  if (data_parallel_) {
    GradientSync sync(*data_parallel_);
    backward(scaler_.scale(objective));
    sync.finish();
  } else {
    backward(scaler_.scale(objective));
  }
  notify([&](StepObserver& o) { o.after_backward(*optimizer_); });
  {
    const OpSpan span("optimizer step");  // named for a profile (train/op_profile.h): it is no op
    scaler_.step(*optimizer_);
  }
  {
    const OpSpan span("scaler update");
    scaler_.update();
  }
  ++steps_;
  if (scaler_.is_enabled()) {
    result.scale_used = scaler_.last_scale();
    result.found_inf = scaler_.last_found_inf();
  }
  readout_.push(steps_, result.lr, result.loss, result.scale_used, result.found_inf);
  if (readout_.due()) result.read = read_steps();
  notify([](StepObserver& o) { o.after_update(); });
  return result;
}

}  // namespace mg::train
