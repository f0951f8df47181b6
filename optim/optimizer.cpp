#include "optim/optimizer.h"

#include <cmath>
#include <unordered_set>

#include "autograd/tape.h"
#include "kernels/amp.h"

namespace mg::optim {

Optimizer::Optimizer(std::vector<Tensor> parameters, double lr, std::string name)
    : parameters_(std::move(parameters)), lr_(lr), name_(std::move(name)) {
  MG_CHECK(!parameters_.empty(), "{}: got no parameters to optimize", name_);
  MG_CHECK(std::isfinite(lr) && lr >= 0.0, "{}: the learning rate must be finite and >= 0, got {}", name_, lr);
  std::unordered_set<std::uint64_t> seen;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor& p = parameters_[i];
    MG_CHECK(p.defined(), "{}: parameter {} is undefined", name_, i);
    MG_CHECK(is_floating(p.dtype()) && p.is_leaf() && p.requires_grad(),
             "{}: parameter {} ({} {}) must be a floating leaf that requires grad; call set_requires_grad(true)",
             name_, i, p.shape(), p.dtype());
    MG_CHECK(seen.insert(p.id()).second, "{}: parameter {} ({}) appears twice in the list", name_, i, p.shape());
  }
}

void Optimizer::step() {
  NoGradGuard no_grad;
  const double rate = lr();
  kernels::UpdateCount count;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    Tensor& p = parameters_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    update(i, p, g, rate, count);
    p.impl().storage->bump_version();
  }
  last_update_ = count;
  ++step_count_;
}

void Optimizer::zero_grad() {
  for (Tensor& p : parameters_) p.zero_grad();
}

double Optimizer::lr() const { return schedule_ ? lr_ * schedule_(step_count()) : lr_; }

void Optimizer::set_lr(double lr) {
  MG_CHECK(std::isfinite(lr) && lr >= 0.0, "{}: the learning rate must be finite and >= 0, got {}", name_, lr);
  lr_ = lr;
}

void Optimizer::set_schedule(std::function<double(std::int64_t)> factor) { schedule_ = std::move(factor); }

std::vector<Tensor> Optimizer::gradients() const {
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters_)
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

void Optimizer::unscale_gradients(double factor, Tensor& found_inf) {
  std::vector<Tensor> grads = gradients();
  for (const Tensor& g : grads)
    MG_CHECK(g.dtype() != DType::F16, "{}: cannot unscale f16 gradients in place: dividing them by the loss scale "
             "in f16 flushes the small ones to zero again. Keep f32 parameters (mixed_float16), or wrap the "
             "optimizer in amp::MasterWeights (float16_master) to unscale into f32 master gradients", name_);
  kernels::unscale(grads, grads, factor, found_inf);
  for (Tensor& g : grads) g.impl().storage->bump_version();
}

std::size_t Optimizer::state_bytes() const {
  std::size_t bytes = 0;
  for (const Tensor& t : state()) bytes += t.nbytes();
  return bytes;
}

}  // namespace mg::optim
