#include "tools/repro/linear_operands.h"

#include <cstring>

#include "autograd/ops.h"
#include "nn/linear.h"

namespace mg::tools::repro {

namespace {

// The dotted paths of every nn::Linear below `module` (the scopes their calls open).
void collect_linears(const nn::Module& module, const std::string& path, std::set<std::string>& paths) {
  if (dynamic_cast<const nn::Linear*>(&module) != nullptr) paths.insert(path);
  for (const auto& [name, child] : module.children())
    collect_linears(*child, path.empty() ? name : path + "." + name, paths);
}

// x [..., features] as [rows, features], f32 on the CPU, a copy of its own (the step goes on with x).
Tensor as_matrix(const Tensor& x) {
  NoGradGuard no_grad;
  const std::int64_t features = x.size(-1);
  return reshape(x.detach(), {x.numel() / features, features}).to(Device::cpu()).to(DType::F32).clone();
}

}  // namespace

LinearOperands::LinearOperands(const nn::Module& model, Sink inputs, Sink output_gradients)
    : inputs_(std::move(inputs)), output_gradients_(std::move(output_gradients)) {
  collect_linears(model, "", linears_);
  add_observer(this);
}

LinearOperands::~LinearOperands() { remove_observer(this); }

bool LinearOperands::is_linear(const char* op, const std::string& scope) const {
  return (std::strcmp(op, op_name(Op::Linear)) == 0 || std::strcmp(op, "mg::fp8_linear") == 0) &&
         linears_.contains(scope);
}

void LinearOperands::forward(const char* op, const std::string& scope, const std::vector<Tensor>& inputs,
                             const Tensor&) {
  if (inputs_ && is_linear(op, scope) && !inputs.empty()) inputs_({scope, as_matrix(inputs[0])});
}

void LinearOperands::backward(const char* op, const std::string& scope, const Tensor& grad_output, const Grads&) {
  if (output_gradients_ && is_linear(op, scope) && grad_output.defined())
    output_gradients_({scope, as_matrix(grad_output)});
}

}  // namespace mg::tools::repro
