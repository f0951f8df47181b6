// Weight initialization, as torch.nn.init: each function overwrites a tensor in place (without
// recording; do it before training) with values drawn from `generator` in f32, then rounded to the
// tensor's dtype.
//
// fan_in and fan_out of a weight [out, in, k...] are in * prod(k) and out * prod(k).
//   kaiming (He et al. 2015), for ReLU networks: std = gain / sqrt(fan), gain = sqrt(2 / (1 + a^2));
//   xavier (Glorot & Bengio 2010), for tanh/linear:  std = gain * sqrt(2 / (fan_in + fan_out)).
// The uniform variants draw from U(-bound, bound) with bound = sqrt(3) * std (the same variance).
#pragma once

#include <cstdint>

#include "core/generator.h"
#include "core/tensor.h"

namespace mg::nn::init {

enum class FanMode { FanIn, FanOut };

struct Fans {
  std::int64_t in = 0, out = 0;
};
Fans fans(const Tensor& weight);  // needs at least 2 dims

void uniform_(const Tensor& tensor, double low, double high, Generator& generator = default_generator());
void normal_(const Tensor& tensor, double mean, double std, Generator& generator = default_generator());
void constant_(const Tensor& tensor, double value);

void kaiming_uniform_(const Tensor& weight, double a = 0.0, FanMode mode = FanMode::FanIn,
                      Generator& generator = default_generator());
void kaiming_normal_(const Tensor& weight, double a = 0.0, FanMode mode = FanMode::FanIn,
                     Generator& generator = default_generator());
void xavier_uniform_(const Tensor& weight, double gain = 1.0, Generator& generator = default_generator());
void xavier_normal_(const Tensor& weight, double gain = 1.0, Generator& generator = default_generator());

}  // namespace mg::nn::init
