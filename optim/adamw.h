// AdamW, as torch.optim.AdamW (Loshchilov and Hutter, Decoupled Weight Decay Regularization):
// Adam whose weight decay shrinks the parameter directly, p *= 1 - lr * weight_decay, instead of
// being added to the gradient. With L2 decay (Adam) the decay term is divided by sqrt(v) like the
// gradient, so parameters with large gradients are barely decayed; decoupled, every parameter
// decays at the same rate. The defaults are PyTorch's, including weight_decay = 0.01.
//
//   optim::AdamW adamw({{.parameters = weights}, {.parameters = biases_and_norms, .weight_decay = 0.0}});
#pragma once

#include "optim/adam.h"

namespace mg::optim {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: p *= 1 - lr * weight_decay
  bool master_weights = false;  // an f32 master of every f16/bf16 parameter (optim/optimizer.h)
};

// The update, its state and its state_dict are Adam's (options().weight_decay is the decoupled one).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> parameters, AdamWOptions options = {});
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});
};

}  // namespace mg::optim
