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
  // How an f16/bf16 parameter without a master stores its update, and the stochastic words' seed.
  UpdateRounding update_rounding = UpdateRounding::Nearest;
  std::uint64_t rounding_seed = 0;
  // The moments' dtype (f32, f16 or bf16); none: what is updated (the parameter's, f32 under a
  // master). bf16 weights with f32 moments: 12 bytes a parameter with its gradient, against 8 all bf16.
  std::optional<DType> state_dtype = std::nullopt;
};

// The update, its state and its state_dict are Adam's (options().weight_decay is the decoupled one).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> parameters, AdamWOptions options = {});
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});
};

}  // namespace mg::optim
