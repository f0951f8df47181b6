#include "optim/adam.h"

#include "core/factory.h"

namespace mg::optim {

Adam::Adam(std::vector<Tensor> parameters, AdamOptions options)
    : Optimizer(std::move(parameters), options.lr, "optim::Adam"), options_(options) {
  MG_CHECK(options.beta1 >= 0.0 && options.beta1 < 1.0 && options.beta2 >= 0.0 && options.beta2 < 1.0,
           "optim::Adam: betas must be in [0, 1), got ({}, {})", options.beta1, options.beta2);
  MG_CHECK(options.eps >= 0.0 && options.weight_decay >= 0.0, "optim::Adam: eps ({}) and weight_decay ({}) must be "
           ">= 0", options.eps, options.weight_decay);
  moments_.resize(Optimizer::parameters().size());
}

std::vector<Tensor> Adam::state() const {
  std::vector<Tensor> state;
  for (const Moments& m : moments_)
    if (m.exp_avg.defined()) state.insert(state.end(), {m.exp_avg, m.exp_avg_sq});
  return state;
}

void Adam::update(std::size_t index, Tensor& parameter, const Tensor& grad, double lr, kernels::UpdateCount& count) {
  Moments m = moments_[index];  // committed only once the kernel has run
  if (!m.exp_avg.defined()) {
    TensorOptions like{.dtype = parameter.dtype(), .device = parameter.device()};
    m.exp_avg = zeros(parameter.shape(), like);
    m.exp_avg_sq = zeros(parameter.shape(), like);
  }
  ++m.steps;
  kernels::AdamHyper hyper{.lr = lr, .beta1 = options_.beta1, .beta2 = options_.beta2, .eps = options_.eps,
                           .weight_decay = options_.weight_decay,
                           .decoupled_weight_decay = options_.decoupled_weight_decay, .step = m.steps};
  kernels::adam(parameter, grad, m.exp_avg, m.exp_avg_sq, hyper, count);
  moments_[index] = m;
}

}  // namespace mg::optim
