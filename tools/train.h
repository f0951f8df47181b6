// `mixgrad train`: one training run, from flags to a summary.
//
// The loop is the one of examples/mlp_synthetic.cpp (followed step by step in docs/TOUR.md), with
// real data:
//   batch = loader.next()
//   { autocast region of the recipe:  logits = model(x);  loss = cross_entropy(logits, y) }
//   backward(scaler.scale(loss));  scaler.step(optimizer);  scaler.update()
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "tools/train_options.h"

namespace mg::tools {

// How many of the last steps' losses final_loss averages (one batch's loss is too noisy to report).
inline constexpr std::size_t kFinalLossSteps = 100;

struct TrainSummary {
  std::string recipe, model, data;
  std::int64_t parameters = 0;
  std::int64_t steps = 0;  // steps done in all (including those before a resume)
  std::int64_t skipped_steps = 0;  // steps the GradScaler skipped (inf/NaN gradients)
  double final_scale = 1;
  double final_loss = 0;  // mean training loss of the last kFinalLossSteps steps (fewer in a shorter
      // run), counted across a --resume: a resumed run reports a straight one's
  std::int64_t final_loss_steps = 0;  // how many steps final_loss averages
  std::optional<double> test_accuracy;  // fashion-mnist: on the 10,000 test images
  std::optional<double> val_bits_per_char;  // text: on the whole validation split
  double train_seconds = 0;  // this process's training loop, evaluation excluded
  double items_per_second = 0;  // images or characters per second of training
  std::int64_t peak_rss_bytes = 0;
  int rank = 0, ranks = 1;  // data-parallel: this process's rank and the number of ranks
  double allreduce_wait_seconds = 0;  // data-parallel: rank 0's time waiting for gradient all-reduces
  std::int64_t allreduce_bytes_per_step = 0;  // data-parallel: gradient bytes each rank sends per step
  // --device cuda: how often the training loop made the host wait for the GPU: once per read of the
  // steps' numbers (every 16 steps, and the last), nothing else in steady state. -1 on the CPU.
  std::int64_t host_waits = -1;
  // Checkpoints written (--save-every, --save) and how long they took: their total and the longest,
  // which tells how often --save-every can afford to save, and whether a save fits the time a
  // scheduler leaves between SIGTERM and SIGKILL. checkpoint_bytes: the last one's size.
  std::int64_t checkpoints_written = 0;
  double checkpoint_seconds = 0, checkpoint_max_seconds = 0;
  std::int64_t checkpoint_bytes = 0;
  // --inspect: the first op and layer that made an inf/NaN, of the first skipped step (or step with a
  // non-finite loss); unset without --inspect or when there was none.
  std::optional<std::string> first_nonfinite;

  std::string to_json() const;
  std::string to_line() const;  // the same numbers in one human-readable line
};

TrainSummary train(const TrainOptions& options);

}  // namespace mg::tools
