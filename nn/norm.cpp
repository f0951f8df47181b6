#include "nn/norm.h"

#include "core/factory.h"

namespace mg::nn {

BatchNorm::BatchNorm(std::int64_t channels, int spatial_dims, double momentum, double eps)
    : spatial_dims_(spatial_dims), momentum_(momentum), eps_(eps) {
  MG_CHECK(channels > 0 && momentum >= 0 && momentum <= 1 && eps >= 0,
           "nn::BatchNorm: needs channels > 0, momentum in [0, 1] and eps >= 0; got {}, {}, {}", channels, momentum,
           eps);
  weight = register_parameter("weight", ones({channels}));
  bias = register_parameter("bias", zeros({channels}));
  running_mean = register_buffer("running_mean", zeros({channels}), /*keep_f32=*/true);
  running_var = register_buffer("running_var", ones({channels}), /*keep_f32=*/true);
}

Tensor BatchNorm::forward(const Tensor& x) {
  MG_CHECK(x.defined() && x.dim() == 2 + spatial_dims_, "{}: expects a {}-D input, got {}", type_name(),
           2 + spatial_dims_, x.defined() ? x.shape() : Shape{});
  return batch_norm(x, running_mean, running_var, weight, bias,
                    {.training = is_training(), .momentum = momentum_, .eps = eps_});
}

std::string BatchNorm::type_name() const {
  return fmt::format("BatchNorm{}d({}, momentum={}, eps={})", spatial_dims_ == 0 ? 1 : spatial_dims_, weight.size(0),
                     momentum_, eps_);
}

LayerNorm::LayerNorm(std::int64_t features, double eps) : eps_(eps) {
  MG_CHECK(features > 0 && eps >= 0, "nn::LayerNorm: needs features > 0 and eps >= 0, got {} and {}", features, eps);
  weight = register_parameter("weight", ones({features}));
  bias = register_parameter("bias", zeros({features}));
}

std::string LayerNorm::type_name() const { return fmt::format("LayerNorm({}, eps={})", weight.size(0), eps_); }

}  // namespace mg::nn
