// PrecisionInspector: every N steps, how each layer's tensors fare in f16, bf16, E4M3 and E5M2.
//
// A Trainer observer (train/trainer.h). On every `every`-th step (the first step, then 1 + every,
// 1 + 2 every, ...) it summarises, per layer (a module's scope: "3", "blocks.0.attention"), five kinds
// of tensor with amp::precision_stats (amp/precision_stats.h): the share of values zero, and per
// format flushed to zero, subnormal, overflowing; amax; the log2 histogram:
//
//   activation       the layer's output: the last op recorded in its scope (or a scope inside it);
//                    nn::Module::operator() opens the scope
//   activation_grad  the gradient of that output, as backward hands it on: the first gradient
//                    backward computes in the layer's scope, which is its output's (the tape runs in
//                    reverse); still multiplied by the loss scale, as it is stored
//   weight           the layer's parameters (weight and bias together), as stored
//   weight_grad      their .grad after backward, before the GradScaler unscales them (stored, scaled)
//   update           the change the optimizer step made to what it updates (the f32 master where it
//                    keeps one, else the parameter), and `lost`: of the elements with a non-zero
//                    gradient, the share that kept its value (amp::lost_updates). The parameters are
//                    copied to the host after backward of an inspected step only, and compared at
//                    the next step's start (or finish()), which reads them again: on a GPU, that step
//                    waits for the device once more. A step the scaler skipped has no update row.
// Each inspected step appends one CSV row per layer and kind to options.csv_path, written as it goes.
// What an inspected step judges is held until after backward and read then, on a GPU in one transfer
// (with one more for the optimizer's step count, and one at the next step for the updated parameters).
//
// Skipped steps. With options.trace_nonfinite, every step (not only the inspected ones) runs under an
// amp::NonfiniteTrace: a flag per op on the device, no host wait. steps_read() takes the StepNumbers
// the Trainer read (StepResult::read, Trainer::read_steps()) and, for each step skipped or with a
// non-finite loss, reads that step's flags (one transfer) and keeps the first op that made an inf/NaN.
// That is the one cost on steps that are neither inspected nor right after one: on the CPU one pass over
// each op's output, on a GPU two small kernels per op and one join per step, and no host wait.
//
//   train::PrecisionInspector inspector(trainer, {.every = 50, .csv_path = "inspect.csv"});
//   for (...) {
//     train::StepResult step = trainer.step(batch, {&inspector});
//     inspector.steps_read(step.read);
//   }
//   inspector.steps_read(trainer.read_steps());
//   inspector.finish();                      // the last inspected step's update rows
//   if (inspector.first_nonfinite()) fmt::print("{}\n", inspector.first_nonfinite()->describe());
//
// Off, there is no inspector: nothing is observed and a step costs what it did (bench/train_step.cpp).
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <vector>

#include "amp/nonfinite_trace.h"
#include "amp/precision_stats.h"
#include "train/trainer.h"

namespace mg::train {

enum class TensorKind { Activation, ActivationGrad, Weight, WeightGrad, Update };
inline constexpr int kTensorKinds = 5;
const char* kind_name(TensorKind kind);  // "activation", "activation_grad", "weight", "weight_grad", "update"

struct InspectorOptions {
  std::int64_t every = 100;  // steps between inspections, >= 1
  std::string csv_path = {};  // where the rows go ("": kept in records() only)
  bool trace_nonfinite = true;  // name the first inf/NaN op of each skipped step
  std::int64_t first_step = 1;  // the number of the first step observed (a resumed run's next step)
};

// One row: a layer's tensors of one kind at one step.
struct LayerRecord {
  std::int64_t step = 0;
  std::string layer = {};
  TensorKind kind = TensorKind::Activation;
  DType dtype = DType::F32;  // the tensor's (the first one's, for a layer's parameters)
  amp::PrecisionStats stats = {};
  std::optional<amp::LostUpdates> lost = std::nullopt;  // update rows only
};

class PrecisionInspector : public StepObserver, public OpObserver {
 public:
  // Watches `trainer`'s model and optimizer; the FP8 shares use the recipe's FP8 margin and
  // power-of-two rule where it has FP8 options. An mg::Error, before any step, when every < 1 or
  // the CSV cannot be written.
  PrecisionInspector(Trainer& trainer, InspectorOptions options);
  ~PrecisionInspector() override;
  PrecisionInspector(const PrecisionInspector&) = delete;
  PrecisionInspector& operator=(const PrecisionInspector&) = delete;

  void before_forward() override;
  void after_forward(const Tensor& loss) override;
  void after_backward(const optim::Optimizer& optimizer) override;

  // The steps the Trainer read back: each skipped one (or with a non-finite loss) has its first
  // inf/NaN op named; the flags of all of them are then dropped.
  void steps_read(const std::vector<StepNumbers>& read);
  // The last inspected step's update rows, if its update has happened since; flushes the CSV.
  void finish();

  const std::vector<LayerRecord>& records() const { return records_; }
  // The first op to make an inf/NaN, of the first skipped step read so far; and every skipped
  // step's (the first 100).
  const std::optional<amp::NonfiniteOp>& first_nonfinite() const { return first_nonfinite_; }
  const std::vector<amp::NonfiniteOp>& nonfinite_steps() const { return nonfinite_; }
  std::int64_t every() const { return options_.every; }

  void forward(const char* op, const std::string& scope, const std::vector<Tensor>& inputs,
               const Tensor& output) override;
  void backward(const char* op, const std::string& scope, const Tensor& grad_output, const Grads& grads) override;

 private:
  struct Snapshot {  // what one parameter's update is measured against: before the step
    std::vector<double> target;  // the master where there is one, else the parameter
    std::vector<double> gradient;  // the .grad the step read (zeros where it had none)
  };
  std::int64_t step_number() const { return seen_ + options_.first_step - 1; }
  void add(const std::string& layer, TensorKind kind, DType dtype, const amp::PrecisionStats& stats,
           std::optional<amp::LostUpdates> lost = std::nullopt);
  void record_updates();  // the pending snapshot against the parameters now
  void stop_observing();

  Trainer& trainer_;
  InspectorOptions options_;
  amp::Fp8Judging fp8_;
  std::vector<std::string> parameter_layers_;  // per optimizer parameter: its layer
  std::ofstream csv_;
  std::optional<amp::NonfiniteTrace> trace_;
  std::int64_t seen_ = 0;  // steps begun
  bool inspecting_ = false;  // this step is inspected
  bool observing_ = false;  // registered as an op observer
  // This step's layers in forward order, each with its output so far (the last op in its subtree).
  std::vector<std::string> layer_order_;
  std::map<std::string, Tensor> layer_outputs_;
  struct Held {  // a tensor of this step, judged after backward
    std::string layer;
    TensorKind kind;
    Tensor tensor;
  };
  std::vector<Held> held_;
  std::map<std::string, bool> gradient_seen_;  // the layers whose output gradient was recorded
  std::vector<Snapshot> pending_;  // per optimizer parameter, of the last inspected step; empty: none
  std::int64_t pending_step_ = 0, pending_count_ = 0;  // its step, and the optimizer's step count then
  std::vector<LayerRecord> records_;
  std::optional<amp::NonfiniteOp> first_nonfinite_;
  std::vector<amp::NonfiniteOp> nonfinite_;
};

}  // namespace mg::train
