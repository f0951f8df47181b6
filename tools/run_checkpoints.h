// Where the checkpoints of `mixgrad train` go and come from:
//   --save FILE                   at the end of the run, and when a signal stops it
//   --save-every N                every N steps and at the end, into --checkpoint-dir DIR as
//   --keep K --checkpoint-dir DIR step-<S>.safetensors, the newest K kept (train/checkpoint_series.h)
//   --resume FILE | DIR           a checkpoint, or the newest readable one of a series
// A checkpoint holds the trainer's objects (train/checkpoint.h), and under extra.* where the run
// stands: its step, the losses of its last steps (for the final mean loss) and the data's position.
// In a data-parallel job rank 0 alone writes; every rank reads.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/state_dict.h"
#include "tools/train_options.h"
#include "train/checkpoint_series.h"
#include "train/trainer.h"

namespace mg::tools {

// The flags a checkpoint must have been saved with to be resumed (--data, --model, ...).
using Identity = std::map<std::string, std::string>;

// Where a run stands: step 0, or where --resume's checkpoint left it, with the losses of its last
// steps (carried by checkpoints, for the final mean loss).
struct RunPosition {
  std::int64_t step = 0;
  std::deque<double> recent_losses;
};

class RunCheckpoints {
 public:
  // lead: this process writes (rank 0 of a job).
  RunCheckpoints(const TrainOptions& options, Identity identity, bool lead);

  // --resume: restores the trainer and the data's position; the run's position (step 0 without it).
  // Requires the checkpoint's step <= total.
  RunPosition resume(train::Trainer& trainer, const std::function<void(const StateDict&)>& load_data_state,
                     std::int64_t total);
  // Whether --save-every asks for a checkpoint after `step`.
  bool due(std::int64_t step) const { return series_ && series_->due(step); }
  // The checkpoint of --save-every at the position's step (once per step; not on the other ranks).
  void save_periodic(train::Trainer& trainer, const RunPosition& position, const StateDict& data_state);
  // At the end of the run: the series' last checkpoint (unless that step is written already) and --save.
  void save_final(train::Trainer& trainer, const RunPosition& position, const StateDict& data_state);
  // A stopped run's checkpoint: --save if given, else the series' (unless that step is written
  // already). Returns what --resume should be given, or nothing when no checkpoint was asked for.
  std::optional<std::string> save_stopped(train::Trainer& trainer, const RunPosition& position,
                                          const StateDict& data_state);

  // The checkpoints written so far by this process, and the time they took.
  std::int64_t written() const { return written_; }
  double seconds() const { return seconds_; }
  double max_seconds() const { return max_seconds_; }
  std::int64_t last_bytes() const { return last_bytes_; }

 private:
  StateDict extra(const RunPosition& position, const StateDict& data_state) const;
  void save_file(train::Trainer& trainer, const RunPosition& position, const StateDict& data_state);
  void count(double seconds, std::int64_t bytes);

  const TrainOptions& options_;
  Identity identity_;
  bool lead_;
  std::unique_ptr<train::CheckpointSeries> series_;  // --save-every; null without it
  std::int64_t last_series_step_ = -1;  // the step of the series' newest file written by this run
  std::int64_t written_ = 0, last_bytes_ = 0;
  double seconds_ = 0, max_seconds_ = 0;
};

}  // namespace mg::tools
