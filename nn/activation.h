// Layers without parameters: activations, Dropout and Flatten.
#pragma once

#include "core/generator.h"
#include "nn/module.h"

namespace mg::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ReLU"; }
};

class GELU : public Module {  // the exact (erf) form
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GELU"; }
};

class SiLU : public Module {  // x * sigmoid(x)
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SiLU"; }
};

class LeakyReLU : public Module {  // x where x > 0, negative_slope * x elsewhere
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope_(negative_slope) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override;

 private:
  double negative_slope_;
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Tanh"; }
};

// Zeroes each element with probability p in training mode (scaling the rest by 1 / (1 - p)); the
// identity in evaluation mode. Masks come from `generator` (default: mg::default_generator(), whose
// state a checkpoint saves, so a resumed run draws the same masks).
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator& generator = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override;
  // What a layer that drops inside a fused op of its own uses (nn::CausalSelfAttention): the
  // probability while training (0 in evaluation), and the generator.
  double active_p() const { return is_training() ? p_ : 0.0; }
  Generator& generator() const { return *generator_; }

 private:
  double p_;
  Generator* generator_;
};

// [N, d1, d2, ...] -> [N, d1 * d2 * ...] (a view).
class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Flatten"; }
};

}  // namespace mg::nn
