// Optimizer updates, one parameter tensor per call. Every value (parameter, gradient, state) is
// widened to f32 (f64 for f64 parameters), the update is computed there, and the results are
// rounded once on store into the parameter's and the state's dtypes. For an f16 parameter that
// store is where small updates are lost (the paper's Figure 2a): `UpdateCount` counts them.
//
// sgd   (PyTorch's torch.optim.SGD):  d = g + weight_decay * p
//         with momentum: buf = first_step ? d : momentum * buf + (1 - dampening) * d
//                        d = nesterov ? d + momentum * buf : buf
//         p -= lr * d
// adam  (torch.optim.Adam / AdamW):   decoupled: p *= 1 - lr * weight_decay, else g += weight_decay * p
//         m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//         p -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// Shapes: param, grad and state tensors have one shape; grad and state are in any floating dtype.
// Tests: build/tests/test_optim.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mg::kernels {

// Elements whose computed update was non-zero, and of those, how many kept their stored value.
struct UpdateCount {
  std::int64_t nonzero = 0;
  std::int64_t lost = 0;
};

struct SgdHyper {
  double lr = 0.0, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffer is initialised from the first update
};
// momentum_buffer may be null when momentum == 0.
void sgd(Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdHyper& hyper, UpdateCount& count);

struct AdamHyper {
  double lr = 0.0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // AdamW
  std::int64_t step = 1;                // 1 for the first update (bias correction)
};
void adam(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamHyper& hyper,
          UpdateCount& count);

namespace cpu {
void sgd(Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdHyper& hyper, UpdateCount& count);
void adam(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamHyper& hyper,
          UpdateCount& count);
}  // namespace cpu

}  // namespace mg::kernels
