#include "tools/repro/runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/allocator.h"
#include "data/batches.h"
#include "data/idx.h"
#include "nn/models.h"
#include "tools/repro/gradient_recording.h"
#include "tools/repro/stopping.h"
#include "train/evaluation.h"
#include "train/trainer.h"

namespace mg::tools::repro {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Bytes the allocator of `device` holds now, and the most it held since reset_peak_on(device).
std::size_t allocated_bytes(Device device) { return allocator_for(device).stats_on(device).allocated_bytes; }
std::size_t peak_bytes(Device device) { return allocator_for(device).stats_on(device).peak_allocated_bytes; }
void reset_peak(Device device) { allocator_for(device).reset_peak_on(device); }
// a - b, or 0 when b > a (byte counts are unsigned).
std::size_t above(std::size_t a, std::size_t b) { return a > b ? a - b : 0; }

void check_config(const RunConfig& c) {
  const char* what = "repro::run";
  MG_CHECK(c.make_model && (c.data != nullptr) != (c.text != nullptr),
           "{} ({}): needs make_model and exactly one of "
           "data (images) and text",
           what, c.variant.name);
  MG_CHECK(!c.text || (c.context >= 1 && c.text->train.numel() > c.context && c.text->validation.numel() > c.context),
           "{} ({}): the text's training and validation tokens ({} and {}) must be longer than the context ({})", what,
           c.variant.name, c.text ? c.text->train.numel() : 0, c.text ? c.text->validation.numel() : 0, c.context);
  MG_CHECK(!c.reconstruct || c.data, "{} ({}): reconstruct trains an autoencoder on images; give data", what,
           c.variant.name);
  MG_CHECK(c.optimizer == "sgd" || c.loss_multiplier == 1.0,
           "{} ({}): loss_multiplier ({}) compensates the learning "
           "rate of SGD only; use 1 with {}",
           what, c.variant.name, c.loss_multiplier, c.optimizer);
  MG_CHECK(c.steps >= 1 && c.batch >= 1 && c.log_every >= 1,
           "{} ({}): steps, batch and log_every must be >= 1, got "
           "{}, {}, {}",
           what, c.variant.name, c.steps, c.batch, c.log_every);
  MG_CHECK(c.lr > 0 && c.loss_multiplier > 0 && std::isfinite(c.loss_multiplier),
           "{} ({}): lr and loss_multiplier "
           "must be finite and > 0, got {} and {}",
           what, c.variant.name, c.lr, c.loss_multiplier);
  MG_CHECK(c.eval_every == 0 || c.eval_every % c.log_every == 0,
           "{} ({}): eval_every ({}) must be a multiple of "
           "log_every ({}), so that each evaluation has its StepLog",
           what, c.variant.name, c.eval_every, c.log_every);
}

}  // namespace

namespace {

// Where a run's batches come from: a shuffling DataLoader over images, or random text windows.
// Either way a pair (inputs, targets) on the CPU, the same sequence for every variant.
class Batches {
 public:
  explicit Batches(const RunConfig& c) {
    if (c.data)
      images_.emplace(c.data->train_images, c.data->train_labels,
                      data::DataLoaderOptions{.batch_size = c.batch, .drop_last = true, .seed = c.seed});
    else
      text_.emplace(c.text->train, c.batch, c.context, c.seed);
  }
  data::Batch next() {
    if (images_) return images_->next();
    data::TextBatch b = text_->next();
    return data::Batch{b.inputs, b.targets};
  }

 private:
  std::optional<data::DataLoader> images_;
  std::optional<data::TextBatcher> text_;
};

// The memory of a step just before and after its forward pass (RunResult's state_bytes and
// activation_bytes): what the model's state and the batch hold once zero_grad has dropped the
// gradients, and what the forward adds to it.
class ForwardMemory : public train::StepObserver {
 public:
  explicit ForwardMemory(Device device) : device_(device) {}
  void before_forward() override { before_ = allocated_bytes(device_); }
  void after_forward(const Tensor&) override { after_ = allocated_bytes(device_); }
  std::size_t before() const { return before_; }
  std::size_t after() const { return after_; }

 private:
  Device device_;
  std::size_t before_ = 0, after_ = 0;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Training time, measured over windows of plain steps between two points where the host has waited
// for the device anyway (a read; on the CPU, every step), so that timing adds no wait: a window with
// a recording step, or a warm-up step, is left out.
class StepClock {
 public:
  // Counts a step into the current window. `plain`: it neither records nor warms up. `synced`: the
  // host has just waited for the device, so the window ends here (its time counts if all its steps
  // were plain).
  void count(bool plain, bool synced) {
    ++window_steps_;
    window_plain_ = window_plain_ && plain;
    if (!synced) return;
    if (window_plain_) {
      seconds_ += seconds_since(window_start_);
      steps_ += window_steps_;
    }
    window_steps_ = 0;
    window_plain_ = true;
  }
  // The next window starts now: after a synced step's evaluation and records, which are not training.
  void restart() { window_start_ = std::chrono::steady_clock::now(); }

  double seconds() const { return seconds_; }
  std::int64_t steps() const { return steps_; }

 private:
  std::chrono::steady_clock::time_point window_start_{};
  std::int64_t window_steps_ = 0;
  bool window_plain_ = true;
  double seconds_ = 0;
  std::int64_t steps_ = 0;
};

// The allocator's bytes on `device` now, the baseline of a run's memory figures; its peak restarts.
std::size_t memory_baseline(Device device) {
  const std::size_t bytes = allocated_bytes(device);
  reset_peak(device);
  return bytes;
}

// Same seed, same f32 initial weights and batch order for every variant; the trainer then stores
// them in the variant's dtype. E4's loss multiplier comes with its inverse in the learning rate.
train::Trainer make_trainer(const RunConfig& c) {
  Generator init(c.seed);
  amp::Recipe recipe = c.variant.recipe;
  if (recipe.fp8) recipe.fp8->seed = c.seed;  // FP4's Hadamard signs and stochastic rounding
  return train::Trainer(c.make_model(init), {.recipe = recipe,
                                             .optimizer = {.name = c.optimizer,
                                                           .lr = c.lr / c.loss_multiplier,
                                                           .momentum = c.momentum,
                                                           .update_rounding = c.variant.update_rounding,
                                                           .rounding_seed = c.seed,
                                                           .schedule = c.schedule},
                                             .device = c.device,
                                             .loss_multiplier = c.loss_multiplier,
                                             .scaler = c.variant.scaler,
                                             .monitor = c.variant.monitor,
                                             .loss = c.reconstruct ? train::Loss::BinaryCrossEntropyWithLogits
                                                                   : train::Loss::CrossEntropy});
}

// One run of repro::run, step by step: the trainer, its batches, and the record it fills.
class Training {
 public:
  explicit Training(const RunConfig& c)
      : c_(c), bytes_before_(memory_baseline(c.device)), trainer_(make_trainer(c)), batches_(c) {
    result_.variant = c.variant;
    result_.loss_multiplier = c.loss_multiplier;
    for (const auto& [name, p] : trainer_.model().named_parameters())
      if (p.dim() >= 2) {
        result_.weight_names.push_back(name);
        weights_.push_back(p);
      }
    // An autoencoder's targets: the pixels of its inputs, in [0, 1].
    if (c.reconstruct) test_pixels_ = train::pixels_of(c.data->test_images);
    clock_.restart();  // the first window starts with the first step
  }

  // Step `step` (1-based): train on the next batch, take the numbers read back, time it, count its
  // lost updates, and evaluate and log it where due.
  void step(std::int64_t step) {
    const bool logged = step % c_.log_every == 0 || step == c_.steps;
    const bool evaluated = step == c_.steps || (c_.eval_every > 0 && step % c_.eval_every == 0);
    const bool recording = logged && (c_.record_activation_gradients || c_.record_weight_gradients ||
                                      c_.record_histograms || c_.watch_logged_step);
    StepLog entry;
    entry.step = step;
    entry.activation_zero_fraction = entry.activation_zero_in_f16_fraction = entry.logit_zero_in_f16_fraction = kNaN;
    const train::StepResult stepped = train_on_next_batch(step, recording, entry);
    take(stepped.read);
    if (logged) take(trainer_.read_steps());
    // On the CPU every step is done when step() returns: each one is a window of its own.
    const bool synced = c_.device.is_cpu() || !stepped.read.empty() || logged;
    clock_.count(!recording && step > c_.warmup_steps, synced);
    count_lost_updates(entry, stepped, logged);
    if (evaluated) {  // the evaluation's buffers are not training memory: the peak restarts after it
      train_peak_ = std::max(train_peak_, above(peak_bytes(c_.device), bytes_before_));
      evaluate(entry);
      reset_peak(c_.device);
    }
    if (logged) {
      entry.loss = last_read_.loss;
      entry.lr = last_read_.lr;
      entry.scale = last_read_.scale;
      entry.skipped = last_read_.skipped;
      result_.log.push_back(std::move(entry));
    }
    if (synced) clock_.restart();
  }

  // The record, with what is known only at the end: final scores and loss, the scaler's state,
  // lost updates, throughput and memory.
  RunResult finish() {
    result_.peak_bytes = train_peak_;
    const StepLog& last = result_.log.back();
    result_.final_accuracy = last.test_accuracy.value_or(kNaN);
    result_.final_bpc = last.validation_bpc.value_or(kNaN);
    result_.final_test_loss = last.test_loss.value_or(kNaN);
    const std::size_t tail = std::max<std::size_t>(1, result_.log.size() / 10);
    double sum = 0;
    for (std::size_t i = result_.log.size() - tail; i < result_.log.size(); ++i) sum += result_.log[i].loss;
    result_.final_loss = sum / static_cast<double>(tail);
    result_.skipped_steps = trainer_.monitor().skipped_steps();
    result_.final_scale = trainer_.scaler().get_scale();
    result_.lost_update_fraction = nonzero_ > 0 ? static_cast<double>(lost_) / static_cast<double>(nonzero_) : kNaN;
    result_.train_seconds = clock_.seconds();
    const std::int64_t items_per_step = c_.data ? c_.batch : c_.batch * c_.context;
    result_.items_per_second = clock_.seconds() > 0
                                   ? static_cast<double>(clock_.steps() * items_per_step) / clock_.seconds()
                                   : 0;
    result_.seconds = seconds_since(start_);
    return std::move(result_);
  }

 private:
  // One training step on the next batch, observed by what this step records (into `entry`) and, at
  // the last step, by the memory measurement.
  train::StepResult train_on_next_batch(std::int64_t step, bool recording, StepLog& entry) {
    data::Batch batch = batches_.next();
    const Tensor inputs = batch.inputs.to(c_.device);
    const Tensor targets = (c_.reconstruct ? train::pixels_of(batch.inputs) : batch.labels).to(c_.device);
    GradientRecording recording_observer(c_, weights_, result_, entry);
    const std::shared_ptr<void> watcher = recording && c_.watch_logged_step
                                              ? c_.watch_logged_step(trainer_.model(), step)
                                              : nullptr;  // lives through this step
    std::optional<ForwardMemory> memory;  // measured at the last step
    if (step == c_.steps) memory.emplace(c_.device);
    // Forward and backward queue their GEMMs inside step: V7's f16 accumulation covers both, and
    // nothing else (evaluation keeps the f32 contract).
    const train::StepResult stepped = [&] {
      kernels::GemmAccumulationGuard accumulation(c_.variant.accumulation);
      return trainer_.step(inputs, targets, {recording ? &recording_observer : nullptr, memory ? &*memory : nullptr});
    }();
    if (memory) {
      result_.state_bytes = above(memory->before(), bytes_before_);
      result_.activation_bytes = above(memory->after(), memory->before());
    }
    return stepped;
  }

  // The steps' numbers come back in batches (train::Trainer reads them every read_every steps, in one
  // wait); a logged step reads at once, since it evaluates (and records) anyway.
  void take(const std::vector<train::StepNumbers>& read) {
    for (const train::StepNumbers& n : read) {
      if (n.skipped) result_.skipped_at.push_back(n.step);
      if (result_.scale_trajectory.empty() || result_.scale_trajectory.back().second != n.scale)
        result_.scale_trajectory.emplace_back(n.step, n.scale);
      result_.diverged = result_.diverged || !std::isfinite(n.loss);
      last_read_ = n;
    }
  }

  // Lost updates: on the CPU every step's counts are at hand; on a GPU each count is a read, so they
  // are taken at logged steps only (a sample of the run's steps).
  void count_lost_updates(StepLog& entry, const train::StepResult& stepped, bool logged) {
    entry.lost_update_fraction = kNaN;
    const bool cpu = c_.device.is_cpu();
    const bool skipped = cpu ? stepped.skipped() : logged && last_read_.skipped;
    if ((!cpu && !logged) || skipped) return;
    const kernels::UpdateCount count = trainer_.optimizer().last_update();
    lost_ += count.lost;
    nonzero_ += count.nonzero;
    if (count.nonzero > 0)
      entry.lost_update_fraction = static_cast<double>(count.lost) / static_cast<double>(count.nonzero);
  }

  // Test accuracy or loss (images) or validation bits per character (text) into `entry`.
  void evaluate(StepLog& entry) {
    const bool in_fp32 = c_.evaluate_in_fp32 && c_.variant.recipe.name != "fp32";
    std::shared_ptr<nn::Module> fp32;
    if (in_fp32) {
      Generator unused(c_.seed);  // the weights come from the trained model
      fp32 = c_.make_model(unused);
      fp32->to(c_.device);
      train::load_fp32_(*fp32, trainer_.model(), trainer_.optimizer());
    }
    nn::Module& scored = fp32 ? *fp32 : trainer_.model();
    const amp::Recipe recipe = in_fp32 ? amp::Recipe::parse("fp32") : c_.variant.recipe;
    if (c_.reconstruct)
      entry.test_loss = train::test_loss(scored, c_.data->test_images, test_pixels_,
                                         train::Loss::BinaryCrossEntropyWithLogits, recipe, c_.device);
    else if (c_.data)
      entry.test_accuracy = train::test_accuracy(scored, c_.data->test_images, c_.data->test_labels, recipe, c_.device);
    else
      entry.validation_bpc = train::bits_per_char(scored, c_.text->validation, c_.context, recipe, c_.device);
  }

  const RunConfig& c_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  const std::size_t bytes_before_;  // the allocator's bytes before the model was built
  train::Trainer trainer_;
  Batches batches_;
  RunResult result_;
  std::vector<Tensor> weights_;  // the parameters with >= 2 dims, RunResult::weight_names order
  Tensor test_pixels_;
  train::StepNumbers last_read_;  // the latest step whose numbers have been read
  std::int64_t lost_ = 0, nonzero_ = 0;  // lost updates, summed over the steps counted
  std::size_t train_peak_ = 0;  // the peak over training steps; evaluations are left out
  StepClock clock_;
};

}  // namespace

RunResult run(const RunConfig& c) {
  check_config(c);
  Training training(c);
  for (std::int64_t step = 1; step <= c.steps; ++step) {
    stop_if_requested();
    training.step(step);
    pause_point_after_step(step);
  }
  return training.finish();
}

}  // namespace mg::tools::repro
