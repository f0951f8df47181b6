// The tape: reverse-mode autodiff as a list of recorded ops.
//
// Every differentiable op calls record() after computing its output. If grad mode is on and some
// input requires grad, one Node is appended to this thread's tape: which tensors went in, which
// came out, and a backward function that owns whatever the op saved. The tape is therefore already
// in topological order, and backward() is one loop over it in reverse:
//
//   for each node, last to first:
//     if nothing has sent a gradient to its output: skip it
//     grads = node.backward(grad of output)        // then the node's saved tensors are released
//     send grads[i] to input i                     // summed when an input is used twice
//   add the gradients that reached leaves into their .grad
//
// Backward formulas are written with the same mg:: ops as forward code, and run with grad mode off.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/cast_policy.h"
#include "core/tensor.h"

namespace mg {

// ---- grad mode (thread-local; on by default)

bool grad_enabled();

// Turns recording off for its scope: evaluation, optimizer updates, gradient bookkeeping.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// ---- recording an op

using Grads = std::vector<Tensor>;

// Computes the gradients of an op's inputs from the gradient of its output (same shape and dtype as
// the output). needs_grad[i] says whether input i wants one; for the others the function may return
// an undefined Tensor (and should, when computing it costs work). A returned gradient must have its
// input's shape and dtype.
using BackwardFn = std::function<Grads(const Tensor& grad_output, const std::vector<bool>& needs_grad)>;

// Appends a node when grad mode is on and some input requires grad; the output then requires grad
// and is no longer a leaf. Otherwise does nothing (and `backward` is dropped with what it captured).
// Observers see the op's name, op_name(op) ("matmul").
void record(Op op, const std::vector<Tensor>& inputs, Tensor& output, BackwardFn backward);
// The same for a user's own op, which has no mg::Op: it names itself (a literal: the tape keeps the pointer).
void record(const char* op, const std::vector<Tensor>& inputs, Tensor& output, BackwardFn backward);

// A tensor a backward function keeps from forward: capture [x = Saved(x)] and use x as a Tensor.
// It remembers x's storage and the version of its data when saved; using it in backward throws if
// the data was written in place since (Tensor::copy_ and optimizer steps count writes) or replaced
// (amp::Recipe::cast_parameters), because backward would silently compute with the new values.
// This is PyTorch's "modified by an inplace operation" check.
class Saved {
 public:
  explicit Saved(const Tensor& tensor);
  const Tensor& get() const;
  operator const Tensor&() const { return get(); }  // NOLINT: a Saved stands wherever a Tensor is read

 private:
  Tensor tensor_;
  std::weak_ptr<Storage> storage_;
  std::uint64_t version_;
};

// ---- running backward

struct BackwardOptions {
  // Keep the nodes (and their saved tensors) so that backward can run again over the same graph.
  bool keep_tape = false;
};

// Backpropagates from a one-element tensor (a loss), seeding its gradient with 1.
// Accumulates (adds) into .grad of every leaf that requires grad and was used; gradients have the
// leaf's dtype (a cast's backward casts back, so an f32 parameter used in f16 gets an f32 grad).
// Unless keep_tape, clears this thread's whole tape (other graphs recorded since the last backward
// included), releasing each node's saved tensors as the walk reaches it.
// Throws, changing no .grad and clearing the tape (keep_tape or not), if a backward function fails,
// a saved tensor was modified in place, a gradient reaches a tensor whose op is no longer on the
// tape, or memory runs out (an allocator's mg::Error) anywhere after the arguments were checked:
// every gradient is computed before the first .grad changes, and the saved tensors go with the
// tape, so the process can go on (with a smaller batch, say). Bad arguments (a loss of several
// elements, an output that does not require grad) throw before anything happens.
void backward(const Tensor& loss, BackwardOptions options = {});
// Backpropagates from any tensor with an explicit seed gradient of the same shape and dtype.
void backward(const Tensor& output, const Tensor& seed, BackwardOptions options = {});

// ---- gradient-ready hooks (the overlap of data-parallel training, train/data_parallel.h)

// Sees each leaf that requires grad as soon as backward has its whole gradient: when the walk has
// passed the leaf's first use on the tape, the last node that could send it more. While a hook is
// registered on this thread, backward adds that gradient into the leaf's .grad right then, not
// after the walk, and calls ready(leaf); the hook may start sending .grad to other processes while
// the rest of backward runs, but must not change it. Leaves that get no gradient are not reported.
// The price: a backward that fails after that point keeps what it already added to those .grads
// (without a hook, a failed backward changes no .grad).
class GradReadyHook {
 public:
  virtual ~GradReadyHook() = default;
  virtual void ready(const Tensor& leaf) = 0;
};
void add_grad_ready_hook(GradReadyHook* hook);
void remove_grad_ready_hook(GradReadyHook* hook);

// Nodes on this thread's tape. Forward passes with grad mode on that never reach backward()
// stay on the tape: evaluate under NoGradGuard, or call clear_tape().
std::size_t tape_size();
// Drops every node of this thread's tape, and with them the tensors they saved. A hand-written
// training loop calls it when a step throws before backward (out of device memory in the forward
// pass, say): the nodes recorded before the error hold that pass's activations until the tape is
// cleared, and the next backward() would walk them. backward() clears the tape itself when it
// throws, and train::Trainer::step does both.
void clear_tape();
// Counts how often this thread's tape was emptied (by backward or clear_tape). A tensor made by a
// recorded op can only pass gradients while its generation lasts: autocast's weight-cast cache
// (autograd/autocast.h) uses this to never serve a cast whose node is gone.
std::uint64_t tape_generation();
// Bytes of distinct storage held by the tensors saved for backward on this thread's tape, other
// than leaves that require grad (parameters): the activation memory of a forward pass (f16
// activations under autocast take half of f32's; autocast's f16 weight copies count here too).
std::size_t saved_tensor_bytes();

// ---- naming and observing ops (the tools of amp/diagnostics.h)

// Names the ops recorded in its scope, for messages: nested scopes join with '.', so a module
// "encoder" calling its child "fc1" records ops under "encoder.fc1". nn::Module::operator() opens
// one per call, named as the module's parent registered it (nn/module.h); open one by hand for
// ops called outside a module.
class NameScope {
 public:
  explicit NameScope(const std::string& name);
  ~NameScope();
  NameScope(const NameScope&) = delete;
  NameScope& operator=(const NameScope&) = delete;

 private:
  std::shared_ptr<const std::string> previous_;
};
// The current scope's full name ("" outside any scope).
const std::string& current_scope();

// Sees every op of this thread while registered (between add_observer and remove_observer):
// forward() after an op has computed its output, whether or not grad mode recorded it; backward()
// after a node turned the gradient of its output into its inputs' gradients (undefined where an
// input needs none), in the order backward visits them. Observers must not change the tensors, and
// are added and removed on the thread whose ops they watch (the amp diagnostics do it in their
// constructor and destructor).
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void forward(const char* op, const std::string& scope, const std::vector<Tensor>& inputs,
                       const Tensor& output) = 0;
  virtual void backward(const char* op, const std::string& scope, const Tensor& grad_output, const Grads& grads) = 0;
  // Right after forward(), when that op went on the tape (grad mode on, an input requiring grad):
  // the bytes of distinct storage its backward function keeps, the parameters it saved excluded
  // (a tensor saved by several ops counts in each). amp::StepRecorder draws them; others ignore it.
  virtual void taped(std::size_t /*saved_bytes*/) {}
  // The span of one op, for a clock (train/op_profile.h): begin() before the op does anything (the
  // casts autocast inserts are ops of their own, nested inside) and end() after, whether it returned
  // or threw. In backward, around each node's backward function (`backward` true; ops that function
  // calls are not reported). Spans nest and close in the reverse order they opened. end() runs in
  // destructors: an exception from it is dropped, never passed on.
  virtual void begin(const char* /*op*/, const std::string& /*scope*/, bool /*backward*/) {}
  virtual void end(const char* /*op*/, bool /*backward*/) {}
};
void add_observer(OpObserver* observer);
void remove_observer(OpObserver* observer);

// Marks one op's span for the observers' begin() and end(): the first line of every op of
// autograd/ops.h (PyTorch's RECORD_FUNCTION). Without observers it costs one test of an empty vector.
// Anything else a step does can be named the same way (the Trainer's "optimizer step", a user's own op).
class OpSpan {
 public:
  explicit OpSpan(Op op);
  explicit OpSpan(const char* op);
  ~OpSpan();
  OpSpan(const OpSpan&) = delete;
  OpSpan& operator=(const OpSpan&) = delete;

 private:
  const char* op_ = nullptr;  // null when nobody watched it begin
};

}  // namespace mg
