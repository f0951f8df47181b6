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
  if (const Fp8Options* fp8 = fp8_autocast_options(); fp8 != nullptr && !keep_bf16)
    return fp8_linear(x, weight, bias, *fp8, fp8_history.scale.defined() ? &fp8_history : nullptr,
                      fp4_state.step.defined() ? &fp4_state : nullptr);
  return linear(x, weight, bias);
}

void Linear::enable_fp8(int amax_history_len) {
  if (fp8_history.scale.defined()) {
    MG_CHECK(fp8_history.amax_history.size(1) == amax_history_len,
             "nn::{}: FP8 is already enabled with an amax history of {} steps, not {}", type_name(),
             fp8_history.amax_history.size(1), amax_history_len);
    return;
  }
  const Fp8History fresh = Fp8History::fresh(amax_history_len);
  fp8_history.amax_history = register_buffer("fp8_amax_history", fresh.amax_history, /*keep_f32=*/true);
  fp8_history.scale = register_buffer("fp8_scale", fresh.scale, /*keep_f32=*/true);
}

void Linear::enable_fp4(std::uint32_t layer) {
  fp4_state.layer = layer;
  if (!fp4_state.step.defined()) fp4_state.step = register_buffer("fp4_step", zeros({1}, {.dtype = DType::I32}));
}

std::string Linear::type_name() const {
  return fmt::format("Linear({}, {}{})", weight.size(1), weight.size(0), bias.defined() ? "" : ", bias=false");
}

}  // namespace mg::nn
