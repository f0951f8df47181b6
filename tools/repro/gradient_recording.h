// What a logged step of repro::run records beside training (RunConfig's record_* flags): the
// statistics of the backward pass's gradients, the numbers of E3, E4 and E5.
//
// An observer of train::Trainer's step (train/trainer.h), made afresh for each step: during backward
// an amp::GradientRecorder sees every op's output gradient (activation gradients, casts and device
// moves left out); after it, the weights' .grad are read. Into the step's StepLog go the fractions
// zero and zero-in-f16 (RunConfig::record_activation_gradients, record_weight_gradients); into
// RunResult::histograms the log2|g| histograms, merged over the logged steps (record_histograms).
// It only reads: a recorded step trains exactly as an unrecorded one.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "amp/diagnostics.h"
#include "tools/repro/runner.h"
#include "train/trainer.h"

namespace mg::tools::repro {

class GradientRecording : public train::StepObserver {
 public:
  // `weights`: the model's parameters with >= 2 dims, in result.weight_names order. Every step of a
  // run must have the same graph (an mg::Error names the gradient that changed).
  GradientRecording(const RunConfig& c, const std::vector<Tensor>& weights, RunResult& result, StepLog& entry);

  void before_backward() override;
  void after_backward(const optim::Optimizer&) override;

 private:
  void record_activations();
  void record_weights();

  const RunConfig& c_;
  const std::vector<Tensor>& weights_;
  const std::vector<std::string>& names_;
  std::vector<std::string>& activation_names_;
  GradientHistograms& histograms_;
  StepLog& entry_;
  std::optional<amp::GradientRecorder> recorder_;
};

}  // namespace mg::tools::repro
