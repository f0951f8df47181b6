#include "nn/activation.h"

#include "autograd/ops.h"

namespace mg::nn {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }
Tensor GELU::forward(const Tensor& x) { return gelu(x); }
Tensor Tanh::forward(const Tensor& x) { return tanh(x); }
Tensor SiLU::forward(const Tensor& x) { return silu(x); }
Tensor LeakyReLU::forward(const Tensor& x) { return leaky_relu(x, negative_slope_); }

std::string LeakyReLU::type_name() const { return fmt::format("LeakyReLU(negative_slope={})", negative_slope_); }

Dropout::Dropout(double p, Generator& generator) : p_(p), generator_(&generator) {
  MG_CHECK(p >= 0 && p <= 1, "nn::Dropout: the drop probability must be in [0, 1], got {}", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training(), *generator_); }

std::string Dropout::type_name() const { return fmt::format("Dropout(p={})", p_); }

Tensor Flatten::forward(const Tensor& x) {
  MG_CHECK(x.defined() && x.dim() >= 1, "nn::Flatten: needs an input with a batch dim, got {}",
           x.defined() ? x.shape() : Shape{});
  return reshape(x, {x.size(0), -1});
}

}  // namespace mg::nn
