// NonfiniteTrace: which op made the first inf/NaN of a training step, found without a host wait.
//
// amp::OverflowDetector (amp/diagnostics.h) reads every op's output back to the host as the op runs:
// exact, and a host wait per op on a GPU, which a GPU step cannot afford. NonfiniteTrace keeps one
// flag per op instead, for each floating output in forward and each input's gradient in backward.
// On the CPU the flag is computed directly: one pass over the tensor's bits (exponent all ones: inf
// or NaN), no copy. On a GPU it stays on the device: the GradScaler's check (kernels::find_non_finite)
// sets a flag of the op's own to 1 when a value is inf or NaN; a zero fill and one kernel queued behind
// the op, called directly (no mg:: op, so no observer sees them), nothing read. At the end of a step
// the step's device flags are joined into one tensor (one more kernel), and kept with the ops' names
// and scopes. Only when the
// step turns out to have been skipped (its StepNumbers say so, read in a batch every read_every steps:
// train/step_readout.h) is that one tensor read back, one transfer, and the first NaN in it names the
// op. Steps that were not skipped are dropped unread. Nothing the step computes changes: the flags
// only read its tensors, and draw no random numbers.
//
//   amp::NonfiniteTrace trace;
//   trace.begin_step(step);  ...forward, backward...  trace.end_step();
//   if (skipped) std::optional<amp::NonfiniteOp> op = trace.first(step);   // one transfer
//   trace.drop_through(step);
//
// While a step is open the trace is an op observer of this thread (every op, recorded or not, is
// flagged); between steps it observes nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "autograd/tape.h"
#include "core/tensor.h"

namespace mg::amp {

// The op whose output (forward) or input gradient (backward) held the step's first inf/NaN.
struct NonfiniteOp {
  std::int64_t step = 0;
  bool backward = false;
  std::string op;  // "matmul"
  std::string scope;  // the layer: the NameScope it ran in ("" outside any module)
  std::string describe() const;  // "step 7: the gradient (backward) of op matmul in layer '3'"
};

class NonfiniteTrace : public OpObserver {
 public:
  NonfiniteTrace() = default;
  ~NonfiniteTrace() override;
  NonfiniteTrace(const NonfiniteTrace&) = delete;
  NonfiniteTrace& operator=(const NonfiniteTrace&) = delete;

  // Opens step `step` (observing from now); a step still open is closed first.
  void begin_step(std::int64_t step);
  // Closes the open step: its flags are joined into one tensor on the device, nothing read.
  void end_step();
  // The first op of a closed, kept step that made an inf/NaN (reads that step's flags: one transfer);
  // nullopt when none did, or the step is not kept.
  std::optional<NonfiniteOp> first(std::int64_t step) const;
  // Forgets the kept steps numbered <= step.
  void drop_through(std::int64_t step);
  std::size_t kept_steps() const { return closed_.size(); }

  void forward(const char* op, const std::string& scope, const std::vector<Tensor>& inputs,
               const Tensor& output) override;
  void backward(const char* op, const std::string& scope, const Tensor& grad_output, const Grads& grads) override;

 private:
  struct Site {
    bool backward;
    const char* op;  // the tape's names are literals
    std::string scope;
    bool on_device;  // its flag is the next of `flags`; else it was computed on the CPU:
    bool nonfinite;
  };
  struct Step {  // no default member initializers: clang rejects optional<Step>::emplace() in the class
    std::int64_t number;
    std::vector<Site> sites;
    std::vector<Tensor> flags;  // one f32 [1] per device site while open; joined into flags[0] when closed
  };
  void flag(bool backward, const char* op, const std::string& scope, const Tensor& tensor);

  Tensor one_;  // the check's factor, 1 (f32 [1] on the device of the last flag)
  std::optional<Step> open_;  // observing while set
  std::vector<Step> closed_;  // oldest first
};

}  // namespace mg::amp
