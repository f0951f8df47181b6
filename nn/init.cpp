#include "nn/init.h"

#include <cmath>

#include "autograd/tape.h"
#include "core/factory.h"

namespace mg::nn::init {

namespace {

void overwrite(const Tensor& tensor, const Tensor& values) {
  NoGradGuard no_grad;  // an initialization is not part of any graph
  Tensor(tensor).copy_(values);
}

double fan(const Tensor& weight, FanMode mode) {
  Fans f = fans(weight);
  return static_cast<double>(mode == FanMode::FanIn ? f.in : f.out);
}

}  // namespace

Fans fans(const Tensor& weight) {
  MG_CHECK(weight.defined() && weight.dim() >= 2,
           "nn::init: fan_in and fan_out need a weight with at least 2 dims [out, in, ...], got {}",
           weight.defined() ? weight.shape() : Shape{});
  const std::int64_t receptive = weight.numel() / std::max<std::int64_t>(weight.size(0) * weight.size(1), 1);
  return {weight.size(1) * receptive, weight.size(0) * receptive};
}

void uniform_(const Tensor& tensor, double low, double high, Generator& generator) {
  MG_CHECK(low < high, "nn::init::uniform_: needs low < high, got {} and {}", low, high);
  overwrite(tensor, uniform(tensor.shape(), low, high, generator, {.device = tensor.device()}));
}

void normal_(const Tensor& tensor, double mean, double std, Generator& generator) {
  MG_CHECK(std >= 0, "nn::init::normal_: the standard deviation must be >= 0, got {}", std);
  NoGradGuard no_grad;
  Tensor values = randn(tensor.shape(), generator);
  float* v = values.data<float>();
  for (std::int64_t i = 0; i < values.numel(); ++i) v[i] = static_cast<float>(mean + std * v[i]);
  overwrite(tensor, values.to(tensor.device()));
}

void constant_(const Tensor& tensor, double value) {
  overwrite(tensor, full(tensor.shape(), value, {.device = tensor.device()}));
}

void kaiming_uniform_(const Tensor& weight, double a, FanMode mode, Generator& generator) {
  const double std = std::sqrt(2.0 / (1.0 + a * a)) / std::sqrt(fan(weight, mode));
  const double bound = std::sqrt(3.0) * std;
  uniform_(weight, -bound, bound, generator);
}

void kaiming_normal_(const Tensor& weight, double a, FanMode mode, Generator& generator) {
  normal_(weight, 0.0, std::sqrt(2.0 / (1.0 + a * a)) / std::sqrt(fan(weight, mode)), generator);
}

void xavier_uniform_(const Tensor& weight, double gain, Generator& generator) {
  const Fans f = fans(weight);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(f.in + f.out));
  uniform_(weight, -bound, bound, generator);
}

void xavier_normal_(const Tensor& weight, double gain, Generator& generator) {
  const Fans f = fans(weight);
  normal_(weight, 0.0, gain * std::sqrt(2.0 / static_cast<double>(f.in + f.out)), generator);
}

}  // namespace mg::nn::init
