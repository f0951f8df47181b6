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
// The formulas are written once, in kernels/optim_functors.h, for the CPU loop and the CUDA kernel.
// Shapes: param, grad and state tensors have one shape; grad and state are in any floating dtype
// (on a GPU, the state has the parameter's dtype, as every optimizer creates it).
//
// FusedMaster (the paper's FP32 master copy, in one pass): the gradient read is multiplied by
// inv_scale (in f32: the unscale of kernels/amp.h, fused); if *found_inf != 0 the whole update is
// skipped, parameter, state and model copy untouched (read by the kernel itself: on a GPU the host
// does not wait for it); after the update, model_copy (same shape, e.g. the f16 weights of an f32
// master) receives the stored parameter rounded once to its dtype, as a cast would. With an f32
// parameter, the result is bit for bit unscale into an f32 gradient, the update, then the cast.
//
// Counting on a GPU: the kernels add their counts to a per-device counter on the device instead of
// `count`, so that nothing waits; collect_update_count(device, count) adds what the device
// accumulated since its last call to `count` and clears it (a host wait: Optimizer::step calls it
// once per step). On the CPU the kernels add to `count` directly and collect_update_count does
// nothing.
// Tests: build/tests/test_optim, build/tests/test_cuda_amp.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mg::kernels {

// Elements whose computed update was non-zero, and of those, how many kept their stored value.
struct UpdateCount {
  std::int64_t nonzero = 0;
  std::int64_t lost = 0;
};

struct FusedMaster {
  double inv_scale = 1.0;             // the gradient read is multiplied by this (1 / loss scale)
  const Tensor* found_inf = nullptr;  // one f32 element; != 0 skips the update; null: never skip
  Tensor* model_copy = nullptr;       // receives the updated parameter, rounded; null: none
};

struct SgdHyper {
  double lr = 0.0, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffer is initialised from the first update
};
// momentum_buffer may be null when momentum == 0.
void sgd(Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdHyper& hyper, UpdateCount& count,
         const FusedMaster& fused = {});

struct AdamHyper {
  double lr = 0.0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // AdamW
  std::int64_t step = 1;                // 1 for the first update (bias correction)
};
void adam(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamHyper& hyper,
          UpdateCount& count, const FusedMaster& fused = {});

// Adds the counts `device` accumulated since the last call to `count`, and clears them.
void collect_update_count(Device device, UpdateCount& count);

namespace cpu {
void sgd(Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdHyper& hyper, UpdateCount& count,
         const FusedMaster& fused = {});
void adam(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamHyper& hyper,
          UpdateCount& count, const FusedMaster& fused = {});
void collect_update_count(Device device, UpdateCount& count);  // nothing to do: counted directly
}  // namespace cpu

// The CUDA backend (kernels/cuda/), in builds with MG_WITH_CUDA: same contract, tensors on one GPU.
namespace cuda {
void sgd(Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdHyper& hyper, UpdateCount& count,
         const FusedMaster& fused = {});
void adam(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamHyper& hyper,
          UpdateCount& count, const FusedMaster& fused = {});
void collect_update_count(Device device, UpdateCount& count);  // waits for the device's queued updates
}  // namespace cuda

}  // namespace mg::kernels
