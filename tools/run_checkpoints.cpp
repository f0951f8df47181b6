#include "tools/run_checkpoints.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "tools/train.h"

namespace mg::tools {

namespace fs = std::filesystem;

RunCheckpoints::RunCheckpoints(const TrainOptions& options, Identity identity, bool lead)
    : options_(options), identity_(std::move(identity)), lead_(lead) {
  if (options_.save_every > 0 && lead_)
    series_ = std::make_unique<train::CheckpointSeries>(options_.checkpoint_dir,
                                                        train::CheckpointSeriesOptions{.every = options_.save_every,
                                                                                       .keep = options_.keep});
}

RunPosition RunCheckpoints::resume(train::Trainer& trainer,
                                   const std::function<void(const StateDict&)>& load_data_state, std::int64_t total) {
  RunPosition position;
  if (!options_.resume.empty()) {
    const train::LoadedCheckpoint loaded = train::load_latest_checkpoint(options_.resume, trainer.checkpoint_objects(),
                                                                         identity_);
    // Every number of the file is checked before it is used: an edited step (NaN, 1e300, -3, 2.5)
    // must not become a loop that runs for ever, backwards or from a truncated count.
    const std::string owner = fmt::format("mixgrad train --resume {}, extra.*", loaded.path);
    position.step = state_whole_number(loaded.extra, "step", owner, 0, std::int64_t{1} << 53);
    load_data_state(state_subset(loaded.extra, "data."));
    if (loaded.extra.count("recent_losses")) {  // absent from checkpoints written before it was kept
      const Tensor& losses = loaded.extra.at("recent_losses");
      MG_CHECK(losses.dim() == 1 && losses.numel() <= static_cast<std::int64_t>(kFinalLossSteps),
               "{}: entry 'recent_losses' must be 1-D with at most {} losses, got shape {}", owner, kFinalLossSteps,
               losses.shape());
      for (double value : losses.to_vector<double>()) position.recent_losses.push_back(value);
    }
    MG_CHECK(position.step <= total, "mixgrad train: {} is already at step {}, past the {} steps asked for",
             loaded.path, position.step, total);
  }
  if (series_) {
    std::error_code error;
    const bool resumed_here = !options_.resume.empty() && fs::is_directory(options_.resume) &&
                              fs::equivalent(options_.resume, options_.checkpoint_dir, error);
    series_->begin_at(position.step, resumed_here);
  }
  return position;
}

StateDict RunCheckpoints::extra(const RunPosition& position, const StateDict& data_state) const {
  const std::vector<double> losses(position.recent_losses.begin(), position.recent_losses.end());
  StateDict extra{{"step", state_scalar(static_cast<double>(position.step))},
                  {"recent_losses",
                   from_vector(losses, {static_cast<std::int64_t>(losses.size())}, {.dtype = DType::F64})}};
  state_insert(extra, "data.", data_state);
  return extra;
}

void RunCheckpoints::count(double seconds, std::int64_t bytes) {
  ++written_;
  seconds_ += seconds;
  max_seconds_ = std::max(max_seconds_, seconds);
  last_bytes_ = bytes;
}

void RunCheckpoints::save_periodic(train::Trainer& trainer, const RunPosition& position, const StateDict& data_state) {
  if (!lead_ || !series_ || last_series_step_ == position.step) return;
  const train::SavedCheckpoint saved = series_->save(position.step, trainer.checkpoint_objects(),
                                                     extra(position, data_state), identity_);
  last_series_step_ = position.step;
  count(saved.seconds, saved.bytes);
}

void RunCheckpoints::save_file(train::Trainer& trainer, const RunPosition& position, const StateDict& data_state) {
  if (!lead_ || options_.save.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  train::save_checkpoint(options_.save, trainer.checkpoint_objects(), extra(position, data_state), identity_);
  count(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
        static_cast<std::int64_t>(fs::file_size(options_.save)));
}

void RunCheckpoints::save_final(train::Trainer& trainer, const RunPosition& position, const StateDict& data_state) {
  save_periodic(trainer, position, data_state);
  save_file(trainer, position, data_state);
}

std::optional<std::string> RunCheckpoints::save_stopped(train::Trainer& trainer, const RunPosition& position,
                                                        const StateDict& data_state) {
  if (!options_.save.empty()) {
    save_file(trainer, position, data_state);
    return options_.save;
  }
  if (options_.save_every > 0) {
    save_periodic(trainer, position, data_state);
    return options_.checkpoint_dir;
  }
  return std::nullopt;
}

}  // namespace mg::tools
