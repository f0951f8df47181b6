#include "tools/train.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>

#include <chrono>
#include <algorithm>
#include <cmath>
#include <deque>
#include <fstream>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>

#include "amp/recipe.h"
#include "autograd/ops.h"
#include "core/factory.h"
#include "data/batches.h"
#include "data/idx.h"
#include "data/text.h"
#include "dist/process_group.h"
#include "kernels/gemm.h"
#include "kernels/threads.h"
#ifdef MG_WITH_CUDA
#include "kernels/cuda/runtime.h"
#endif
#include "nn/models.h"
#include "core/test_pause.h"
#include "tools/inspect_plots.h"
#include "tools/progress.h"
#include "tools/run_graph.h"
#include "tools/run_profile.h"
#include "tools/run_checkpoints.h"
#include "tools/run_setup.h"
#include "tools/run_stop.h"
#include "train/stop_signals.h"
#include "train/evaluation.h"
#include "train/precision_inspector.h"
#include "train/trainer.h"

namespace mg::tools {

namespace {

using Clock = std::chrono::steady_clock;

// One source of batches: images and labels, or text windows and next characters.
struct Task {
  std::shared_ptr<nn::Module> model;
  std::function<data::Batch()> next;  // inputs and targets of the next training step
  std::function<StateDict()> data_state;
  std::function<void(const StateDict&)> load_data_state;
  std::function<TrainSummary(TrainSummary, const amp::Recipe&)> evaluate;
  std::int64_t batches_per_epoch = 0;  // 0 for text (random windows)
  std::string unit;
};

// One GPU per rank in a data-parallel job: the rank's place on its node picks it.
Device train_device(const TrainOptions& o) {
  if (o.device != "cuda") return Device::cpu();
  return Device::cuda(dist::launched_by_mpirun() ? dist::local_rank() : 0);
}

DType wire_dtype(const std::string& name) {
  return name == "f16" ? DType::F16 : name == "bf16" ? DType::BF16 : DType::F32;
}

Task image_task(const TrainOptions& o, data::Shard shard) {
  std::shared_ptr<const ImageData> images = load_fashion_mnist_subset(o.subset, o.test_subset);  // 0: every one
  auto loader = std::make_shared<data::DataLoader>(images->train_images, images->train_labels,
                                                   data::DataLoaderOptions{.batch_size = o.batch,
                                                                           .seed = o.seed,
                                                                           .shard = shard});
  Task task;
  task.model = model_kind(o.model).make(0, 0, default_generator());
  task.next = [loader] { return loader->next(); };
  task.data_state = [loader] { return loader->state_dict(); };
  task.load_data_state = [loader](const StateDict& s) { loader->load_state_dict(s); };
  task.batches_per_epoch = loader->batches_per_epoch();
  task.unit = "img";
  task.evaluate = [images, model = task.model, device = train_device(o), batch = o.batch](TrainSummary summary,
                                                                                          const amp::Recipe& recipe) {
    summary.test_accuracy = train::test_accuracy(*model, images->test_images, images->test_labels, recipe, device,
                                                 batch);
    return summary;
  };
  return task;
}

Task text_task(const TrainOptions& o, data::Shard shard) {
  const data::TextCorpus corpus(o.text_file.empty() ? data::kjv_corpus() : data::load_text_file(o.text_file));
  std::shared_ptr<const TextData> text = text_subset(corpus, o.subset > 0 ? o.subset : corpus.train().numel(),
                                                     o.test_subset > 0 ? o.test_subset : corpus.validation().numel());
  auto batcher = std::make_shared<data::TextBatcher>(text->train, o.batch, o.context, o.seed, shard);
  Task task;
  task.model = model_kind(o.model).make(text->vocab, o.context, default_generator());
  task.next = [batcher] {
    data::TextBatch b = batcher->next();
    return data::Batch{b.inputs, b.targets, b.global_rows};
  };
  task.data_state = [batcher] { return batcher->state_dict(); };
  task.load_data_state = [batcher](const StateDict& s) { batcher->load_state_dict(s); };
  task.unit = "char";
  task.evaluate = [text, model = task.model, context = o.context, device = train_device(o)](TrainSummary summary,
                                                                                            const amp::Recipe& recipe) {
    summary.val_bits_per_char = train::bits_per_char(*model, text->validation, context, recipe, device);
    return summary;
  };
  return task;
}

// Stops a run whose loss is not finite when nothing would skip its step: without a loss scaler its
// NaN gradients reach every weight. The steps are read every read_every steps, so the run stops at
// most that many steps after the one that diverged; the step's row is logged first.
void stop_if_diverged(const train::StepNumbers& record, const TrainOptions& o, bool scaled, std::int64_t last_step,
                      MetricsLog& log) {
  if (std::isfinite(record.loss) || scaled) return;
  log.write(record);
  throw Error(fmt::format("mixgrad train: the loss is {} at step {}, and {} has no loss scaler to skip such a step: "
                          "the run diverged (found at step {}: the losses are read every few steps, and the weights "
                          "took the updates of steps {}..{}). Lower --lr (it is {:g}){}",
                          std::fabs(record.loss), record.step, o.precision, last_step, record.step, last_step,
                          record.lr, o.log.empty() ? "" : fmt::format("; {} has every step so far", o.log)));
}

double mean_of(const std::deque<double>& values) {
  double sum = 0;
  for (double value : values) sum += value;
  return values.empty() ? 0.0 : sum / static_cast<double>(values.size());
}

// The host's waits for the GPU so far (kernels/cuda/runtime.h); 0 on the CPU.
std::int64_t host_waits([[maybe_unused]] Device device) {
#ifdef MG_WITH_CUDA
  if (device.is_cuda()) return static_cast<std::int64_t>(cuda::host_waits());
#endif
  return 0;
}

std::int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
}

void print_header(const TrainOptions& o, train::Trainer& trainer, const TrainSummary& summary, std::int64_t step,
                  std::int64_t total) {
  const Device device = trainer.device();
  fmt::print("mixgrad train: {} on {}, {} parameters; {}; steps {}..{} of batch {}\n", o.model, o.data,
             summary.parameters, trainer.recipe().describe(), step, total, o.batch);
  fmt::print("mixgrad train: on {}; {}\n", device,
             device.is_cpu()
                 ? fmt::format("{} thread(s), f32 GEMM by {}", mg::num_threads(), kernels::cpu::gemm_backend())
                 : fmt::format("kernels of kernels/cuda/, f32 GEMMs in {}", o.tf32 ? "TF32" : "f32"));
  if (const optim::UpdateRounding rounding = trainer.optimizer().update_rounding();
      rounding != optim::UpdateRounding::Nearest)
    fmt::print("mixgrad train: each weight update rounded into {} {}\n", trainer.recipe().parameter_dtype,
               rounding == optim::UpdateRounding::Kahan ? "with Kahan's compensation (one more 16-bit value a weight)"
                                                        : fmt::format("stochastically (words from --seed {})", o.seed));
  if (const train::DataParallel* replicas = trainer.data_parallel())
    fmt::print("mixgrad train: data-parallel over {} ranks ({}), {} rows of each batch per rank; gradients "
               "averaged in {} bucket(s) of {} ({} KiB per step)\n",
               summary.ranks, replicas->group().backend(), o.batch / summary.ranks, replicas->last_sync().buckets,
               o.allreduce_dtype, replicas->last_sync().payload_bytes / 1024);
}

// The steps' numbers as they arrive, in batches (train::Trainer reads them every read_every steps, in
// one wait): each is checked for divergence, kept for the final loss, logged and shown.
class StepNumbersSink {
 public:
  StepNumbersSink(const TrainOptions& o, train::Trainer& trainer, RunPosition& position, Progress& progress,
                  MetricsLog& log)
      : o_(o),
        trainer_(trainer),
        position_(position),
        progress_(progress),
        log_(log),
        first_step_(position.step),
        skipped_(trainer.monitor().skipped_steps()) {}  // a resumed run's count so far

  // A step was taken at `seconds` into the run, on `items` examples; its numbers come later.
  void queued(double seconds, std::int64_t items) { queued_.emplace_back(seconds, items); }

  void take(const std::vector<train::StepNumbers>& read) {
    for (const train::StepNumbers& n : read) {
      const auto [seconds, items] = queued_.front();
      queued_.pop_front();
      train::StepNumbers record = n;  // counted from this run's first step, timed
      record.step += first_step_;
      record.seconds = seconds;
      stop_if_diverged(record, o_, trainer_.scaler().is_enabled(), position_.step, log_);
      position_.recent_losses.push_back(n.loss);
      if (position_.recent_losses.size() > kFinalLossSteps) position_.recent_losses.pop_front();
      log_.write(record);
      skipped_ += n.skipped;
      progress_.update(record, items, skipped_);
    }
  }

 private:
  const TrainOptions& o_;
  train::Trainer& trainer_;
  RunPosition& position_;
  Progress& progress_;
  MetricsLog& log_;
  std::int64_t first_step_;  // the Trainer counts its own steps from 1
  std::int64_t skipped_;
  std::deque<std::pair<double, std::int64_t>> queued_;  // seconds and items of each step not yet read
};

// --inspect: the precision inspector, on the rank that writes; none without the flag, so that a run
// without it observes nothing. Its CSV is opened here, before the first step (an mg::Error if it cannot be).
std::unique_ptr<train::PrecisionInspector> make_inspector(const TrainOptions& o, train::Trainer& trainer,
                                                          std::int64_t first_step, bool lead) {
  if (o.inspect.empty() || !lead) return nullptr;
  return std::make_unique<train::PrecisionInspector>(trainer, train::InspectorOptions{.every = o.inspect_every,
                                                                                      .csv_path = o.inspect,
                                                                                      .first_step = first_step});
}

// After the run: the last update's rows, the plots, and the first inf/NaN into the summary.
void finish_inspection(train::PrecisionInspector& inspector, const train::Trainer& trainer, const TrainOptions& o,
                       TrainSummary& summary) {
  inspector.finish();
  const amp::Recipe& recipe = trainer.recipe();
  const bool bf16 = recipe.autocast_dtype.value_or(recipe.parameter_dtype) == DType::BF16;
  const std::vector<std::string> plots = write_inspection_plots(inspector.records(), o.inspect,
                                                                bf16 ? DType::BF16 : DType::F16);
  if (inspector.first_nonfinite()) summary.first_nonfinite = inspector.first_nonfinite()->describe();
  if (!o.quiet)
    fmt::print("mixgrad train: inspected every {} steps: {} rows in {}; plots {}\n", inspector.every(),
               inspector.records().size(), o.inspect, fmt::join(plots, ", "));
}

}  // namespace

TrainSummary train(const TrainOptions& o) {
  // Under mpirun: one rank of a data-parallel job. The ranks first check that they run the same
  // command; then each trains on its shard of every global batch, and rank 0 alone writes.
  std::shared_ptr<dist::ProcessGroup> group;
  if (dist::launched_by_mpirun()) {
    group = dist::init_process_group(train_device(o));
    dist::check_same_on_every_rank("the flags", describe(o));
  }
  const int rank = group ? group->rank() : 0;
  const int ranks = group ? group->size() : 1;
  const bool lead = rank == 0;  // prints, logs, saves and evaluates
  manual_seed(o.seed);  // the model's initialization and dropout draw from the default generator
  Task task = o.data == "text" ? text_task(o, {rank, ranks}) : image_task(o, {rank, ranks});
  kernels::set_allow_tf32(o.tf32);  // read by every GEMM queued from here on (kernels/gemm.h)
  // A scale that keeps collapsing (every step skipped, 100 in a row) ends the run with an error.
  train::Trainer trainer(
      task.model,
      {.recipe = recipe_for(o),
       .optimizer = {.name = o.optimizer,
                     .lr = *o.lr,
                     .momentum = o.momentum,
                     .update_rounding = optim::parse_update_rounding(o.update_rounding),
                     .rounding_seed = o.seed,
                     .state_dtype = o.state_dtype == "f32" ? std::optional<DType>(DType::F32) : std::nullopt},
       .device = train_device(o),
       .monitor = {.error_on_collapse = true},
       .process_group = group,
       .data_parallel = {.bucket_bytes = o.bucket_kb * 1024, .wire_dtype = wire_dtype(o.allreduce_dtype)}});
  const Device device = trainer.device();
  const std::int64_t total = o.steps > 0 ? o.steps : o.epochs * task.batches_per_epoch;
  const Identity identity{{"data", o.data}, {"model", o.model}, {"precision", o.precision}, {"optimizer", o.optimizer}};
  RunCheckpoints checkpoints(o, identity, lead);
  RunPosition position = checkpoints.resume(trainer, task.load_data_state, total);

  TrainSummary summary;
  summary.recipe = o.precision;
  summary.model = o.model;
  summary.data = o.data;
  summary.parameters = trainer.model().parameter_count();
  summary.rank = rank;
  summary.ranks = ranks;
  const bool quiet = o.quiet || !lead;
  if (!quiet) print_header(o, trainer, summary, position.step, total);
  Progress progress(position.step, total, task.unit, trainer.scaler().is_enabled(), quiet);
  MetricsLog log(lead ? o.log : std::string(), o.resume.empty() ? -1 : position.step);
  StepNumbersSink numbers(o, trainer, position, progress, log);
  std::optional<StepGraphDrawing> drawing;  // --graph: the first step as a picture, drawn by rank 0
  if (lead && !o.graph.empty()) drawing.emplace(o, trainer);
  std::unique_ptr<train::PrecisionInspector> inspector = make_inspector(o, trainer, position.step + 1, lead);
  std::optional<train::OpProfile> profile;  // --profile: on the rank that writes
  if (lead && !o.profile.empty()) profile.emplace(train::OpProfileOptions{.device = device});
  auto take = [&](const std::vector<train::StepNumbers>& read) {  // the inspector first: a diverged run stops in take
    if (!inspector) return numbers.take(read);
    inspector->steps_read(read);
    try {
      numbers.take(read);
    } catch (const Error& error) {
      if (!inspector->first_nonfinite()) throw;
      throw Error(fmt::format("{}; first inf/NaN at {}", error.what(), inspector->first_nonfinite()->describe()));
    }
  };
  // From here to the last checkpoint a signal of --stop-signals lets the step it arrives in finish,
  // then stops the run; the evaluation after it ends at a signal as any program does.
  std::optional<train::StopSignals> stop;
  stop.emplace(o.stop_signals.empty() ? std::vector<int>{} : train::parse_signals(o.stop_signals));
  const auto start = Clock::now();
  const std::int64_t waits_before = host_waits(device);
  std::int64_t items = 0;
  while (position.step < total && !stop_agreed(*stop, ranks)) {
    data::Batch batch = task.next();
    // Throws when the scale collapses; null observers are passed over.
    const train::StepResult result = trainer.step(batch, {drawing ? drawing->next(batch) : nullptr, inspector.get(),
                                                          profile ? &*profile : nullptr});
    ++position.step;
    const std::int64_t global_items = batch.labels.numel() / batch.labels.size(0) * batch.global_rows;
    items += global_items;
    numbers.queued(std::chrono::duration<double>(Clock::now() - start).count(), global_items);
    if (const train::DataParallel* replicas = trainer.data_parallel())
      summary.allreduce_wait_seconds += replicas->last_sync().wait_seconds;
    take(result.read);
    test_pause_point("step", position.step);
    if (checkpoints.due(position.step)) {
      take(trainer.read_steps());  // the checkpoint's recent losses include this step's
      checkpoints.save_periodic(trainer, position, task.data_state());
    }
  }
  take(trainer.read_steps());
  if (drawing) drawing->finish();
  if (stop->requested())
    end_stopped_run(o, *stop, trainer, task.data_state(), checkpoints, position, total, ranks, lead, progress, log);
  if (device.is_cuda()) summary.host_waits = host_waits(device) - waits_before;
  progress.finish();
  log.close();
  summary.train_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  summary.items_per_second = summary.train_seconds > 0 ? static_cast<double>(items) / summary.train_seconds : 0;
  summary.steps = position.step;
  if (const train::DataParallel* replicas = trainer.data_parallel())
    summary.allreduce_bytes_per_step = replicas->last_sync().payload_bytes;
  summary.skipped_steps = trainer.monitor().skipped_steps();
  summary.final_scale = trainer.scaler().get_scale();  // 1 when the recipe does not scale
  summary.final_loss = mean_of(position.recent_losses);
  summary.final_loss_steps = static_cast<std::int64_t>(position.recent_losses.size());
  if (inspector) finish_inspection(*inspector, trainer, o, summary);
  if (profile) finish_profile(*profile, o);

  if (!lead) return summary;  // the replicas are rank 0's: it saves and evaluates for all
  checkpoints.save_final(trainer, position, task.data_state());
  stop.reset();  // the default actions again
  summary.checkpoints_written = checkpoints.written();
  summary.checkpoint_seconds = checkpoints.seconds();
  summary.checkpoint_max_seconds = checkpoints.max_seconds();
  summary.checkpoint_bytes = checkpoints.last_bytes();
  summary = task.evaluate(summary, trainer.recipe());
  summary.peak_rss_bytes = peak_rss_bytes();
  return summary;
}

std::string TrainSummary::to_json() const {
  nlohmann::ordered_json j{{"recipe", recipe},
                           {"model", model},
                           {"data", data},
                           {"parameters", parameters},
                           {"steps", steps},
                           {"skipped_steps", skipped_steps},
                           {"final_scale", final_scale},
                           {"final_loss", final_loss},
                           {"final_loss_steps", final_loss_steps},
                           {"ranks", ranks}};
  if (first_nonfinite) j["first_nonfinite"] = *first_nonfinite;
  if (test_accuracy) j["test_accuracy"] = *test_accuracy;
  if (val_bits_per_char) j["val_bits_per_char"] = *val_bits_per_char;
  j["train_seconds"] = train_seconds;
  j["items_per_second"] = items_per_second;
  j["peak_rss_bytes"] = peak_rss_bytes;
  if (host_waits >= 0) j["host_waits"] = host_waits;
  if (checkpoints_written > 0)
    j["checkpoints"] = {{"written", checkpoints_written},
                        {"seconds", checkpoint_seconds},
                        {"max_seconds", checkpoint_max_seconds},
                        {"bytes", checkpoint_bytes}};
  if (ranks > 1) {
    j["allreduce_bytes_per_step"] = allreduce_bytes_per_step;
    j["allreduce_wait_seconds"] = allreduce_wait_seconds;
  }
  return j.dump(2) + "\n";
}

std::string TrainSummary::to_line() const {
  std::string metric = test_accuracy ? fmt::format("test accuracy {:.2f}%", 100 * *test_accuracy)
                                     : fmt::format("val {:.3f} bits/char", val_bits_per_char.value_or(0));
  const std::string saves = checkpoints_written == 0
                                ? std::string()
                                : fmt::format(", {} checkpoint(s) of {:.1f} MiB written in {:.3f} s each at most",
                                              checkpoints_written, static_cast<double>(checkpoint_bytes) / (1 << 20),
                                              checkpoint_max_seconds);
  const std::string nonfinite = first_nonfinite ? "; first inf/NaN at " + *first_nonfinite : std::string();
  return fmt::format("{} {} on {}: {} after {} steps ({} skipped, final scale {:g}), mean loss of the last {} steps "
                     "{:.4f}, {:.1f} s of training{}, peak RSS {:.0f} MiB{}",
                     recipe, model, data, metric, steps, skipped_steps, final_scale, final_loss_steps, final_loss,
                     train_seconds, saves, static_cast<double>(peak_rss_bytes) / (1 << 20), nonfinite);
}

}  // namespace mg::tools
