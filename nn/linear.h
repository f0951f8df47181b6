// Linear: y = x W^T + b, with weight [out_features, in_features] (PyTorch's layout) and bias [out].
// x is [..., in] (any number of leading dims, or none). Under autocast the product and bias run in f16/bf16
// (mg::linear is on the lower-precision list) with f32 accumulation.
//
// Initialized as PyTorch's: weight and bias from U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform with
// a = sqrt(5)). Call nn::init::kaiming_normal_(layer.weight) etc. for another scheme.
#pragma once

#include "core/generator.h"
#include "nn/module.h"

namespace mg::nn {

class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         Generator& generator = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override;

  Tensor weight;  // [out, in]
  Tensor bias;  // [out], or undefined
};

}  // namespace mg::nn
