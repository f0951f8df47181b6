#include "optim/adagrad.h"

#include <cmath>

#include "core/factory.h"

namespace mg::optim {

Adagrad::Adagrad(std::vector<Tensor> parameters, AdagradOptions options)
    : Adagrad(std::vector<ParamGroup>{{.parameters = std::move(parameters)}}, options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions options)
    : Optimizer(std::move(groups), options.lr, options.weight_decay, store_options(options), "optim::Adagrad"),
      options_(options) {
  MG_CHECK(std::isfinite(options.lr_decay) && options.lr_decay >= 0.0,
           "optim::Adagrad: lr_decay must be finite and >= 0, got {}", options.lr_decay);
  MG_CHECK(std::isfinite(options.initial_accumulator_value) && options.initial_accumulator_value >= 0.0,
           "optim::Adagrad: initial_accumulator_value must be finite and >= 0, got {}",
           options.initial_accumulator_value);
  MG_CHECK(std::isfinite(options.eps) && options.eps > 0.0,
           "optim::Adagrad: eps must be finite and > 0, got {} (with "
           "0, a zero gradient into a zero sum is 0 / 0); PyTorch's default is 1e-10",
           options.eps);
  accumulators_.resize(Optimizer::parameters().size());
}

std::vector<Tensor> Adagrad::state() const {
  std::vector<Tensor> state;
  for (const Accumulator& a : accumulators_)
    if (a.sum.defined()) state.push_back(a.sum);
  return state;
}

void Adagrad::update(std::size_t index, Tensor& target, const Tensor& grad, double lr, double weight_decay,
                     kernels::UpdateCount& count, const kernels::FusedStep& fused) {
  Accumulator a = accumulators_[index];  // committed only once the kernel has been given it
  if (!a.sum.defined()) {
    a.sum = full(target.shape(), options_.initial_accumulator_value,
                 {.dtype = target.dtype(), .device = target.device()});
    a.step = zeros({}, {.dtype = DType::I32, .device = target.device()});
  }
  const kernels::AdagradHyper hyper{.lr = lr,
                                    .lr_decay = options_.lr_decay,
                                    .eps = options_.eps,
                                    .weight_decay = weight_decay};
  kernels::adagrad(target, grad, a.sum, a.step, hyper, count, fused);
  accumulators_[index] = a;
}

std::vector<Optimizer::StateEntry> Adagrad::state_entries() const {
  return {{"sum", StateKind::LikeParameter}, {"step", StateKind::Count}};
}

StateDict Adagrad::parameter_state(std::size_t index) const {
  const Accumulator& a = accumulators_[index];
  if (!a.sum.defined()) return {};
  // The count as the f64 scalar of every saved count (on a GPU a read: saving is not on a step's path).
  return {{"sum", a.sum}, {"step", state_scalar(a.step.item())}};
}

void Adagrad::load_parameter_state(std::size_t index, const StateDict& state) {
  Accumulator& a = accumulators_[index];
  if (state.empty()) {
    a = Accumulator{};
    return;
  }
  a.sum = copy_state(a.sum, state.at("sum"));
  a.step = full({}, state.at("step").item(), {.dtype = DType::I32, .device = a.sum.device()});
}

}  // namespace mg::optim
