#include "nn/linear.h"

#include <cmath>

#include "autograd/ops.h"
#include "core/factory.h"
#include "nn/init.h"

namespace mg::nn {

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool with_bias, Generator& generator) {
  MG_CHECK(in_features > 0 && out_features > 0, "nn::Linear: needs positive sizes, got in {} and out {}", in_features,
           out_features);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", uniform({out_features, in_features}, -bound, bound, generator));
  if (with_bias) bias = register_parameter("bias", uniform({out_features}, -bound, bound, generator));
}

Tensor Linear::forward(const Tensor& x) {
  MG_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == weight.size(1),
           "nn::Linear({}, {}): expects input [..., {}], got {}", weight.size(1), weight.size(0), weight.size(1),
           x.defined() ? x.shape() : Shape{});
  return linear(x, weight, bias);
}

std::string Linear::type_name() const {
  return fmt::format("Linear({}, {}{})", weight.size(1), weight.size(0), bias.defined() ? "" : ", bias=false");
}

}  // namespace mg::nn
