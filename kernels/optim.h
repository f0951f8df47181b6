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
//         step += 1;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//         p -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
//         `step` (the parameter's update count, i32 [1]) lives beside the moments on the device, and
//         the kernel computes the bias corrections from it in f64 (PyTorch's fused Adam does the
//         same), so that a step skipped on the device does not count and the host never reads it.
// adagrad (torch.optim.Adagrad):      g += weight_decay * p
//         step += 1;  clr = lr / (1 + (step - 1) * lr_decay);  sum += g^2
//         p -= clr * g / (sqrt(sum) + eps)
//         `step` and `sum` live beside each other as Adam's step and moments do; the kernel computes
//         clr from the step in f64, with 1 + (step - 1) * lr_decay as one fma (PyTorch rounds the
//         product and the sum apart: at most 1 ulp of f64 apart, far below the f32 rounding of clr).
// The formulas are written once, in kernels/optim_functors.h, for the CPU loop and the CUDA kernel.
// Shapes: param, grad and state tensors have one shape; grad and state are in any floating dtype
// (on a GPU, the state has the parameter's dtype, or f32: Adam's state_dtype).
//
// FusedStep, what a fused update reads besides them (each part optional; optim::Optimizer::step
// passes all three for an f16 parameter with an f32 master under a GradScaler): the StepScaling the
// GradScaler handed to Optimizer::step (the same struct, one layer down), and the model copy:
//   inv_scale   the gradient read is multiplied by it, in f32 (the GradScaler's 1/S: the unscale of
//               kernels/amp.h, fused into the update), one f32 element on the parameter's device;
//   found_inf   if != 0 the whole update is skipped, parameter, state and model copy untouched; read
//               by the kernel itself, so that on a GPU the host does not wait for it;
//   model_copy  after the update, receives the stored parameter rounded once to its own dtype, as a
//               cast would (the f16 weights of an f32 master: the paper's FP32 master copy in one
//               pass).
// With an f32 parameter the result is bit for bit unscale into an f32 gradient, the update, then the
// cast.
// And how the updated value is written back into an f16/bf16 parameter (the pure recipes, which keep
// no f32 master; an f32 or f64 parameter stores its result as it is, whatever the rounding):
//   Nearest     round to nearest even: an update below half an ulp is lost (the paper's Figure 2a);
//   Stochastic  stochastic::stochastic_round with word rounding_word(stream, i) for element i: an
//               update a tenth of an ulp moves the weight one ulp a tenth of the time, unbiased
//               (torchao's bf16_stochastic_round; Zamirai et al. 2020);
//   Kahan       compensated summation (Zamirai et al.): `compensation` (the parameter's shape and
//               dtype) keeps what the last rounding lost, and the next update adds it back:
//                 y = (updated - old) + c;  stored = round(old + y);  c = round(y - (stored - old))
//               (kahan_store in kernels/optim_functors.h, shared by both backends).
// The lost-update count compares the stored value with the old one in every mode.
//
// Counting on a GPU: the kernels add their counts to a per-device counter on the device instead of
// `count`, so that nothing waits. clear_update_count(device, found_inf) zeroes it (queued, no wait)
// unless found_inf is set: a step that is skipped counts nothing and leaves the counts of the last
// step taken. read_update_count(device, count) adds them to `count`: a host wait, which
// optim::Optimizer makes only when last_update() is asked for. (Optimizers stepping on one device
// share its counter: read one's counts before the other steps.) On the CPU the kernels add to
// `count` directly and both do nothing.
#pragma once

#include <cstdint>

#include "core/stochastic_round.h"
#include "core/tensor.h"
#include "kernels/backends.h"

namespace mg::kernels {

// Elements whose computed update was non-zero, and of those, how many kept their stored value.
struct UpdateCount {
  std::int64_t nonzero = 0;
  std::int64_t lost = 0;
};

// What amp::GradScaler hands to optim::Optimizer::step, and the optimizer to each fused update.
struct StepScaling {
  const Tensor* inv_scale = nullptr;  // one f32 element; the gradient read is multiplied by it; null: 1
  const Tensor* found_inf = nullptr;  // one f32 element; != 0 skips the update; null: never skip
};

// How an f16/bf16 parameter stores its updated value (above).
enum class UpdateRounding { Nearest, Stochastic, Kahan };

struct FusedStep {
  StepScaling scaling;
  Tensor* model_copy = nullptr;  // receives the updated parameter, rounded; null: none
  UpdateRounding rounding = UpdateRounding::Nearest;
  stochastic::RoundingStream stream = {};  // Stochastic: the words of this parameter at this step
  Tensor* compensation = nullptr;  // Kahan: the parameter's shape and dtype, on its device
};

struct SgdHyper {
  double lr = 0.0, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffer is initialised from the first update
};
// momentum_buffer may be null when momentum == 0.
MG_KERNELS(void sgd(Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdHyper& hyper,
                    UpdateCount& count, const FusedStep& fused = {});)

struct AdamHyper {
  double lr = 0.0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // AdamW
};
// step: i32 [1] on the parameter's device, the updates done so far (0 before the first); + 1 unless
// the update is skipped.
MG_KERNELS(void adam(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& step,
                     const AdamHyper& hyper, UpdateCount& count, const FusedStep& fused = {});)

struct AdagradHyper {
  double lr = 0.0, lr_decay = 0.0, eps = 1e-10, weight_decay = 0.0;
};
// sum: the running sum of squared gradients (its initial value is the optimizer's). step: i32 [1] on
// the parameter's device, the updates done so far (0 before the first); + 1 unless the update is skipped.
MG_KERNELS(void adagrad(Tensor& param, const Tensor& grad, Tensor& sum, Tensor& step, const AdagradHyper& hyper,
                        UpdateCount& count, const FusedStep& fused = {});)

// Zeroes the counts `device` accumulates unless *found_inf != 0 (queued; no wait).
void clear_update_count(Device device, const Tensor* found_inf = nullptr);
// Adds the counts `device` accumulated since they were last cleared to `count`.
void read_update_count(Device device, UpdateCount& count);

// The CUDA backend alone: its counts live on the device until read.
namespace cuda {
void clear_update_count(Device device, const Tensor* found_inf = nullptr);  // queued
void read_update_count(Device device, UpdateCount& count);  // waits for the device's queued updates
}  // namespace cuda

}  // namespace mg::kernels
