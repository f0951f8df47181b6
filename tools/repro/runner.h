// One training run of a repro experiment: a model, a precision variant, SGD (or Adam, Adagrad), and a
// record of what the paper looks at, step by step.
//
// Every run of an experiment shares the seed, so the variants start from the same weights (drawn
// in f32 from Generator(seed), then stored in the variant's dtype) and see the same batches in
// the same order (DataLoader seed = seed). What differs between two runs is the precision only.
//
//   RunConfig config{.variant = variant("V2"), .make_model = mlp_784_256_256_10, .data = fashion,
//                    .steps = 400, .lr = 1e-3};
//   RunResult result = run(config);        // result.log: one StepLog per logged step
//
// The loop is train::Trainer::step, the one `mixgrad train` (tools/train.cpp) runs too: { autocast:
// logits = model(x); loss = cross_entropy } then backward(scaler.scale(loss * loss_multiplier));
// scaler.step(optimizer); scaler.update().
// Two kinds of data: Fashion-MNIST images (classification, scored by test accuracy) and a character
// corpus (next-character prediction, the loss a mean over batch x time as the paper's bigLSTM,
// scored by validation bits per character).
// With --device cuda the model and each batch move to the GPU; the statistics are read back.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/generator.h"
#include "amp/diagnostics.h"
#include "core/tensor.h"
#include "data/text.h"
#include "nn/models.h"
#include "nn/module.h"
#include "optim/schedule.h"
#include "tools/repro/variants.h"
#include "tools/run_setup.h"
#include "train/step_readout.h"

namespace mg::tools::repro {

// The models and the data, shared with mixgrad train (tools/run_setup.h).
using tools::autoencoder;
using tools::char_lstm;
using tools::cnn_of;
using tools::ImageData;
using tools::load_fashion_mnist_subset;
using tools::mlp_784_256_256_10;
using tools::ModelFactory;
using tools::text_subset;
using tools::TextData;
using tools::tiny_gpt;

struct RunConfig {
  Variant variant{};
  ModelFactory make_model{};
  std::shared_ptr<const ImageData> data{};  // an image run, or ...
  std::shared_ptr<const TextData> text{};  // ... a language-model run: exactly one of the two
  std::int64_t context = 64;  // text: characters per training window (T)
  // Images only: train an autoencoder. The targets are the input's own pixels in [0, 1] (the
  // standardization undone), the loss binary cross entropy with logits averaged over batch x pixels
  // (train::Loss::BinaryCrossEntropyWithLogits), and the score the test images' loss.
  bool reconstruct = false;
  std::int64_t steps = 300;
  std::int64_t batch = 128;
  double lr = 0.01;  // the base rate before loss_multiplier's compensation (below)
  // sgd, adam, adamw or adagrad (train::make_optimizer's names, default hyper-parameters but lr); anything
  // but sgd needs loss_multiplier 1.
  std::string optimizer = "sgd";
  double momentum = 0.0;  // SGD's; 0: plain SGD, whose f32 trajectory loss_multiplier leaves unchanged
  optim::Schedule schedule{};  // a factor of the step count; empty: constant
  // The loss is multiplied by this before backward (and before any loss scaling), and the learning
  // rate divided by it: E4's loss x 2^-k with lr x 2^k. For SGD (with or without momentum) the f32
  // trajectory is then the same up to rounding, and exactly the same when it is a power of two.
  double loss_multiplier = 1.0;
  std::int64_t log_every = 10;  // a StepLog every N steps, and at the last step
  std::int64_t eval_every = 0;  // evaluate every N steps (a multiple of log_every); 0: at the end only
  // Score every variant in fp32, as the PyTorch and Keras mixed-precision guides advise: a copy of the
  // model in f32 holding the f32 masters where the optimizer keeps them (the weights PyTorch's AMP
  // model would hold) and the stored weights widened elsewhere (exact), run without autocast. false:
  // in the variant's own precision (its stored weights, its recipe's autocast).
  bool evaluate_in_fp32 = true;
  bool record_activation_gradients = false;  // activation-gradient statistics at logged steps
  bool record_weight_gradients = false;  // per-weight gradient zero fractions at logged steps
  bool record_histograms = false;  // RunResult::histograms, from the logged steps
  // Called at each logged step (1-based) before its forward pass, with the model; what it returns lives
  // until the step's backward pass is done: an op observer that registers itself, say (E9 and E11 watch
  // the Linear layers' operands through tools/repro/linear_operands.h). Empty, or null: nothing watches.
  std::function<std::shared_ptr<void>(const nn::Module& model, std::int64_t step)> watch_logged_step{};
  std::int64_t warmup_steps = 5;  // steps left out of the throughput (first allocations, caches)
  std::uint64_t seed = 0;
  Device device = Device::cpu();
};

// A logged step: its numbers (step counted from 1; the batch's loss before loss_multiplier and
// scaling; the rate after compensation and schedule; the loss scale; skipped), then what the run measured.
struct StepLog : train::StepNumbers {
  // Of the parameter elements this step meant to change, the fraction that kept its stored value
  // (optimizer last_update(): lost / nonzero). NaN for a skipped step or one that changed nothing.
  double lost_update_fraction = 0;
  // Over every activation gradient of the backward pass (the gradients of each op's output, casts
  // excepted), in the dtype it was computed in: the fraction exactly zero, and the fraction that is
  // zero once rounded to f16 (exact zeros included; the same as zero for f16 gradients).
  // NaN unless record_activation_gradients.
  double activation_zero_fraction = 0;
  double activation_zero_in_f16_fraction = 0;
  // The gradient of the logits alone (what cross entropy hands back, scaled by the loss scale): the
  // fraction that is zero once rounded to f16. NaN unless record_activation_gradients.
  double logit_zero_in_f16_fraction = 0;
  // Each activation gradient on its own (RunResult::activation_names order): the fraction zero once
  // in f16. Empty unless record_activation_gradients.
  std::vector<double> activation_zero_in_f16_by_entry{};
  // One per weight (parameter with >= 2 dims, RunResult::weight_names order): the fraction of its
  // gradient (the model's .grad, scaled by the loss scale) that is zero, and zero once in f16.
  // Empty unless record_weight_gradients.
  std::vector<double> weight_grad_zero_fraction{}, weight_grad_zero_in_f16_fraction{};
  // One per weight likewise: how many of its rows (a row: the weights of one output unit, e.g. one
  // class of a classifier's head) have a gradient that is zero in every element.
  std::vector<std::int64_t> weight_grad_zero_rows{};
  std::optional<double> test_accuracy{};  // images: at eval_every steps and at the last
  std::optional<double> validation_bpc{};  // text: bits per character on the validation tokens, likewise
  std::optional<double> test_loss{};  // reconstruction: the mean loss on the test images, likewise
};

// Gradient histograms (amp::GradientStats: log2|g| bins, zeros, what f16 would flush), each merged
// over the logged steps of a run: the data of the paper's Figures 2b and 3.
struct GradientHistograms {
  std::vector<std::string> weight_names{};  // the weights (parameters with >= 2 dims)
  std::vector<amp::GradientStats> weights{};
  // One per op output of the backward pass, casts excepted, in the order backward visits them
  // (the loss first): "linear [64, 256]".
  std::vector<std::string> activation_names{};
  std::vector<amp::GradientStats> activations{};
};

struct RunResult {
  Variant variant{};
  double loss_multiplier = 1;
  std::vector<StepLog> log{};
  std::vector<std::string> weight_names{};  // the model's parameters with >= 2 dims, in model order
  // The activation gradients StepLog::activation_zero_in_f16_by_entry counts, as the backward pass
  // meets them (the loss's input first): "linear [64, 64, 256]". Empty unless record_activation_gradients.
  std::vector<std::string> activation_names{};
  double final_accuracy = 0;  // on data->test_images after the last step (NaN for text)
  double final_bpc = 0;  // on text->validation after the last step (NaN for images)
  double final_test_loss = 0;  // reconstruction: on data->test_images after the last step (else NaN)
  double final_loss = 0;  // mean training loss over the last 10% of logged steps
  std::int64_t skipped_steps = 0;
  std::vector<std::int64_t> skipped_at{};  // the steps the GradScaler skipped
  // (step, scale that step used) at step 1 and wherever the scale changed: the loss-scale trajectory.
  std::vector<std::pair<std::int64_t, double>> scale_trajectory{};
  double final_scale = 1;
  // Sum of lost / sum of nonzero over every step taken on the CPU; on a GPU, where each count is a
  // read (a wait), over the logged steps taken.
  double lost_update_fraction = 0;
  bool diverged = false;  // some training loss was inf or NaN
  double seconds = 0;  // wall time of the run, evaluation included
  double train_seconds = 0;  // of the timed steps: after warmup_steps, none that records statistics, no evaluation
  double items_per_second = 0;  // images or characters per second of train_seconds
  // The most memory the run's allocator held at once during the training steps (on its device,
  // evaluations left out), above what it held before the model was built: weights, master copies,
  // gradients, optimizer state, activations, batches, workspace.
  std::size_t peak_bytes = 0;
  // Held at the last step just before the forward pass, above the same baseline: the model's state
  // (weights, master copies, optimizer state) and the batch; not the gradients, which zero_grad()
  // has dropped and backward brings back (they are in peak_bytes) ...
  std::size_t state_bytes = 0;
  // ... and what the forward pass added to it: the activations the tape keeps for backward. Unlike
  // peak_bytes, no transient workspace is in it.
  std::size_t activation_bytes = 0;
  GradientHistograms histograms{};  // empty unless record_histograms
};

// Trains a fresh model as `config` says and returns the record. Requires make_model, one of data and
// text, steps >= 1, batch >= 1, lr > 0, log_every >= 1, loss_multiplier > 0 (and 1 with Adam); an
// mg::Error says which is wrong.
// A run that diverges is a result (diverged = true), not an error. In a `mixgrad repro` call asked to
// stop it throws Stopped before its next step (stopping.h).
RunResult run(const RunConfig& config);

}  // namespace mg::tools::repro
