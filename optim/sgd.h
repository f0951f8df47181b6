// SGD with momentum, Nesterov momentum and L2 weight decay, as torch.optim.SGD (formula in
// kernels/optim.h). The momentum buffer has the dtype of what is updated (the parameter's, f32 under
// a master) and starts from the first update: buf = d. A first step that a GradScaler skips on a GPU
// still counts as that first step (the host does not wait to learn it was skipped), so the buffer
// starts from zero instead: the same result unless dampening > 0.
#pragma once

#include "optim/optimizer.h"

namespace mg::optim {

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  // L2: added to the gradient (d = g + weight_decay * p)
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
  bool master_weights = false;  // an f32 master of every f16/bf16 parameter (optim/optimizer.h)
  // How an f16/bf16 parameter without a master stores its update, and the stochastic words' seed.
  UpdateRounding update_rounding = UpdateRounding::Nearest;
  std::uint64_t rounding_seed = 0;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> parameters, SgdOptions options = {});
  // Groups may set their own lr and weight_decay; momentum, dampening and Nesterov are shared.
  SGD(std::vector<ParamGroup> groups, SgdOptions options = {});
  std::vector<Tensor> state() const override;
  const SgdOptions& options() const { return options_; }

 protected:
  void update(std::size_t index, Tensor& target, const Tensor& grad, double lr, double weight_decay,
              kernels::UpdateCount& count, const kernels::FusedStep& fused) override;
  // "momentum_buffer" (none without momentum).
  std::vector<StateEntry> state_entries() const override;
  StateDict parameter_state(std::size_t index) const override;
  void load_parameter_state(std::size_t index, const StateDict& state) override;

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_buffers_;  // one per parameter; undefined until its first update
};

}  // namespace mg::optim
