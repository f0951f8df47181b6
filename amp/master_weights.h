// MasterWeights: the paper's FP32 master copy (section 3.1), as an optimizer wrapper (Apex O2).
//
// The model's parameters are stored in f16 (or bf16); forward and backward use them, so the
// gradients arrive in f16. The wrapper owns an f32 copy of every parameter and an inner optimizer
// that updates that copy:
//   1. f16 gradients -> f32 master gradients, divided by the loss scale on the way (one pass,
//      kernels/amp.h; GradScaler::unscale_ calls it, or step() does with a factor of 1);
//   2. the inner optimizer updates the f32 masters, so an update of 2^-12 to a weight of 1.0
//      accumulates instead of vanishing below half an f16 ulp (2^-11);
//   3. each f16 parameter is refreshed from its master, rounded once (one pass per tensor).
//
//   amp::MasterWeights optimizer(model_parameters, [](std::vector<Tensor> masters) {
//     return std::make_unique<optim::SGD>(std::move(masters), optim::SgdOptions{.lr = 0.1});
//   });
//
// With parameter groups, make_optimizer receives the same groups (the same lr and weight_decay
// overrides) over the masters:
//
//   amp::MasterWeights optimizer({{.parameters = weights}, {.parameters = biases, .weight_decay = 0.0}},
//                                [](std::vector<optim::ParamGroup> master_groups) {
//                                  return std::make_unique<optim::AdamW>(std::move(master_groups));
//                                });
//
// Master i is the copy of parameters()[i], so parameter indices mean the same in both lists. The
// groups, learning rates, schedule, step count and state are the inner optimizer's.
#pragma once

#include <functional>
#include <memory>

#include "optim/optimizer.h"

namespace mg::amp {

class MasterWeights : public optim::Optimizer {
 public:
  using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> master_parameters)>;
  using MakeGroupedOptimizer =
      std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup> master_groups)>;

  // model_parameters: f16/bf16 leaves that require grad. make_optimizer builds the inner optimizer
  // over the f32 master copies (leaves that require grad, initialised from the model's values).
  MasterWeights(std::vector<Tensor> model_parameters, const MakeOptimizer& make_optimizer);
  // The same for groups of model parameters; make_optimizer must keep the groups and their order.
  MasterWeights(std::vector<optim::ParamGroup> model_groups, const MakeGroupedOptimizer& make_optimizer);

  const std::vector<Tensor>& master_parameters() const { return masters_; }
  optim::Optimizer& inner() { return *inner_; }
  std::size_t master_bytes() const;

  // Steps 1-3 above, for every parameter that has a gradient. Step 1 is reused from unscale_ only
  // while the model's gradients are unchanged since; otherwise they are converted again, with a
  // factor of 1 (as without a scaler).
  void step() override;
  void zero_grad() override;  // drops the model's and the masters' gradients
  const std::vector<optim::Group>& groups() const override { return inner_->groups(); }
  std::int64_t step_count() const override { return inner_->step_count(); }
  using Optimizer::lr;
  using Optimizer::set_lr;
  double lr(std::size_t group) const override { return inner_->lr(group); }
  void set_lr(std::size_t group, double lr) override { inner_->set_lr(group, lr); }
  void set_schedule(optim::Schedule factor) override { inner_->set_schedule(std::move(factor)); }
  // The f32 master gradients, what clipping must act on: step 1 runs first (factor 1) if the
  // model's gradients have not been converted yet; after GradScaler::unscale_ they are unscaled.
  std::vector<Tensor> gradients() override;
  void unscale_gradients(double factor, Tensor& found_inf) override;  // step 1
  // Lost updates of the last step, in the f32 masters: an f16 copy that does not move this step
  // has not lost the update, which keeps accumulating in its master.
  kernels::UpdateCount last_update() const override { return inner_->last_update(); }
  std::vector<Tensor> state() const override { return inner_->state(); }

  // The inner optimizer's state_dict plus the f32 masters, "master.<index>".
  StateDict state_dict() const override;
  // Checks the masters (count, shapes, f32) and the inner state before changing anything, then
  // copies the masters and refreshes every model parameter from its master (rounded once): the
  // f16 weights are round(master) afterwards, whether or not they were loaded themselves.
  void load_state_dict(const StateDict& state) override;

 protected:
  // step() and the inner optimizer do the work.
  void update(std::size_t, Tensor&, const Tensor&, double, double, kernels::UpdateCount&) override {}
  std::vector<StateEntry> state_entries() const override { return {}; }
  StateDict parameter_state(std::size_t) const override { return {}; }
  void load_parameter_state(std::size_t, const StateDict&) override {}

 private:
  bool gradients_converted() const;  // step 1 ran on the model's current gradients
  void convert_gradients();          // step 1 with a factor of 1
  void refresh_model(std::size_t index);  // step 3 for one parameter

  std::vector<Tensor> masters_;
  std::unique_ptr<optim::Optimizer> inner_;
  // The model gradients step 1 converted, and their data versions (held, so that their identity
  // stays unique). step() uses the master gradients only while the model's .grad are still these,
  // unchanged: after a step the GradScaler skipped, or a backward that accumulated into them, the
  // new gradients are converted again instead of stale ones being used.
  std::vector<std::pair<std::shared_ptr<TensorImpl>, std::uint64_t>> converted_;
};

}  // namespace mg::amp
