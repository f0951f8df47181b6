// SGD with momentum, Nesterov momentum and L2 weight decay, as torch.optim.SGD (formula in
// kernels/optim.h). The momentum buffer has the parameter's dtype and starts from the first update.
#pragma once

#include "optim/optimizer.h"

namespace mg::optim {

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> parameters, SgdOptions options = {});
  std::vector<Tensor> state() const override;
  const SgdOptions& options() const { return options_; }

 protected:
  void update(std::size_t index, Tensor& parameter, const Tensor& grad, double lr,
              kernels::UpdateCount& count) override;

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_buffers_;  // one per parameter; undefined until its first update
};

}  // namespace mg::optim
