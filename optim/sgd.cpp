#include "optim/sgd.h"

#include <cmath>

#include "core/factory.h"

namespace mg::optim {

SGD::SGD(std::vector<Tensor> parameters, SgdOptions options)
    : SGD(std::vector<ParamGroup>{{.parameters = std::move(parameters)}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SgdOptions options)
    : Optimizer(std::move(groups), options.lr, options.weight_decay, store_options(options), "optim::SGD"),
      options_(options) {
  MG_CHECK(options.momentum >= 0.0 && options.dampening >= 0.0,
           "optim::SGD: momentum ({}) and dampening ({}) must "
           "be >= 0",
           options.momentum, options.dampening);
  MG_CHECK(!options.nesterov || (options.momentum > 0.0 && options.dampening == 0.0),
           "optim::SGD: Nesterov momentum needs momentum > 0 and dampening = 0 (got {} and {})", options.momentum,
           options.dampening);
  momentum_buffers_.resize(Optimizer::parameters().size());
}

std::vector<Tensor> SGD::state() const {
  std::vector<Tensor> state;
  for (const Tensor& buffer : momentum_buffers_)
    if (buffer.defined()) state.push_back(buffer);
  return state;
}

void SGD::update(std::size_t index, Tensor& target, const Tensor& grad, double lr, double weight_decay,
                 kernels::UpdateCount& count, const kernels::FusedStep& fused) {
  kernels::SgdHyper hyper{.lr = lr,
                          .momentum = options_.momentum,
                          .dampening = options_.dampening,
                          .weight_decay = weight_decay,
                          .nesterov = options_.nesterov};
  if (options_.momentum == 0.0) return kernels::sgd(target, grad, nullptr, hyper, count, fused);
  // The buffer becomes state only once the kernel has been given it.
  Tensor buffer = momentum_buffers_[index];
  hyper.first_step = !buffer.defined();
  if (hyper.first_step) buffer = zeros(target.shape(), {.dtype = target.dtype(), .device = target.device()});
  kernels::sgd(target, grad, &buffer, hyper, count, fused);
  momentum_buffers_[index] = buffer;
}

std::vector<Optimizer::StateEntry> SGD::state_entries() const {
  if (options_.momentum == 0.0) return {};
  return {{"momentum_buffer", StateKind::LikeParameter}};
}

StateDict SGD::parameter_state(std::size_t index) const {
  if (!momentum_buffers_[index].defined()) return {};
  return {{"momentum_buffer", momentum_buffers_[index]}};
}

void SGD::load_parameter_state(std::size_t index, const StateDict& state) {
  Tensor& buffer = momentum_buffers_[index];
  buffer = state.empty() ? Tensor() : copy_state(buffer, state.at("momentum_buffer"));
}

}  // namespace mg::optim
