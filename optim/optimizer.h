// Optimizer: the base of SGD, Adam, AdamW and Adagrad.
//
//   optim::SGD sgd(parameters, {.lr = 0.1, .momentum = 0.9});
//   sgd.zero_grad();  mg::backward(loss);  sgd.step();
//
// step() reads each parameter's .grad and updates the parameter in place, under NoGradGuard, with
// one fused kernel per parameter (kernels/optim.h): math in f32, rounded once on store, so an f16
// parameter (the pure recipes) loses updates smaller than half its ulp, and last_update() counts them.
//
// Master weights (the paper's section 3.1): with {.master_weights = true}, every f16 or bf16
// parameter gets an f32 copy, created here and kept as optimizer state ("state.3.master", beside
// exp_avg). step() then updates the master and writes the parameter as round(master) in the same
// pass, so an update of 2^-12 to a weight of 1.0 accumulates in the master instead of vanishing
// below half an f16 ulp (2^-11); the state (momentum, moments) is f32 like the master. f32 and f64
// parameters need no master and get none.
//
//   optim::SGD sgd(model.parameters(), {.lr = 0.1, .master_weights = true});   // the float16_master recipe
//
// Without a master, an f16/bf16 parameter takes the update rounded as {.update_rounding} says
// (kernels/optim.h): Nearest (the default, PyTorch's: updates below half an ulp are lost),
// Stochastic (unbiased: element e of parameter i at step t rounds with the Philox word of
// (rounding_seed, t, i, e), so a resumed run rounds as the uninterrupted one would), or Kahan (a
// compensation buffer of the parameter's dtype, "state.3.compensation", carries what each rounding
// lost into the next update: 2 more bytes a bf16 parameter). Zamirai et al., "Revisiting BFloat16
// Training" (2020): either recovers f32-master accuracy without the 4-byte master.
//
//   optim::AdamW adamw(parameters, {.lr = 1e-3, .update_rounding = optim::UpdateRounding::Stochastic,
//                                   .rounding_seed = 7});   // bfloat16_pure --update-rounding stochastic
//
// With amp::GradScaler, scaler.step(optimizer) calls step({.inv_scale, .found_inf}): the kernels read
// the gradient times 1/S and skip the update on the device when found_inf is set, so a GPU step
// makes the host wait for nothing (below: what is counted lazily, and what then waits).
//
// Parameter groups (torch.optim's param_groups) give some parameters their own learning rate or
// weight decay; the optimizer's options are the default of every group that does not set its own:
//
//   optim::AdamW adamw({{.parameters = weights}, {.parameters = biases_and_norms, .weight_decay = 0.0}},
//                      {.lr = 3e-4});
//
// The learning rate of a step, for group g, is groups()[g].lr * schedule(step_count()): a schedule
// (optim/schedule.h) is a function of the number of steps taken, so a step the GradScaler skips
// does not advance it, and one schedule scales every group alike.
//
// state_dict() is everything a resumed run needs to continue bit for bit: the step count, each
// group's lr and weight decay, and every parameter's state ("state.3.exp_avg": keyed by the
// parameter's index in parameters()). The schedule is code, not state: set the same one again.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/state_dict.h"
#include "core/tensor.h"
#include "kernels/optim.h"
#include "optim/schedule.h"

namespace mg::optim {

// A group of parameters with its own options; an unset option takes the optimizer's.
struct ParamGroup {
  std::vector<Tensor> parameters = {};
  std::optional<double> lr = std::nullopt;
  std::optional<double> weight_decay = std::nullopt;
};

// A group as an optimizer holds it: parameters()[begin, end), with its options resolved.
struct Group {
  std::size_t begin = 0, end = 0;
  double lr = 0.0;  // the group's base rate; the schedule multiplies it
  double weight_decay = 0.0;
  std::size_t size() const { return end - begin; }
};

// What amp::GradScaler hands to step(): 1/S, by which the gradients step() reads are multiplied in
// the update, and found_inf, which skips the update on the device; each one f32 element on the
// parameters' device, or null. The struct the fused kernels take too (kernels/optim.h).
using kernels::StepScaling;

// How an f16/bf16 parameter without a master stores its update (above; kernels/optim.h).
using kernels::UpdateRounding;
// "nearest", "stochastic", "kahan"; any other name is an mg::Error that lists them.
UpdateRounding parse_update_rounding(std::string_view name);
const char* update_rounding_name(UpdateRounding rounding);

// What the optimizers' options share about how an update is stored.
struct StoreOptions {
  bool master_weights = false;
  UpdateRounding update_rounding = UpdateRounding::Nearest;
  std::uint64_t rounding_seed = 0;
};

// The StoreOptions of an optimizer's options (SgdOptions, AdamOptions, ...).
template <class Options>
StoreOptions store_options(const Options& options) {
  return {options.master_weights, options.update_rounding, options.rounding_seed};
}

class Optimizer {
 public:
  // groups: every parameter is a distinct floating leaf that requires grad, in exactly one group;
  // parameters() lists them group after group. lr and weight_decay: the defaults of the groups.
  // store: f32 masters of every f16/bf16 parameter, or how those parameters round their updates
  // (not both: a rounding other than Nearest with master_weights is an mg::Error, as is one over
  // parameters none of which is f16/bf16). name: for messages ("optim::SGD").
  Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay, const StoreOptions& store,
            std::string name);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  const std::string& name() const { return name_; }
  // The tensors the model trains (the f16 ones under master weights), group after group.
  const std::vector<Tensor>& parameters() const { return parameters_; }
  const std::vector<Group>& groups() const { return groups_; }

  // One update of every parameter that has a .grad (the others are left alone), then
  // step_count() + 1. Each updated parameter's data version is bumped: a graph that saved it
  // before the step refuses to run backward. With scaling.found_inf set on the device the whole
  // step is skipped there: parameters, masters, state and the step count stay as they were.
  void step(const StepScaling& scaling = {});
  // Drops every parameter's .grad and every master's (the next backward starts fresh; PyTorch's
  // set_to_none).
  void zero_grad();
  // Steps taken. After steps with a found_inf on a GPU this reads their flags: the one host wait.
  std::int64_t step_count() const;

  // The learning rate the next step uses for `group`: groups()[group].lr * schedule(step_count()).
  double lr(std::size_t group) const;
  double lr() const { return lr(0); }  // the first group's (the only one, without groups)
  // Sets the base learning rate of one group, or of every group.
  void set_lr(std::size_t group, double lr);
  void set_lr(double lr);
  // Replaces the schedule (an empty one: a factor of 1). With a schedule, each GPU step under a
  // GradScaler reads whether the previous one was skipped (step_count()).
  void set_schedule(Schedule factor);

  // ---- master weights
  bool keeps_master_weights() const { return master_weights_; }
  // The f32 master of parameter `index` (a leaf; its .grad is the unscaled f32 gradient once
  // gradients() or scale_gradients_ made it), or an undefined tensor for a parameter without one.
  const Tensor& master(std::size_t index) const { return masters_[index]; }
  std::size_t master_bytes() const;
  UpdateRounding update_rounding() const { return rounding_; }
  // Kahan's compensation of parameter `index` (its shape and dtype), or an undefined tensor before
  // its first update or without Kahan rounding.
  const Tensor& compensation(std::size_t index) const { return compensations_[index]; }

  // The gradients the next step() reads, as they are: each parameter's .grad, or for a parameter
  // with a master, its master's f32 .grad where gradients() or scale_gradients_ made it from the
  // present .grad. The tensors themselves, not copies. (GradScaler::step checks these for inf/NaN.)
  std::vector<Tensor> step_gradients() const;
  // The same after converting every f16/bf16 .grad of a parameter with a master into its master's
  // f32 .grad (factor 1) where that was not done yet: the gradients to clip (optim/clip.h), in f32.
  std::vector<Tensor> gradients();
  // Multiplies the gradients step() will read by `factor` (one f32 element on their device) in one
  // pass (kernels::unscale) and sets found_inf to 1 if a result is inf or NaN. The f16 .grad of a
  // parameter with a master is read and the product stored in the master's f32 .grad, where small
  // values survive; every other gradient is scaled in place. GradScaler::unscale_ passes 1/S,
  // clipping max_norm / total. step() reads the result, as long as the .grad it came from is unchanged.
  void scale_gradients_(const Tensor& factor, Tensor& found_inf);

  // Of the elements the last step meant to change (in the masters, where there are masters), how
  // many kept their value (lost updates). On a GPU the first call after a step reads the device's
  // counts: a host wait, made only when asked.
  kernels::UpdateCount last_update() const;
  // Momentum buffers, moments: every tensor of optimizer state (empty until the first step), the
  // masters and Kahan's compensations excepted (master_bytes(), compensation()).
  virtual std::vector<Tensor> state() const = 0;
  std::size_t state_bytes() const;  // state() and the compensations

  // A snapshot (copies) of the step count, every group's lr and weight_decay ("group.0.lr") and
  // every parameter's state ("state.3.momentum_buffer", "state.3.master", "state.3.compensation");
  // parameters without state have no entries. (update_rounding and rounding_seed are options, not
  // state: build the resumed optimizer with the same ones.)
  StateDict state_dict() const;
  // Restores a state_dict() of an optimizer of the same kind over parameters of the same shapes
  // and dtypes, in the same groups, with masters where this one keeps them. Everything is checked
  // first (every key known, none missing, counts, shapes, dtypes): on an mg::Error nothing has
  // changed. Values are copied, into the existing state tensors where there are some; parameters
  // without entries lose their state. Each parameter with a master becomes round(master). The
  // masters of checkpoints written before they were state ("master.3", amp::MasterWeights) load too.
  void load_state_dict(const StateDict& state);

 protected:
  // Updates `target` (the parameter, or its f32 master) from `grad` with the step's rate and its
  // group's weight decay, through kernels/optim.h with `fused`, adding to `count`. The state it
  // creates has target's dtype and device.
  virtual void update(std::size_t index, Tensor& target, const Tensor& grad, double lr, double weight_decay,
                      kernels::UpdateCount& count, const kernels::FusedStep& fused) = 0;

  // ---- per-parameter state, for state_dict: each optimizer names its entries
  // A tensor of the parameter's shape in state_dtype(index), or an integer.
  enum class StateKind { LikeParameter, Count };
  // The dtype of parameter `index`'s LikeParameter state: what step() updates (the parameter's, f32
  // under a master), unless the optimizer's options say otherwise (Adam's state_dtype).
  virtual DType state_dtype(std::size_t index) const;
  struct StateEntry {
    std::string name;  // "exp_avg": saved as "state.<index>.exp_avg"
    StateKind kind;
  };
  // The entries a parameter with state has (all of them, or none before its first update).
  virtual std::vector<StateEntry> state_entries() const = 0;
  // Parameter `index`'s state under those names (the live tensors; state_dict copies them).
  virtual StateDict parameter_state(std::size_t index) const = 0;
  // Replaces parameter `index`'s state with `state` (validated: every entry, or empty to clear it).
  virtual void load_parameter_state(std::size_t index, const StateDict& state) = 0;
  // `saved`'s values in `existing` if it is defined (same shape and dtype), else in a new copy.
  static Tensor copy_state(const Tensor& existing, const Tensor& saved);

 private:
  double schedule_factor() const;  // schedule(step_count()), checked; 1 without a schedule
  void check_lr(double lr, const std::string& what) const;
  // The gradient step() reads for parameter i: its master's .grad while master_grad_up_to_date(i), else its .grad.
  Tensor step_gradient(std::size_t i) const;
  // The master's .grad was made from the parameter's present .grad (same tensor, same version).
  bool master_grad_up_to_date(std::size_t i) const;
  // scale_gradients_ over every gradient (all) or only the masters' that are not up to date.
  void scale_pass(const Tensor& factor, Tensor& found_inf, bool all);
  // The checks of load_state_dict, each throwing before anything changes (optimizer.cpp says the order).
  struct LoadedParameter {
    Tensor master;  // undefined without a master
    Tensor compensation;  // undefined: none saved
    StateDict state;  // empty: no state yet
  };
  void check_keys(const StateDict& state, const std::string& owner) const;
  std::vector<Group> loaded_groups(const StateDict& state, const std::string& owner) const;
  LoadedParameter loaded_parameter(const StateDict& state, std::size_t i, const std::string& owner) const;

  std::vector<Tensor> parameters_;
  std::vector<Group> groups_;
  std::string name_;
  bool master_weights_;
  UpdateRounding rounding_;
  std::uint64_t rounding_seed_;
  std::vector<Tensor> masters_;  // one per parameter: f32, or undefined
  std::vector<Tensor> compensations_;  // one per parameter: Kahan's, or undefined
  // The .grad (and its data version) each master's .grad was made from: held, so that its identity
  // stays unique. step() uses the master's .grad only while the parameter's .grad is still this one,
  // unchanged (a backward that accumulated into it, or a new one, is converted again).
  std::vector<std::pair<std::shared_ptr<TensorImpl>, std::uint64_t>> converted_;
  Schedule schedule_;
  // Steps known to be taken; and GPU steps taken with a found_inf flag the host has not read yet,
  // with those flags summed on the device (each clamped to 1): how many of them were skipped.
  mutable std::int64_t step_count_ = 0;
  mutable std::int64_t unread_steps_ = 0;
  mutable Tensor unread_skips_;
  mutable kernels::UpdateCount last_update_;
  mutable bool update_counted_ = true;  // last_update_ holds the last step's counts
};

}  // namespace mg::optim
