// The tensors an FP8 recipe quantises, caught as a step makes them: every nn::Linear's input in the
// forward pass (E9's activations) and its output gradient in the backward pass (E11's gradients).
//
// The FP8 recipes run only nn::Linear's GEMMs in FP8 (amp/recipe.h), so these are exactly their
// operands besides the weights: x of y = x W^T (E4M3) and dy of dx = dy W and dW = dy^T x (E5M2 in
// the hybrid recipes). An op observer (autograd/tape.h) sees the Linear's op, "linear" under
// mixed_bfloat16 or "mg::fp8_linear" under an FP8 recipe, in the scope of the Linear module; ops of
// that name elsewhere (the LSTM's input projection, which no recipe runs in FP8) are left out.
#pragma once

#include <functional>
#include <set>
#include <string>

#include "autograd/tape.h"
#include "core/tensor.h"
#include "nn/module.h"

namespace mg::tools::repro {

// One operand: the Linear's path in the model ("3", "blocks.0.mlp.fc") and its values viewed as a
// matrix [rows, features] (the leading dimensions folded into rows), f32, on the CPU.
struct LinearOperand {
  std::string layer;
  Tensor values;
};

// While alive, hands every Linear input (forward) and output gradient (backward) of `model` to the
// sinks given (either may be empty).
class LinearOperands : public OpObserver {
 public:
  using Sink = std::function<void(const LinearOperand&)>;
  LinearOperands(const nn::Module& model, Sink inputs, Sink output_gradients);
  ~LinearOperands() override;
  LinearOperands(const LinearOperands&) = delete;
  LinearOperands& operator=(const LinearOperands&) = delete;

  void forward(const char* op, const std::string& scope, const std::vector<Tensor>& inputs,
               const Tensor& output) override;
  void backward(const char* op, const std::string& scope, const Tensor& grad_output, const Grads& grads) override;

 private:
  bool is_linear(const char* op, const std::string& scope) const;
  std::set<std::string> linears_;  // the paths of the model's nn::Linear modules
  Sink inputs_, output_gradients_;
};

}  // namespace mg::tools::repro
