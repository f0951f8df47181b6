#include "nn/module.h"

#include <fmt/format.h>

#include <map>

#include "autograd/ops.h"
#include "autograd/tape.h"

namespace mg::nn {

// ---- registration

void Module::check_new_name(const std::string& name) const {
  MG_CHECK(!name.empty() && name.find('.') == std::string::npos,
           "nn::Module ({}): the name '{}' must be non-empty and contain no '.'", type_name(), name);
  bool taken = false;
  for (const auto& [n, t] : parameters_) taken |= n == name;
  for (const Buffer& b : buffers_) taken |= b.name == name;
  for (const auto& [n, m] : children_) taken |= n == name;
  MG_CHECK(!taken, "nn::Module ({}): the name '{}' is registered twice", type_name(), name);
}

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  check_new_name(name);
  MG_CHECK(value.defined() && is_floating(value.dtype()) && value.is_leaf(),
           "nn::Module ({}): parameter '{}' must be a defined floating leaf", type_name(), name);
  value.set_requires_grad(true);
  parameters_.emplace_back(name, value);
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value, bool keep_f32) {
  check_new_name(name);
  MG_CHECK(value.defined() && !value.requires_grad(),
           "nn::Module ({}): buffer '{}' must be defined and not require grad (a trained tensor is a parameter)",
           type_name(), name);
  buffers_.push_back({name, value, keep_f32});
  return value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  MG_CHECK(module != nullptr, "nn::Module ({}): child '{}' is null", type_name(), name);
  if (module->name_in_parent_.empty()) module->name_in_parent_ = name;
  children_.emplace_back(name, std::move(module));
}

// ---- calling

Tensor Module::operator()(const Tensor& input) {
  if (name_in_parent_.empty()) return forward(input);
  NameScope scope(name_in_parent_);
  return forward(input);
}

// ---- traversal

void Module::collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [name, t] : parameters_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect_parameters(prefix + name + ".", out);
}

void Module::collect_buffers(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out,
                             bool f32_only_too) const {
  for (const Buffer& b : buffers_)
    if (f32_only_too || !b.keep_f32) out.emplace_back(prefix + b.name, b.value);
  for (const auto& [name, child] : children_) child->collect_buffers(prefix + name + ".", out, f32_only_too);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect_parameters("", out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect_buffers("", out);
  return out;
}

std::int64_t Module::parameter_count() const {
  std::int64_t count = 0;
  for (const auto& [name, t] : named_parameters()) count += t.numel();
  return count;
}

// ---- mode, dtype, gradients

void Module::train(bool training) {
  training_ = training;
  for (auto& [name, child] : children_) child->train(training);
}

void Module::to(DType dtype) {
  MG_CHECK(is_floating(dtype), "nn::Module::to: needs a floating dtype, got {}", dtype);
  for (auto& [name, p] : named_parameters()) cast_storage_(p, dtype);
  std::vector<std::pair<std::string, Tensor>> buffers;
  collect_buffers("", buffers, /*f32_only_too=*/false);
  for (auto& [name, b] : buffers)
    if (is_floating(b.dtype())) cast_storage_(b, dtype);
}

void Module::to(Device device) {
  for (auto& [name, p] : named_parameters()) move_storage_(p, device);
  for (auto& [name, b] : named_buffers()) move_storage_(b, device);
}

void Module::zero_grad() {
  for (auto& [name, p] : named_parameters()) p.zero_grad();
}

// ---- state

StateDict Module::state_dict() const {
  StateDict state;
  for (auto& [name, t] : named_parameters()) state[name] = t;
  for (auto& [name, t] : named_buffers()) state[name] = t;
  return state;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  const StateDict own = state_dict();
  // Every check first, so that a bad file changes nothing.
  for (const auto& [name, value] : state) {
    auto it = own.find(name);
    MG_CHECK(it != own.end(),
             "nn::Module::load_state_dict ({}): the state has '{}', which this model does not; "
             "was it saved from a different architecture?",
             type_name(), name);
    MG_CHECK(value.defined() && value.shape() == it->second.shape() && value.dtype() == it->second.dtype(),
             "nn::Module::load_state_dict ({}): '{}' is {} {} in the state but {} {} in the model; build the model "
             "with the same sizes and precision (Module::to) before loading",
             type_name(), name, value.defined() ? fmt::format("{}", value.shape()) : "undefined",
             value.defined() ? fmt::format("{}", value.dtype()) : "", it->second.shape(), it->second.dtype());
  }
  if (strict)
    for (const auto& [name, value] : own)
      MG_CHECK(state.count(name),
               "nn::Module::load_state_dict ({}): the state lacks '{}' ({} {}); pass "
               "strict = false to load a part of the model",
               type_name(), name, value.shape(), value.dtype());
  NoGradGuard no_grad;
  for (const auto& [name, value] : state) Tensor(own.at(name)).copy_(value);
}

std::string Module::to_string() const {
  std::string out;
  append_tree(out, "", 0);
  return out;
}

void Module::append_tree(std::string& out, const std::string& name, int depth) const {
  out += fmt::format("{:{}}{}{}", "", 2 * depth, name.empty() ? "" : "(" + name + "): ", type_name());
  std::int64_t own = 0;
  for (const auto& [n, t] : parameters_) own += t.numel();
  if (own > 0) out += fmt::format("  [{} parameters]", own);
  out += "\n";
  for (const auto& [child_name, child] : children_) child->append_tree(out, child_name, depth + 1);
}

// ---- Sequential

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(children().size()), std::move(module));
}

Module& Sequential::operator[](std::size_t index) const {
  MG_CHECK(index < children().size(), "nn::Sequential: index {} is out of range for {} modules", index,
           children().size());
  return *children()[index].second;
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& [name, module] : children()) x = (*module)(x);
  return x;
}

}  // namespace mg::nn
