// Adam and AdamW, as torch.optim.Adam / AdamW (formula in kernels/optim.h). The moments have the
// parameter's dtype; each parameter counts its own steps for the bias correction.
#pragma once

#include "optim/optimizer.h"

namespace mg::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // AdamW: p *= 1 - lr * weight_decay instead of g += weight_decay * p
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> parameters, AdamOptions options = {});
  std::vector<Tensor> state() const override;
  const AdamOptions& options() const { return options_; }

 protected:
  void update(std::size_t index, Tensor& parameter, const Tensor& grad, double lr,
              kernels::UpdateCount& count) override;

 private:
  AdamOptions options_;
  struct Moments {
    Tensor exp_avg, exp_avg_sq;
    std::int64_t steps = 0;
  };
  std::vector<Moments> moments_;
};

// AdamW with PyTorch's default weight decay of 0.01.
inline AdamOptions adamw_options(double lr = 1e-3, double weight_decay = 1e-2) {
  return {.lr = lr, .weight_decay = weight_decay, .decoupled_weight_decay = true};
}

}  // namespace mg::optim
