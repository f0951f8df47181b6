// What a training run shows while it runs, and the per-step CSV log.
//
// On a terminal: one progress bar, redrawn at most ten times a second,
//   [#########...........]  1200/4690  smoothed loss 0.4213  312 img/s  scale 32768  skipped 2  eta 1m52s
// (scale and skipped only when the recipe scales the loss). The smoothed loss is an exponential
// moving average of the steps' losses (weight 0.05 on the newest: one batch's loss is too noisy to
// read); the CSV log has every step's own loss. Not on a terminal (a pipe, CI, a log file): a plain
// line every ~5% of the run, so logs stay readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

#include "train/step_readout.h"

namespace mg::tools {

class Progress {
 public:
  // total: the last step of the run; unit: what throughput counts ("img", "char").
  Progress(std::int64_t first_step, std::int64_t total, std::string unit, bool show_scale, bool quiet);
  // After every step: `items` is how many examples the step consumed.
  void update(const train::StepNumbers& record, std::int64_t items, std::int64_t skipped_total);
  void finish();  // ends the bar's line

 private:
  std::string eta_text(const train::StepNumbers& record) const;

  std::int64_t first_step_, total_;
  std::string unit_;
  bool show_scale_, quiet_, terminal_;
  std::int64_t items_ = 0;
  double smoothed_loss_ = -1;
  std::chrono::steady_clock::time_point last_draw_{};
};

// One CSV row per step: step,loss,lr,scale,skipped,seconds. Opened for append when resuming, so
// one file covers the whole run; rows of steps after the resumed checkpoint's (logged by a run that
// crashed after its last checkpoint) are dropped first, since the resumed run takes those steps again.
class MetricsLog {
 public:
  // resumed_step: the checkpoint's step when resuming, -1 for a new run (the file is rewritten).
  MetricsLog(const std::string& path, std::int64_t resumed_step);
  void write(const train::StepNumbers& record);  // throws when the row cannot be written
  void close();  // flushes the last rows; throws when they cannot be written
  bool enabled() const { return file_.is_open(); }

 private:
  static void drop_rows_after(const std::string& path, std::int64_t step);
  static constexpr const char* kOp = "mixgrad train: the step log (--log)";
  std::string path_;
  std::ofstream file_;
};

}  // namespace mg::tools
