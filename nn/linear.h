// Linear: y = x W^T + b, with weight [out_features, in_features] (PyTorch's layout) and bias [out].
// x is [..., in] (any number of leading dims, or none). Under autocast the product and bias run in f16/bf16
// (mg::linear is on the lower-precision list) with f32 accumulation.
//
// In FP8 (autograd/fp8.h): inside an FP8 region (an Autocast given Fp8Options) the layer's three GEMMs run through
// mg::fp8_linear. Delayed scaling keeps the layer's amax histories and scales in two buffers that
// enable_fp8 registers ("fp8_amax_history" [3, len], "fp8_scale" [3], f32), so they are in the state
// dict and a checkpoint resumes them; amp::Recipe::prepare calls it for every Linear of a model.
//
// In FP4 (autograd/fp4.h): enable_fp4 registers "fp4_step" (i32 [1]), the count of training forwards
// that keys the layer's stochastic rounding, and gives the layer its index among the model's Linears;
// amp::Recipe::prepare calls it for every Linear, and sets keep_bf16 on the last ones
// (Fp8Options::bf16_last_layers), which then run as mg::linear under the region's bf16 autocast.
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
  // Registers the FP4 step buffer (once) and sets the layer's index.
  void enable_fp4(std::uint32_t layer);

  Tensor weight;  // [out, in]
  Tensor bias;  // [out], or undefined
  Fp8History fp8_history;  // the buffers, or undefined tensors before enable_fp8
  Fp4State fp4_state;  // the step buffer (undefined before enable_fp4) and the layer's index
  bool keep_bf16 = false;  // inside an FP8/FP4 region, run in bf16 (one of the model's last Linears)
};

}  // namespace mg::nn
