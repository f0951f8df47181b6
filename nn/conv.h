// Conv2d, MaxPool2d and AvgPool2d over [batch, channels, height, width] (mg::conv2d, mg::max_pool2d,
// mg::avg_pool2d in autograd/ops.h). Square kernels, strides and padding.
//
// Conv2d's weight is [out_channels, in_channels, kernel, kernel], bias [out_channels], initialized as
// PyTorch's: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in_channels * kernel^2.
#pragma once

#include "autograd/ops.h"
#include "core/generator.h"
#include "nn/module.h"

namespace mg::nn {

class Conv2d : public Module {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel, Conv2dOptions options = {},
         bool bias = true, Generator& generator = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override;

  Tensor weight;  // [out, in, kernel, kernel]
  Tensor bias;  // [out], or undefined

 private:
  Conv2dOptions options_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Pool2dOptions options) : options_(options) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, options_); }
  std::string type_name() const override;

 private:
  Pool2dOptions options_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Pool2dOptions options) : options_(options) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, options_); }
  std::string type_name() const override;

 private:
  Pool2dOptions options_;
};

}  // namespace mg::nn
