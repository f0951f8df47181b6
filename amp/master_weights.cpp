#include "amp/master_weights.h"

#include "autograd/ops.h"
#include "core/factory.h"
#include "kernels/amp.h"
#include "kernels/copy.h"

namespace mg::amp {

namespace {

// The flat constructor's make_optimizer, called with the masters of its one group.
MasterWeights::MakeGroupedOptimizer for_one_group(const MasterWeights::MakeOptimizer& make_optimizer) {
  if (!make_optimizer) return nullptr;
  return [make_optimizer](std::vector<optim::ParamGroup> groups) {
    return make_optimizer(std::move(groups[0].parameters));
  };
}

}  // namespace

MasterWeights::MasterWeights(std::vector<Tensor> model_parameters, const MakeOptimizer& make_optimizer)
    : MasterWeights(std::vector<optim::ParamGroup>{{.parameters = std::move(model_parameters)}},
                    for_one_group(make_optimizer)) {}

MasterWeights::MasterWeights(std::vector<optim::ParamGroup> model_groups, const MakeGroupedOptimizer& make_optimizer)
    : Optimizer(model_groups, 0.0, 0.0, "amp::MasterWeights") {
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < parameters().size(); ++i) {
    const Tensor& p = parameters()[i];
    MG_CHECK(is_low_precision(p.dtype()), "amp::MasterWeights: parameter {} ({}) is {}; master weights are for "
             "models stored in f16 or bf16 (the float16_master recipe); use the optimizer directly", i, p.shape(),
             p.dtype());
    masters_.push_back(cast(p.detach(), DType::F32).set_requires_grad(true));
  }
  MG_CHECK(make_optimizer, "amp::MasterWeights: make_optimizer is empty");
  // The same groups, options included, with each parameter replaced by its master.
  std::vector<optim::ParamGroup> master_groups;
  std::size_t next = 0;
  for (optim::ParamGroup& group : model_groups) {
    for (Tensor& p : group.parameters) p = masters_[next++];
    master_groups.push_back(std::move(group));
  }
  inner_ = make_optimizer(std::move(master_groups));
  bool same = inner_ && inner_->parameters().size() == masters_.size() &&
              inner_->groups().size() == Optimizer::groups().size();
  for (std::size_t i = 0; same && i < masters_.size(); ++i) same = inner_->parameters()[i].id() == masters_[i].id();
  for (std::size_t g = 0; same && g < Optimizer::groups().size(); ++g)
    same = inner_->groups()[g].size() == Optimizer::groups()[g].size();
  MG_CHECK(same, "amp::MasterWeights: make_optimizer must return an optimizer over the master parameters it is "
           "given ({} in {} group(s)), in the same groups and order", masters_.size(), Optimizer::groups().size());
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

bool MasterWeights::gradients_converted() const {
  if (converted_.size() != parameters().size()) return false;
  for (std::size_t i = 0; i < parameters().size(); ++i) {
    const auto& grad = parameters()[i].impl().grad;
    if (grad != converted_[i].first || (grad && grad->storage->version() != converted_[i].second)) return false;
  }
  return true;
}

void MasterWeights::convert_gradients() {
  Tensor ignored = zeros({}, {.dtype = DType::F32, .device = parameters()[0].device()});
  unscale_gradients(1.0, ignored);  // no scaler: convert only (an inf then reaches the update, as without amp)
}

std::vector<Tensor> MasterWeights::gradients() {
  if (!gradients_converted()) convert_gradients();
  return inner_->gradients();
}

void MasterWeights::refresh_model(std::size_t index) {
  NoGradGuard no_grad;
  Tensor model = parameters()[index];
  kernels::cast(masters_[index], model);  // the f16 copy, rounded once from the master
  model.impl().storage->bump_version();
}

void MasterWeights::step() {
  if (!gradients_converted()) convert_gradients();
  inner_->step();
  for (std::size_t i = 0; i < masters_.size(); ++i)
    if (masters_[i].grad().defined()) refresh_model(i);
  converted_.clear();
}

void MasterWeights::zero_grad() {
  Optimizer::zero_grad();
  inner_->zero_grad();
  converted_.clear();
}

StateDict MasterWeights::state_dict() const {
  NoGradGuard no_grad;
  StateDict state = inner_->state_dict();
  for (std::size_t i = 0; i < masters_.size(); ++i)
    state[fmt::format("master.{}", i)] = masters_[i].detach().clone();
  return state;
}

void MasterWeights::load_state_dict(const StateDict& state) {
  const char* owner = "amp::MasterWeights::load_state_dict";
  const StateDict saved_masters = state_subset(state, "master.");
  MG_CHECK(saved_masters.size() == masters_.size(), "{}: the state has {} master entries ('master.<index>') but "
           "the model has {} parameters; load it into the model it was saved from", owner, saved_masters.size(),
           masters_.size());
  for (std::size_t i = 0; i < masters_.size(); ++i) {
    const std::string key = fmt::format("master.{}", i);
    auto it = state.find(key);
    MG_CHECK(it != state.end(), "{}: the state has no entry '{}'", owner, key);
    const Tensor& saved = it->second;
    MG_CHECK(saved.defined(), "{}: entry '{}' is an undefined tensor", owner, key);
    MG_CHECK(saved.shape() == masters_[i].shape() && saved.dtype() == DType::F32 &&
             saved.device() == masters_[i].device(), "{}: entry '{}' must be f32 {} on {} (the master of parameter "
             "{}), got {} {} on {}", owner, key, masters_[i].shape(), masters_[i].device(), i, saved.shape(),
             saved.dtype(), saved.device());
  }
  StateDict inner_state;
  for (const auto& [key, value] : state)
    if (!key.starts_with("master.")) inner_state.emplace(key, value);
  inner_->load_state_dict(inner_state);  // checks everything before it changes anything
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < masters_.size(); ++i) {
    masters_[i].copy_(state.at(fmt::format("master.{}", i)));
    refresh_model(i);
  }
  converted_.clear();
}

}  // namespace mg::amp
