// Adam, as torch.optim.Adam (formula in kernels/optim.h): weight decay is L2, added to the
// gradient before the moments see it. AdamW (optim/adamw.h) is the same update with decoupled
// weight decay. The moments have the dtype of what is updated (the parameter's, f32 under a master)
// unless {.state_dtype} sets theirs (bfloat16_pure's f32 moments beside bf16 weights);
// each parameter counts its own steps for the bias correction (a parameter that had no gradient for
// a step has taken one step fewer), in an i32 beside its moments on its device, which the kernel
// reads and advances (kernels/optim.h): a step skipped on a GPU does not count, and nobody waits.
#pragma once

#include <optional>

#include "optim/optimizer.h"

namespace mg::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2: g += weight_decay * p
  bool master_weights = false;  // an f32 master of every f16/bf16 parameter (optim/optimizer.h)
  // How an f16/bf16 parameter without a master stores its update, and the stochastic words' seed.
  UpdateRounding update_rounding = UpdateRounding::Nearest;
  std::uint64_t rounding_seed = 0;
  // The moments' dtype (f32, f16 or bf16); none: what is updated (the parameter's, f32 under a
  // master). bf16 weights with f32 moments: 12 bytes a parameter with its gradient, against 8 all bf16.
  std::optional<DType> state_dtype = std::nullopt;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> parameters, AdamOptions options = {});
  // Groups may set their own lr and weight_decay; betas and eps are shared.
  Adam(std::vector<ParamGroup> groups, AdamOptions options = {});
  std::vector<Tensor> state() const override;
  const AdamOptions& options() const { return options_; }
  // false: L2 weight decay (Adam); true: p *= 1 - lr * weight_decay before the update (AdamW).
  bool decoupled_weight_decay() const { return decoupled_weight_decay_; }

 protected:
  // For AdamW: the same update with the weight decay of `decoupled_weight_decay`.
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled_weight_decay, std::string name);

  void update(std::size_t index, Tensor& target, const Tensor& grad, double lr, double weight_decay,
              kernels::UpdateCount& count, const kernels::FusedStep& fused) override;
  // "exp_avg", "exp_avg_sq" (the first and second moments) and "step" (the parameter's own count).
  std::vector<StateEntry> state_entries() const override;
  StateDict parameter_state(std::size_t index) const override;
  DType state_dtype(std::size_t index) const override;  // options().state_dtype, where set
  void load_parameter_state(std::size_t index, const StateDict& state) override;

 private:
  AdamOptions options_;
  bool decoupled_weight_decay_;
  struct Moments {
    Tensor exp_avg, exp_avg_sq;
    Tensor step;  // i32 [1]: the updates this parameter has taken
  };
  std::vector<Moments> moments_;  // one per parameter; undefined until its first update
};

}  // namespace mg::optim
