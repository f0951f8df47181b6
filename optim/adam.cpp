#include "optim/adam.h"

#include "core/factory.h"

namespace mg::optim {

Adam::Adam(std::vector<Tensor> parameters, AdamOptions options)
    : Adam(std::vector<ParamGroup>{{.parameters = std::move(parameters)}}, options) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : Adam(std::move(groups), options, false, "optim::Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled_weight_decay, std::string name)
    : Optimizer(std::move(groups), options.lr, options.weight_decay, store_options(options), std::move(name)),
      options_(options),
      decoupled_weight_decay_(decoupled_weight_decay) {
  MG_CHECK(options.beta1 >= 0.0 && options.beta1 < 1.0 && options.beta2 >= 0.0 && options.beta2 < 1.0,
           "{}: betas must be in [0, 1), got ({}, {})", this->name(), options.beta1, options.beta2);
  MG_CHECK(options.eps >= 0.0, "{}: eps must be >= 0, got {}", this->name(), options.eps);
  MG_CHECK(!options.state_dtype || *options.state_dtype == DType::F32 || is_low_precision(*options.state_dtype),
           "{}: state_dtype must be f32, f16 or bf16 (the moments' dtype), got {}", this->name(),
           options.state_dtype.value_or(DType::F32));
  moments_.resize(Optimizer::parameters().size());
}

std::vector<Tensor> Adam::state() const {
  std::vector<Tensor> state;
  for (const Moments& m : moments_)
    if (m.exp_avg.defined()) state.insert(state.end(), {m.exp_avg, m.exp_avg_sq});
  return state;
}

void Adam::update(std::size_t index, Tensor& target, const Tensor& grad, double lr, double weight_decay,
                  kernels::UpdateCount& count, const kernels::FusedStep& fused) {
  Moments m = moments_[index];  // committed only once the kernel has been given it
  if (!m.exp_avg.defined()) {
    TensorOptions like{.dtype = state_dtype(index), .device = target.device()};
    m.exp_avg = zeros(target.shape(), like);
    m.exp_avg_sq = zeros(target.shape(), like);
    m.step = zeros({}, {.dtype = DType::I32, .device = target.device()});
  }
  kernels::AdamHyper hyper{.lr = lr,
                           .beta1 = options_.beta1,
                           .beta2 = options_.beta2,
                           .eps = options_.eps,
                           .weight_decay = weight_decay,
                           .decoupled_weight_decay = decoupled_weight_decay_};
  kernels::adam(target, grad, m.exp_avg, m.exp_avg_sq, m.step, hyper, count, fused);
  moments_[index] = m;
}

DType Adam::state_dtype(std::size_t index) const {
  return options_.state_dtype.value_or(Optimizer::state_dtype(index));
}

std::vector<Optimizer::StateEntry> Adam::state_entries() const {
  return {{"exp_avg", StateKind::LikeParameter}, {"exp_avg_sq", StateKind::LikeParameter}, {"step", StateKind::Count}};
}

StateDict Adam::parameter_state(std::size_t index) const {
  const Moments& m = moments_[index];
  if (!m.exp_avg.defined()) return {};
  // The count as the f64 scalar of every saved count (on a GPU a read: saving is not on a step's path).
  return {{"exp_avg", m.exp_avg}, {"exp_avg_sq", m.exp_avg_sq}, {"step", state_scalar(m.step.item())}};
}

void Adam::load_parameter_state(std::size_t index, const StateDict& state) {
  Moments& m = moments_[index];
  if (state.empty()) {
    m = Moments{};
    return;
  }
  m.exp_avg = copy_state(m.exp_avg, state.at("exp_avg"));
  m.exp_avg_sq = copy_state(m.exp_avg_sq, state.at("exp_avg_sq"));
  m.step = full({}, state.at("step").item(), {.dtype = DType::I32, .device = m.exp_avg.device()});
}

}  // namespace mg::optim
