// OpProfile: where a training step's time goes, op by op and phase by phase, measured, not guessed.
//
//   train::OpProfile profile;                          // watches this thread's ops while alive
//   for (...) trainer.step(batch, {&profile});         // a StepObserver too: it knows the phases
//   fmt::print("{}", profile.table());                 // per op: calls, ms and % of a step, bytes
//   profile.write_chrome_trace("trace.json");          // open in ui.perfetto.dev or chrome://tracing
//
// `mixgrad train --profile` and `bench/train_step --profile` print the table (docs/profiling.md).
//
// How it measures:
// - Every op opens an OpSpan (autograd/tape.h), and backward opens one around each node's backward
//   function. The profile keeps a stack of the open spans: an op's *self* time is its span less the
//   spans nested in it (matmul's time without the casts autocast inserted before it), its *total*
//   time includes them. Summed over the rows, self times never count anything twice.
// - A step has three phases: forward (from before_forward: zero_grad is before it), backward (from
//   before_backward) and update (from after_backward to after_update: the optimizer and the scaler,
//   named spans of the Trainer). What a phase spends outside any span (the modules' own code, the
//   allocation of the gradients, backward's walk and sums) is its "outside ops" row.
// - Time is the device's: on the CPU the steady clock; on a GPU a CUDA event recorded on the
//   device's stream at every begin and end (host clocks would time the launches, not the kernels),
//   read back once per step, at its end (one host wait a step: profile, then measure speed without).
// - Bytes are those an op writes: its output in forward, its input gradients in backward.
// - The first `skip_steps` steps are warm-up (the caching allocator's first allocations, packed
//   weights); they are not counted. The trace holds every span of the `trace_steps` steps after.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/tape.h"
#include "core/device.h"
#include "train/trainer.h"

namespace mg::train {

enum class Phase { Forward, Backward, Update };
const char* phase_name(Phase phase);

struct OpProfileOptions {
  Device device = Device::cpu();  // whose clock: the device the ops run on
  std::int64_t skip_steps = 1;  // warm-up steps, not counted
  std::int64_t trace_steps = 3;  // steps whose spans go into the Chrome trace
};

// One op in one phase, summed over the counted steps.
struct OpRow {
  std::string op;  // the op's name ("matmul"), a Trainer span ("optimizer step"), or "outside ops"
  Phase phase = Phase::Forward;
  std::int64_t calls = 0;
  double self_seconds = 0;  // its spans less the spans nested in them
  double total_seconds = 0;  // its spans, whole (a nested span of the same op is counted once)
  double bytes = 0;  // written: outputs in forward, input gradients in backward
};

class OpProfile : public OpObserver, public StepObserver {
 public:
  explicit OpProfile(OpProfileOptions options = {});
  ~OpProfile() override;
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

  // The phases, for a loop of one's own (the Trainer calls them through the StepObserver hooks):
  // start(Forward) begins a step, start(Backward) and start(Update) end the phase before, and
  // finish_step() ends the step.
  void start(Phase phase);
  void finish_step();

  void before_forward() override { start(Phase::Forward); }
  void before_backward() override { start(Phase::Backward); }
  void after_backward(const optim::Optimizer& /*optimizer*/) override { start(Phase::Update); }
  void after_update() override { finish_step(); }

  void begin(const char* op, const std::string& scope, bool backward) override;
  void end(const char* op, bool backward) override;
  void forward(const char* op, const std::string& scope, const std::vector<Tensor>& inputs,
               const Tensor& output) override;
  void backward(const char* op, const std::string& scope, const Tensor& grad_output, const Grads& grads) override;

  std::int64_t counted_steps() const { return counted_steps_; }
  // Seconds of an average counted step, and of each phase of it.
  double step_seconds() const;
  double phase_seconds(Phase phase) const;
  // Every (op, phase) of the counted steps, the "outside ops" rows included, by self time, largest first.
  std::vector<OpRow> rows() const;
  // The rows as a table per step: phase, op, calls, self ms, % of the step, total ms, MiB written;
  // the phases' sums below. Throws mg::Error before a step was counted.
  std::string table(std::size_t max_rows = 40) const;
  // The spans of the traced steps as Chrome's trace-event JSON (phases on one track, ops on
  // another, nested as they ran); each op's scope and bytes are its args. Throws mg::Error naming
  // the path when it cannot be written, or when no step was traced.
  void write_chrome_trace(const std::string& path) const;

 private:
  struct Clock;  // the steady clock, or CUDA events on the device's stream
  struct Span {
    const char* op;
    std::string scope;
    Phase phase;
    std::size_t parent;  // the span it is nested in, or none
    std::size_t begin_mark, end_mark = 0;  // 0: not ended (mark 0 is the step's start, never a span's end)
    double bytes = 0;
  };
  struct TraceEvent {
    std::string name, scope;
    int track;  // 0: phases, 1: ops
    double begin, duration, bytes;  // seconds since the first traced step began; bytes (ops only)
  };

  void close_phase();
  void add_outside(Phase phase, double seconds);

  OpProfileOptions options_;
  std::unique_ptr<Clock> clock_;
  bool in_step_ = false;
  Phase phase_ = Phase::Forward;
  std::size_t phase_mark_ = 0;
  struct PhaseMarks {
    Phase phase;
    std::size_t begin_mark, end_mark;
  };
  std::vector<PhaseMarks> phases_;  // this step's
  std::vector<Span> spans_;  // this step's, in the order they began
  std::vector<std::size_t> open_;  // indices into spans_ of the spans not yet ended
  std::int64_t steps_seen_ = 0, counted_steps_ = 0;
  double trace_origin_ = -1;  // the first traced step's start on the clock
  std::map<std::pair<std::string, int>, OpRow> rows_;  // by (op, phase)
  double phase_totals_[3] = {0, 0, 0};
  std::vector<TraceEvent> trace_;
};

}  // namespace mg::train
