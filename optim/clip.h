// clip_grad_norm_: rescale gradients so that their joint norm is at most max_norm, as
// torch.nn.utils.clip_grad_norm_.
//
//   total = (sum over every element g of every gradient of |g|^p)^(1/p)     (p = inf: max |g|)
//   if total > max_norm: every gradient *= max_norm / (total + 1e-6)
//
// The sum is accumulated in f64 (the gradients are read in their own dtype and widened), so the
// norm of many f16 or f32 values neither overflows nor loses their small terms. Returns `total`,
// the norm before clipping (worth logging: a spike is the first sign of a diverging run).
//
// With the GradScaler the gradients must be unscaled first, or max_norm would be compared with
// S times the true norm:
//   mg::backward(scaler.scale(loss));
//   scaler.unscale_(optimizer);                      // true gradients (the f32 masters' under master weights)
//   optim::clip_grad_norm_(optimizer, 1.0);
//   scaler.step(optimizer);                          // skipped if unscale_ found inf/NaN
//   scaler.update();
//
// A non-finite total (an inf or NaN gradient) follows PyTorch's default (error_if_nonfinite =
// false): no error, and the gradients are multiplied by max_norm / (total + 1e-6) all the same,
// which is 0 for an inf total (an inf element becomes NaN) and NaN for a NaN total. Under the
// GradScaler that step is skipped anyway: unscale_ has already recorded the inf/NaN.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "optim/optimizer.h"

namespace mg::optim {

// gradients: defined floating tensors on the CPU (undefined ones are an error; pass the ones that
// exist, as Optimizer::gradients() returns them). max_norm > 0 (inf: never clip); norm_type p > 0,
// or infinity for the largest magnitude. Scales in place, bumping each scaled gradient's version.
double clip_grad_norm_(const std::vector<Tensor>& gradients, double max_norm, double norm_type = 2.0);

// Clips the gradients the optimizer's next step() will read (optimizer.gradients()): the
// parameters' .grad, or under master weights the f32 master gradients, never the f16 ones.
double clip_grad_norm_(Optimizer& optimizer, double max_norm, double norm_type = 2.0);

}  // namespace mg::optim
