// Adagrad, as torch.optim.Adagrad (Duchi, Hazan and Singer, 2011; formula in kernels/optim.h): each
// weight's step is the learning rate divided by the root of the sum of all its squared gradients so
// far, so weights that saw large gradients slow down and rarely-updated ones keep a large rate. The
// paper "Mixed Precision Training" trained its bigLSTM (Figure 5) with it.
//
//   optim::Adagrad adagrad(model.parameters(), {.lr = 0.2, .master_weights = true});  // float16_master
//
// Per parameter: the sum of squared gradients, which starts at initial_accumulator_value and has the
// dtype of what is updated (the parameter's, f32 under a master; an f16 sum of a float16_pure model
// overflows once it passes 65504), and the parameter's own step count for lr_decay (a parameter that
// had no gradient for a step has taken one step fewer), an i32 beside the sum on its device, which the
// kernel reads and advances as Adam's: a step skipped on a GPU does not count, and nobody waits.
// Weight decay is L2: added to the gradient, so it enters the sum too.
#pragma once

#include "optim/optimizer.h"

namespace mg::optim {

// PyTorch's defaults. Each value must be finite; lr, lr_decay, weight_decay and
// initial_accumulator_value >= 0, eps > 0 (an mg::Error names the option and the value otherwise).
struct AdagradOptions {
  double lr = 0.01;
  double lr_decay = 0.0;  // update t uses lr / (1 + (t - 1) * lr_decay)
  double weight_decay = 0.0;  // L2: g += weight_decay * p
  double initial_accumulator_value = 0.0;  // the sum of squared gradients before the first update
  double eps = 1e-10;  // added to sqrt(sum): a zero gradient into a zero sum changes nothing
  bool master_weights = false;  // an f32 master of every f16/bf16 parameter (optim/optimizer.h)
  // How an f16/bf16 parameter without a master stores its update, and the stochastic words' seed.
  UpdateRounding update_rounding = UpdateRounding::Nearest;
  std::uint64_t rounding_seed = 0;
};

class Adagrad : public Optimizer {
 public:
  Adagrad(std::vector<Tensor> parameters, AdagradOptions options = {});
  // Groups may set their own lr and weight_decay; lr_decay, eps and initial_accumulator_value are shared.
  Adagrad(std::vector<ParamGroup> groups, AdagradOptions options = {});
  // The sums of squared gradients of the parameters updated so far (not the step counts).
  std::vector<Tensor> state() const override;
  const AdagradOptions& options() const { return options_; }

 protected:
  void update(std::size_t index, Tensor& target, const Tensor& grad, double lr, double weight_decay,
              kernels::UpdateCount& count, const kernels::FusedStep& fused) override;
  // "sum" (the squared gradients, like the parameter) and "step" (the parameter's own count).
  std::vector<StateEntry> state_entries() const override;
  StateDict parameter_state(std::size_t index) const override;
  void load_parameter_state(std::size_t index, const StateDict& state) override;

 private:
  AdagradOptions options_;
  struct Accumulator {
    Tensor sum;
    Tensor step;  // i32 [1]: the updates this parameter has taken
  };
  std::vector<Accumulator> accumulators_;  // one per parameter; undefined until its first update
};

}  // namespace mg::optim
