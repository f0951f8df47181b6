// Checkpoints: everything a training run needs to continue bit for bit, in one safetensors file
// (data/safetensors.h), written atomically (a crash mid-save leaves the previous file whole).
//
//   model.<name>      the model's parameters and buffers, in their dtypes (f16 for the pure and
//                     master recipes: the f32 masters are the optimizer's)
//   optimizer.<key>   the optimizer's state_dict(): step count, learning rates, moments, masters
//   scaler.<key>      the GradScaler's state (scale, counters, its rule) and, with a ScaleMonitor,
//                     the monitor's counters: one state dict (amp/scale_state.h), 0-d f64 each
//   rng.default       mg::default_generator()'s seed and offset as four i32 words (lo, hi, lo, hi):
//                     dropout masks continue where they stopped
//   extra.<key>       the caller's own entries: a data loader's position, an epoch counter, ...
//   metadata          {"format": "mixgrad-checkpoint", "version": "1"} plus the caller's strings
//
//   train::save_checkpoint("run.safetensors", {.model = &model, .optimizer = optimizer.get(), .scaler = &scaler},
//                       {{"data.epoch", state_scalar(epoch)}});
//   StateDict extra = train::load_checkpoint("run.safetensors", {&model, optimizer.get(), &scaler});
//
// Loading checks the whole file against the objects first (every name present, every dtype and
// shape equal); a file that does not fit changes nothing and says which entry is wrong.
// Saving refuses a state whose parameters or optimizer state hold NaN or inf (a diverged run): the
// file at `path`, if any, is left as it was. Tensors on a GPU are copied to the CPU to be written.
// Checkpoints written while a run goes on, every N steps: train/checkpoint_series.h.
#pragma once

#include <map>
#include <string>

#include "amp/grad_scaler.h"
#include "amp/scale_monitor.h"
#include "core/state_dict.h"
#include "data/safetensors.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace mg::train {

// What a checkpoint holds; optimizer, scaler and monitor may be null (a model-only checkpoint).
struct TrainingObjects {
  nn::Module* model = nullptr;
  optim::Optimizer* optimizer = nullptr;
  amp::GradScaler* scaler = nullptr;
  amp::ScaleMonitor* monitor = nullptr;
};

void save_checkpoint(const std::string& path, const TrainingObjects& objects, const StateDict& extra = {},
                     const std::map<std::string, std::string>& metadata = {});

struct LoadedCheckpoint {
  StateDict extra;  // the "extra." entries, prefix removed
  std::map<std::string, std::string> metadata;  // the file's metadata
  std::string path;  // the file it came from
};
// Restores every object given (and the default generator) from `path`. Each entry of `required`
// must be in the file's metadata with that value (the flags a run must have been saved with), or
// the load is an mg::Error naming the key and both values, before anything changes.
LoadedCheckpoint load_checkpoint(const std::string& path, const TrainingObjects& objects,
                                 const std::map<std::string, std::string>& required = {});
// The same from a file already read whole (data::load_safetensors), which is where a damaged file
// is found: train/checkpoint_series.h reads the newest of a series first, then falls back.
LoadedCheckpoint load_checkpoint(const std::string& path, data::SafetensorsFile file, const TrainingObjects& objects,
                                 const std::map<std::string, std::string>& required = {});

}  // namespace mg::train
