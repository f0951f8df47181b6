#include "optim/adam.h"

#include "core/factory.h"

namespace mg::optim {

Adam::Adam(std::vector<Tensor> parameters, AdamOptions options)
    : Adam(std::vector<ParamGroup>{{.parameters = std::move(parameters)}}, options) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : Adam(std::move(groups), options, false, "optim::Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled_weight_decay, std::string name)
    : Optimizer(std::move(groups), options.lr, options.weight_decay, std::move(name)),
      options_(options),
      decoupled_weight_decay_(decoupled_weight_decay) {
  MG_CHECK(options.beta1 >= 0.0 && options.beta1 < 1.0 && options.beta2 >= 0.0 && options.beta2 < 1.0,
           "{}: betas must be in [0, 1), got ({}, {})", this->name(), options.beta1, options.beta2);
  MG_CHECK(options.eps >= 0.0, "{}: eps must be >= 0, got {}", this->name(), options.eps);
  moments_.resize(Optimizer::parameters().size());
}

std::vector<Tensor> Adam::state() const {
  std::vector<Tensor> state;
  for (const Moments& m : moments_)
    if (m.exp_avg.defined()) state.insert(state.end(), {m.exp_avg, m.exp_avg_sq});
  return state;
}

void Adam::update(std::size_t index, Tensor& parameter, const Tensor& grad, double lr, double weight_decay,
                  kernels::UpdateCount& count) {
  Moments m = moments_[index];  // committed only once the kernel has run
  if (!m.exp_avg.defined()) {
    TensorOptions like{.dtype = parameter.dtype(), .device = parameter.device()};
    m.exp_avg = zeros(parameter.shape(), like);
    m.exp_avg_sq = zeros(parameter.shape(), like);
  }
  ++m.steps;
  kernels::AdamHyper hyper{.lr = lr, .beta1 = options_.beta1, .beta2 = options_.beta2, .eps = options_.eps,
                           .weight_decay = weight_decay, .decoupled_weight_decay = decoupled_weight_decay_,
                           .step = m.steps};
  kernels::adam(parameter, grad, m.exp_avg, m.exp_avg_sq, hyper, count);
  moments_[index] = m;
}

std::vector<Optimizer::StateEntry> Adam::state_entries() const {
  return {{"exp_avg", StateKind::LikeParameter}, {"exp_avg_sq", StateKind::LikeParameter}, {"step", StateKind::Count}};
}

StateDict Adam::parameter_state(std::size_t index) const {
  const Moments& m = moments_[index];
  if (!m.exp_avg.defined()) return {};
  return {{"exp_avg", m.exp_avg}, {"exp_avg_sq", m.exp_avg_sq}, {"step", state_scalar(static_cast<double>(m.steps))}};
}

void Adam::load_parameter_state(std::size_t index, const StateDict& state) {
  Moments& m = moments_[index];
  if (state.empty()) {
    m = Moments{};
    return;
  }
  m.exp_avg = copy_state(m.exp_avg, state.at("exp_avg"));
  m.exp_avg_sq = copy_state(m.exp_avg_sq, state.at("exp_avg_sq"));
  m.steps = static_cast<std::int64_t>(state.at("step").item());
}

}  // namespace mg::optim
