// Optimizer: the base of SGD, Adam and AdamW (and of amp::MasterWeights, which wraps one).
//
//   optim::SGD sgd(parameters, {.lr = 0.1, .momentum = 0.9});
//   sgd.zero_grad();  mg::backward(loss);  sgd.step();
//
// step() reads each parameter's .grad and updates the parameter in place, under NoGradGuard, with
// one fused kernel per parameter (kernels/optim.h): math in f32, rounded once on store, so an f16
// parameter (the pure recipes) loses updates smaller than half its ulp, and last_update() counts them.
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
#include <optional>
#include <string>
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

class Optimizer {
 public:
  // groups: every parameter is a distinct floating leaf that requires grad, in exactly one group;
  // parameters() lists them group after group. lr and weight_decay: the defaults of the groups.
  // name: for messages ("optim::SGD").
  Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay, std::string name);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  const std::string& name() const { return name_; }
  // The tensors the model trains, group after group; step() reads their .grad.
  virtual const std::vector<Tensor>& parameters() const { return parameters_; }
  virtual const std::vector<Group>& groups() const { return groups_; }

  // One update of every parameter that has a .grad (the others are left alone), then
  // step_count() + 1. Each updated parameter's data version is bumped: a graph that saved it
  // before the step refuses to run backward.
  virtual void step();
  // Drops every parameter's .grad (the next backward starts fresh; PyTorch's set_to_none).
  virtual void zero_grad();
  virtual std::int64_t step_count() const { return step_count_; }

  // The learning rate the next step uses for `group`: groups()[group].lr * schedule(step_count()).
  virtual double lr(std::size_t group) const;
  double lr() const { return lr(0); }  // the first group's (the only one, without groups)
  // Sets the base learning rate of one group, or of every group.
  virtual void set_lr(std::size_t group, double lr);
  void set_lr(double lr);
  // Replaces the schedule (an empty one: a factor of 1).
  virtual void set_schedule(Schedule factor);

  // The gradients step() will read: each parameter's .grad (amp::MasterWeights: the f32 master
  // gradients). After GradScaler::unscale_ they are the true gradients: clip these
  // (optim/clip.h). The tensors are the gradients themselves, not copies.
  virtual std::vector<Tensor> gradients();
  // The GradScaler's pass (amp/grad_scaler.h): multiplies every gradient step() will read by
  // `factor` in one fused pass and sets found_inf (one f32 element) to 1 if any result is inf or NaN.
  // f16 gradients cannot be unscaled in place (small values would underflow again): an mg::Error
  // that points to amp::MasterWeights.
  virtual void unscale_gradients(double factor, Tensor& found_inf);

  // Of the elements the last step meant to change, how many kept their value (lost updates).
  virtual kernels::UpdateCount last_update() const { return last_update_; }
  // Momentum buffers, moments: every tensor of optimizer state (empty until the first step).
  virtual std::vector<Tensor> state() const = 0;
  std::size_t state_bytes() const;

  // A snapshot (copies) of the step count, every group's lr and weight_decay ("group.0.lr") and
  // every parameter's state ("state.3.momentum_buffer"); parameters without state have no entries.
  virtual StateDict state_dict() const;
  // Restores a state_dict() of an optimizer of the same kind over parameters of the same shapes
  // and dtypes, in the same groups. Everything is checked first (every key known, none missing,
  // counts, shapes, dtypes): on an mg::Error nothing has changed. Values are copied, into the
  // existing state tensors where there are some; parameters without entries lose their state.
  virtual void load_state_dict(const StateDict& state);

 protected:
  // Updates parameter `index` from its gradient with the step's rate and its group's weight decay,
  // adding to `count`.
  virtual void update(std::size_t index, Tensor& parameter, const Tensor& grad, double lr, double weight_decay,
                      kernels::UpdateCount& count) = 0;

  // ---- per-parameter state, for state_dict: each optimizer names its entries
  enum class StateKind { LikeParameter, Count };  // a tensor of the parameter's shape and dtype, or an integer
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

  std::vector<Tensor> parameters_;
  std::vector<Group> groups_;
  std::string name_;
  Schedule schedule_;
  std::int64_t step_count_ = 0;
  kernels::UpdateCount last_update_;
};

}  // namespace mg::optim
