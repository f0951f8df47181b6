// Linear: y = x W^T + b, with weight [out_features, in_features] (PyTorch's layout) and bias [out].
// x is [..., in] (any number of leading dims, or none). Under autocast the product and bias run in f16/bf16
// (mg::linear is on the lower-precision list) with f32 accumulation.
//
// In FP8 (autograd/fp8.h): inside an FP8 region (an Autocast given Fp8Options) the layer's three GEMMs run through
// mg::fp8_linear. Delayed scaling keeps the layer's amax histories and scales in two buffers that
// enable_fp8 registers ("fp8_amax_history" [3, len], "fp8_scale" [3], f32), so they are in the state
// dict and a checkpoint resumes them; amp::Recipe::prepare calls it for every Linear of a model.
//
// Initialized as PyTorch's: weight and bias from U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform with
// a = sqrt(5)). Call nn::init::kaiming_normal_(layer.weight) etc. for another scheme.
#pragma once

#include "autograd/fp8.h"
#include "core/generator.h"
#include "nn/module.h"

namespace mg::nn {

class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         Generator& generator = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override;
  // Registers the delayed-scaling buffers (once; a second call with another length is an error).
  void enable_fp8(int amax_history_len);

  Tensor weight;  // [out, in]
  Tensor bias;  // [out], or undefined
  Fp8History fp8_history;  // the buffers, or undefined tensors before enable_fp8
};

}  // namespace mg::nn
