// BatchNorm1d / BatchNorm2d and LayerNorm (mg::batch_norm, mg::layer_norm in autograd/ops.h).
//
// Statistics are always computed in f32, and BatchNorm's running statistics are f32 buffers that
// Module::to(F16) leaves in f32: they average many batches, and in f16 a momentum-0.1 update of a
// running variance near 1 would lose all but 3 bits. The affine weight (ones) and bias (zeros) are
// ordinary parameters.
#pragma once

#include "autograd/ops.h"
#include "nn/module.h"

namespace mg::nn {

// Normalizes each channel (dim 1) over the batch and, for 2d, the image: [N, C] (1d) or [N, C, H, W] (2d).
class BatchNorm : public Module {
 public:
  // spatial_dims: 0 for BatchNorm1d, 2 for BatchNorm2d (the input must have 2 + spatial_dims dims).
  BatchNorm(std::int64_t channels, int spatial_dims, double momentum = 0.1, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override;

  Tensor weight, bias;  // [C] parameters
  Tensor running_mean, running_var;  // [C] f32 buffers: zeros and ones at the start

 private:
  int spatial_dims_;
  double momentum_, eps_;
};

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(std::int64_t features, double momentum = 0.1, double eps = 1e-5)
      : BatchNorm(features, 0, momentum, eps) {}
};

class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(std::int64_t channels, double momentum = 0.1, double eps = 1e-5)
      : BatchNorm(channels, 2, momentum, eps) {}
};

// Normalizes over the last dim, [..., features], with a learned weight (ones) and bias (zeros).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::int64_t features, double eps = 1e-5);
  Tensor forward(const Tensor& x) override { return layer_norm(x, weight, bias, eps_); }
  std::string type_name() const override;

  Tensor weight, bias;  // [features]

 private:
  double eps_;
};

}  // namespace mg::nn
