#include "amp/master_weights.h"

#include "autograd/ops.h"
#include "core/factory.h"
#include "kernels/amp.h"
#include "kernels/copy.h"

namespace mg::amp {

MasterWeights::MasterWeights(std::vector<Tensor> model_parameters, const MakeOptimizer& make_optimizer)
    : Optimizer(std::move(model_parameters), 0.0, "amp::MasterWeights") {
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < parameters().size(); ++i) {
    const Tensor& p = parameters()[i];
    MG_CHECK(is_low_precision(p.dtype()), "amp::MasterWeights: parameter {} ({}) is {}; master weights are for "
             "models stored in f16 or bf16 (the float16_master recipe); use the optimizer directly", i, p.shape(),
             p.dtype());
    masters_.push_back(cast(p.detach(), DType::F32).set_requires_grad(true));
  }
  MG_CHECK(make_optimizer, "amp::MasterWeights: make_optimizer is empty");
  inner_ = make_optimizer(masters_);
  MG_CHECK(inner_ && inner_->parameters().size() == masters_.size(),
           "amp::MasterWeights: make_optimizer must return an optimizer over the {} master parameters it is given",
           masters_.size());
}

std::size_t MasterWeights::master_bytes() const {
  std::size_t bytes = 0;
  for (const Tensor& m : masters_) bytes += m.nbytes();
  return bytes;
}

void MasterWeights::unscale_gradients(double factor, Tensor& found_inf) {
  std::vector<Tensor> model_grads, master_grads;
  for (std::size_t i = 0; i < masters_.size(); ++i) {
    Tensor g = parameters()[i].grad();
    if (!g.defined()) {
      masters_[i].zero_grad();  // no gradient this step: the inner optimizer skips it too
      continue;
    }
    Tensor master_grad = masters_[i].grad();
    if (!master_grad.defined()) {
      master_grad = Tensor::empty(g.shape(), {.dtype = DType::F32, .device = g.device()});
      masters_[i].set_grad(master_grad);
    }
    model_grads.push_back(g);
    master_grads.push_back(master_grad);
  }
  kernels::unscale(model_grads, master_grads, factor, found_inf);
  converted_.clear();
  for (const Tensor& p : parameters()) {
    const auto& grad = p.impl().grad;
    converted_.emplace_back(grad, grad ? grad->storage->version() : 0);
  }
}

std::vector<Tensor> MasterWeights::gradients() const { return inner_->gradients(); }

void MasterWeights::step() {
  bool converted = converted_.size() == parameters().size();
  for (std::size_t i = 0; converted && i < parameters().size(); ++i) {
    const auto& grad = parameters()[i].impl().grad;
    converted = grad == converted_[i].first && (!grad || grad->storage->version() == converted_[i].second);
  }
  if (!converted) {
    Tensor ignored = zeros({}, {.dtype = DType::F32, .device = parameters()[0].device()});
    unscale_gradients(1.0, ignored);  // no scaler: convert only (an inf then reaches the update, as without amp)
  }
  inner_->step();
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < masters_.size(); ++i) {
    if (!masters_[i].grad().defined()) continue;
    Tensor model = parameters()[i];
    kernels::cast(masters_[i], model);  // the f16 copy, rounded once from the updated master
    model.impl().storage->bump_version();
  }
  converted_.clear();
}

void MasterWeights::zero_grad() {
  Optimizer::zero_grad();
  inner_->zero_grad();
  converted_.clear();
}

}  // namespace mg::amp
