// Trainer: one model made ready for a precision recipe, and its training step. The one setup and
// step that `mixgrad train` (tools/train.cpp), `mixgrad repro` (tools/repro/runner.cpp) and
// examples/fashion_mnist.cpp share; examples/mlp_synthetic.cpp writes the same loop out by hand.
//
//   auto model = std::shared_ptr<nn::Module>(nn::mlp({784, 256, 256, 10}));
//   train::Trainer trainer(model, {.recipe = amp::Recipe::parse("float16_master"),
//                                  .optimizer = {.name = "sgd", .lr = 0.1, .momentum = 0.9}});
//   for (...) {
//     train::StepResult step = trainer.step(images, labels);    // a batch on the CPU; no wait
//     for (const train::StepNumbers& n : step.read)             // every 16th step: the last 16, read at once
//       fmt::print("step {} loss {}  scale {}\n", n.step, n.loss, n.scale);
//   }
//   trainer.read_steps();                                        // the steps since the last read
//
// The setup, in the order it must happen:
//   1. the model's parameters take the recipe's dtype (f16 for float16_master), then move to the device;
//      data-parallel, rank 0's parameters and buffers are then broadcast to every rank;
//   2. the optimizer is built over them, with f32 masters where the recipe keeps them;
//   3. the GradScaler the recipe asks for (dynamic, static S, or disabled), and its ScaleMonitor.
// One step (step()), the five lines of every mixed-precision step:
//   optimizer.zero_grad()
//   { Autocast region of the recipe:  loss = mean loss (options.loss) of model(inputs), in f32 }
//   backward(scaler.scale(loss * loss_multiplier))
//   scaler.step(optimizer)          the check, then the fused update that skips on inf/NaN
//   scaler.update()                 backoff or growth (and the monitor's limits), on the device
// and the step's loss, scale and flag are queued where they are (train/step_readout.h). Nothing in a
// step waits for a GPU: every options.read_every steps the queued steps are read in one transfer and
// the monitor observes them (its counters, history and collapse alarm), so the alarm, and a caller's
// check of the losses, come at most read_every - 1 steps late.
// Data-parallel (options.process_group set, train/data_parallel.h): the setup ends by broadcasting
// rank 0's weights and hands the group to the GradScaler; each rank's step runs on its shard of the
// global batch, its loss is the global batch's mean, and backward's gradients are averaged over the
// ranks (bucket by bucket, while backward runs) before scaler.step.
// An observer (StepObserver) can watch a step between its phases without changing it: the repro
// runner records gradient statistics and forward memory that way, `mixgrad train --graph` draws a
// step, and the precision inspector (train/precision_inspector.h) reads every layer's values.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include "amp/grad_scaler.h"
#include "amp/recipe.h"
#include "amp/scale_monitor.h"
#include "data/batches.h"
#include "dist/process_group.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/evaluation.h"
#include "train/step_readout.h"

namespace mg::train {

// Which optimizer, with the options mixgrad's programs set.
struct OptimizerSpec {
  std::string name = "sgd";  // "sgd", "adam", "adamw" or "adagrad" (their defaults otherwise: optim/)
  std::optional<double> lr{};  // empty: the optimizer's own default (default_lr)
  double momentum = 0.0;  // SGD's
  // How f16/bf16 parameters without masters (the pure recipes) store updates (optim/optimizer.h).
  optim::UpdateRounding update_rounding = optim::UpdateRounding::Nearest;
  std::uint64_t rounding_seed = 0;  // the stochastic rounding's words
  // Adam's and AdamW's moments (optim/adam.h): the parameter's dtype when empty; f32 beside bf16 weights
  // is Zamirai et al.'s bfloat16_pure. Refused for sgd and adagrad.
  std::optional<DType> state_dtype{};
  optim::Schedule schedule = {};  // a factor of the step count; empty: constant
};

// The learning rate an optimizer takes when none is given, its options' default in optim/ (written
// there once): sgd and adagrad 0.01, adam and adamw 1e-3. An unknown name is an mg::Error.
double default_lr(const std::string& optimizer);

// The named optimizer over `parameters`, keeping f32 masters of f16/bf16 parameters when
// master_weights is set. An unknown name is an mg::Error that lists the known ones.
std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerSpec& spec, std::vector<Tensor> parameters,
                                                 bool master_weights);

struct TrainerOptions {
  amp::Recipe recipe = amp::Recipe::parse("fp32");
  OptimizerSpec optimizer = {};
  Device device = Device::cpu();
  // The loss is multiplied by this before backward (and before any loss scaling); the paper's E4
  // pairs it with a learning rate divided by it. 1 in every ordinary run.
  double loss_multiplier = 1.0;
  // The scaler's rule (scaler.rule: growth, backoff, interval, hysteresis, floor, cap) and init_scale;
  // the recipe sets enabled, dynamic and a static scale.
  amp::GradScalerOptions scaler = {};
  amp::ScaleMonitorOptions monitor = {};
  // What the model is trained to do (train/evaluation.h): classify, or reconstruct its input.
  Loss loss = Loss::CrossEntropy;
  // Data-parallel training over this group (every rank builds its Trainer alike); null: one process.
  std::shared_ptr<dist::ProcessGroup> process_group = nullptr;
  DataParallelOptions data_parallel = {};
  // Steps between reads of the steps' numbers (one host wait on a GPU each). 1 reads every step.
  std::int64_t read_every = 16;
};

// What one step did. Its numbers stay on the device: reading one (loss.item(), scale(), skipped())
// is a wait on a GPU, made only if somebody asks. `read` holds the steps read back in this call.
struct StepResult {
  Tensor loss;  // the batch's mean loss (options.loss), f32, before loss_multiplier and scaling;
      // data-parallel: the mean over the global batch, the same on every rank
  double lr = 0;  // the rate this step used (groups()[0]'s, after the schedule)
  Tensor scale_used;  // the loss scale this step used, f32 [] on the device; undefined without scaling
  Tensor found_inf;  // 1 if the GradScaler skipped the step (an inf/NaN gradient); undefined without
  double scale() const;  // scale_used read back (1 without scaling)
  bool skipped() const;  // found_inf read back (false without scaling)
  // Every read_every-th step: the numbers of the steps since the last read, this one included,
  // oldest first, read in one transfer. Empty on the other steps.
  std::vector<StepNumbers> read;
};

// Hooks into a step. Each may read what it is given; none may change the step.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // The gradients of the last step are dropped (zero_grad); the forward pass comes next.
  virtual void before_forward() {}
  // The batch as the model reads it: on the trainer's device (new tensors where step() moved them).
  virtual void batch_on_device(const Tensor& /*inputs*/, const Tensor& /*targets*/) {}
  // The forward pass is done: `loss` is the f32 loss. Throw to stop before backward.
  virtual void after_forward(const Tensor& /*loss*/) {}
  // Around backward: the gradients exist, still multiplied by the loss scale, when after_backward runs.
  virtual void before_backward() {}
  virtual void after_backward(const optim::Optimizer& /*optimizer*/) {}
  // The optimizer and the scaler are done (or skipped the update): the step is over.
  virtual void after_update() {}
};

class Trainer {
 public:
  // Converts and moves the model's parameters (step 1 above) and builds the optimizer, the scaler
  // and the monitor. The model is shared: evaluation and checkpoints use it too.
  Trainer(std::shared_ptr<nn::Module> model, TrainerOptions options);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One training step on a batch: inputs and targets on any device (they move to the trainer's).
  // Each observer (null ones are passed over) sees every phase, in the order given.
  // A step that throws (out of device memory, an observer that stops it) clears the tape, which
  // frees the activations its forward pass saved, and drops the gradients, then rethrows: the
  // process can go on. An error in the forward pass, in backward or from an observer comes before
  // the update, so the model, the optimizer and the scaler are as they were before the step (step
  // count, scale, queued readings): a step on a smaller batch can follow, and a checkpoint written
  // before loads. An error inside scaler.step() or update() (their few small allocations) may
  // come after some parameters were updated: the scaler starts the next step clean (amp/grad_scaler.h),
  // but to go on bit for bit, load the last checkpoint.
  StepResult step(const Tensor& inputs, const Tensor& targets, std::initializer_list<StepObserver*> observers = {});
  // The same for a batch of a data::DataLoader or TextBatcher. Data-parallel, the batch is this
  // rank's shard and its global_rows weigh it: a shard of n of N rows counts n / N in the mean.
  StepResult step(const data::Batch& batch, std::initializer_list<StepObserver*> observers = {});

  nn::Module& model() { return *model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  amp::GradScaler& scaler() { return scaler_; }
  // The steps queued since the last read, read now (one wait on a GPU) and observed by the monitor,
  // with any that monitor() or checkpoint_objects() read and nobody has taken yet; oldest first.
  std::vector<StepNumbers> read_steps();
  // The monitor, brought up to date: the queued steps are read first (a wait on a GPU, when some
  // are queued); read_steps() still returns them.
  const amp::ScaleMonitor& monitor();
  const amp::Recipe& recipe() const { return options_.recipe; }
  Device device() const { return options_.device; }
  // What a checkpoint (train/checkpoint.h) saves and restores of this run; the monitor brought up to
  // date first, as by monitor().
  TrainingObjects checkpoint_objects();
  // The replicas' synchronisation in data-parallel training; null in one process.
  const DataParallel* data_parallel() const { return data_parallel_.get(); }

 private:
  // take_step, and when it throws the clean-up (clear_tape, zero_grad) before the exception goes on.
  StepResult step_or_clean_up(const Tensor& inputs, const Tensor& targets, std::int64_t global_rows,
                              std::initializer_list<StepObserver*> observers);
  StepResult take_step(const Tensor& inputs, const Tensor& targets, std::int64_t global_rows,
                       std::initializer_list<StepObserver*> observers);
  void observe_queued_steps();  // reads the queue into unread_, the monitor observing each step

  TrainerOptions options_;
  std::shared_ptr<nn::Module> model_;
  // Built before the optimizer: its broadcast of rank 0's weights must come before the f32 masters
  // are copied from them.
  std::unique_ptr<DataParallel> data_parallel_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  amp::GradScaler scaler_;
  amp::ScaleMonitor monitor_;  // watches scaler_ (declared after it, so built after and destroyed before it)
  StepReadout readout_;
  std::vector<StepNumbers> unread_;  // read, observed, not yet handed to the caller
  std::int64_t steps_ = 0;  // steps taken by this Trainer
};

}  // namespace mg::train
