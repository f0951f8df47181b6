// StepReadout: the numbers a training step leaves on its device (its loss, the scale it used,
// whether it was skipped), read back for many steps in one transfer.
//
// On a GPU every number read back is a host wait: the host stops queueing work until the device
// has caught up, and the GPU then idles while the host queues the next step. A loop that reads its
// loss and the scaler's flag every step waits every step. StepReadout keeps each step's one-element
// tensors where they are (no copy, no kernel) and reads every queued step at once: one stack on the
// device, one transfer, one wait per `read_every` steps. Whatever acts on the numbers (the
// ScaleMonitor's counters and alarm, a divergence check, a progress line) then acts at most
// read_every - 1 steps late.
//
//   train::StepReadout readout(16);
//   readout.push(step, lr, loss, scaler.last_scale(), scaler.last_found_inf());   // no wait
//   if (readout.due()) for (const train::StepNumbers& n : readout.read()) ...          // one wait
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mg::train {

// One step, read back: the one record of a step's numbers, which mixgrad train's progress and log
// (tools/progress.h) and the repro runs' logs (tools/repro/runner.h's StepLog, which adds its
// measurements) carry.
struct StepNumbers {
  std::int64_t step = 0;  // counted from 1
  double loss = 0;  // the batch's mean loss
  double lr = 0;  // the rate the step used
  double scale = 1;  // the loss scale it used (1 without a scaler)
  bool skipped = false;  // the GradScaler skipped it (an inf/NaN gradient)
  double seconds = 0;  // since the run started, where the caller times it (mixgrad train's log); else 0
};

class StepReadout {
 public:
  // read_every >= 1: due() after that many pushes.
  explicit StepReadout(std::int64_t read_every = 1);

  // Queues a step. loss: one f32 element; scale and found_inf: one f32 element each (the GradScaler's
  // last_scale() and last_found_inf()), or both undefined without a scaler. All on one device; they
  // must not be written in place afterwards (the scaler's and the loss are fresh tensors each step).
  void push(std::int64_t step, double lr, const Tensor& loss, const Tensor& scale, const Tensor& found_inf);
  bool due() const { return static_cast<std::int64_t>(queued_.size()) >= read_every_; }
  bool empty() const { return queued_.empty(); }
  std::int64_t read_every() const { return read_every_; }

  // Every queued step, oldest first, in one transfer (one wait on a GPU); the queue is then empty.
  std::vector<StepNumbers> read();

 private:
  struct Queued {
    std::int64_t step;
    double lr;
    Tensor loss, scale, found_inf;
  };
  std::int64_t read_every_;
  std::vector<Queued> queued_;
};

}  // namespace mg::train
