// A run's checkpoints while it trains: DIR/step-00000500.safetensors, step-00001000.safetensors, ...
// written every N steps, the newest K kept, so that a preempted or crashed run loses at most N steps.
//
//   train::CheckpointSeries series("run1", {.every = 500, .keep = 2});
//   series.begin_at(step);                              // a fresh run (0), or where a resume started
//   for (...) {
//     trainer.step(batch); ++step;
//     if (series.due(step)) series.save(step, trainer.checkpoint_objects(), extra, metadata);
//   }
//   train::LoadedCheckpoint loaded = train::load_latest_checkpoint("run1", trainer.checkpoint_objects());
//
// Each save is a whole checkpoint (train/checkpoint.h), written atomically; the oldest files beyond
// `keep` are deleted only after the new one is complete, so a crash at any moment leaves at least
// the last complete checkpoint. The step is in the file's name: the newest is the largest step.
// load_latest_checkpoint reads the newest first and falls back to the one before when a file is
// damaged (truncated, overwritten, unreadable), with a warning that names the file and what is wrong.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "train/checkpoint.h"

namespace mg::train {

struct CheckpointSeriesOptions {
  std::int64_t every = 0;  // steps between saves; 0: only when the caller saves
  std::int64_t keep = 2;  // the newest files kept; 0: every one
};

// One checkpoint written: where, at which step, how long it took and how big it is.
struct SavedCheckpoint {
  std::string path;
  std::int64_t step = 0;
  double seconds = 0;
  std::int64_t bytes = 0;
};

class CheckpointSeries {
 public:
  // Creates `directory` if it is missing (its parent must exist). Requires every >= 0, keep >= 0.
  CheckpointSeries(std::string directory, CheckpointSeriesOptions options);

  // Where the run starts. The directory must hold no checkpoint of a later step (another run's, or a
  // future this run will not reach), since it would pass for this run's newest: an mg::Error says
  // so, unless `resumed_here` (the run resumed from this directory and fell back past damaged
  // files): those are then renamed NAME.damaged, out of the series, and a warning names them.
  void begin_at(std::int64_t step, bool resumed_here = false);
  bool due(std::int64_t step) const { return options_.every > 0 && step % options_.every == 0; }
  // Writes DIR/step-S.safetensors (save_checkpoint's rules: atomic, refused if not finite), then
  // deletes the oldest files beyond keep.
  SavedCheckpoint save(std::int64_t step, const TrainingObjects& objects, const StateDict& extra = {},
                       const std::map<std::string, std::string>& metadata = {});

  const std::string& directory() const { return directory_; }
  const CheckpointSeriesOptions& options() const { return options_; }
  // The checkpoints of `directory` (files named step-<digits>.safetensors), oldest first.
  static std::vector<std::pair<std::int64_t, std::string>> list(const std::string& directory);
  // The name of step S's file in `directory`.
  static std::string path_of(const std::string& directory, std::int64_t step);

 private:
  std::string directory_;
  CheckpointSeriesOptions options_;
};

// Loads `path`, a checkpoint file or a series' directory: the newest checkpoint of the series that
// can be read, falling back past damaged ones (a warning for each). load_checkpoint's checks apply;
// a checkpoint that can be read but does not fit the objects or `required` is an error, not a reason
// to fall back. An mg::Error when the directory holds no checkpoint or none can be read.
LoadedCheckpoint load_latest_checkpoint(const std::string& path, const TrainingObjects& objects,
                                        const std::map<std::string, std::string>& required = {});

}  // namespace mg::train
