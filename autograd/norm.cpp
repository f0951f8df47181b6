// layer_norm and batch_norm. batch_norm is composed from mean, sub, mul, rsqrt-by-pow and add, so its
// backward is the tape's (no formula of its own to get wrong; gradchecked in tests/test_ops_norm.cpp).
// layer_norm is one fused op on the CPU (kernels/layer_norm.h: a row read once, its statistics, y,
// and a backward of three lines) and the same composition on a GPU; the tests hold the fused op to
// that composition, written out again in the test.
//
// Statistics are always computed in f32 (f64 for f64): a variance is a mean of squares with
// cancellation, which f16 cannot hold (squares overflow above 256; 1 + 2^-11 rounds to 1). Under
// autocast the cast policy hands them f32 inputs and they return f32, as PyTorch's f32 list does;
// called on f16 tensors directly (the pure recipes) they compute in f32 and round the result once.
// The fused layer_norm reads an f16/bf16 x as it is under autocast and widens its rows itself: the
// values the cast would have made, without a pass that writes an f32 copy of x first.
#include <optional>

#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "kernels/layer_norm.h"

namespace mg {

namespace {

// The dtype statistics are computed in: f64 stays f64, everything else is f32.
DType statistics_dtype(const Tensor& x) { return x.dtype() == DType::F64 ? DType::F64 : DType::F32; }

// layer_norm from the tape's ops, on inputs autocast has already cast: what a GPU runs.
Tensor composed_layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const DType stats = statistics_dtype(x);
  Tensor xs = cast(x, stats);
  Tensor centered = sub(xs, mean(xs, -1, true));
  Tensor inv_std = pow(add(mean(mul(centered, centered), -1, true), eps), -0.5);
  Tensor y = mul(centered, inv_std);
  if (weight.defined()) y = mul(y, cast(weight, stats));
  if (bias.defined()) y = add(y, cast(bias, stats));
  return cast(y, x.dtype());
}

// The fused op on the CPU: saves x as it came (f16/bf16 under autocast), each row's mean and rstd.
Tensor fused_layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, DType y_dtype, double eps) {
  const std::int64_t features = x.size(-1);
  const kernels::LayerNormShape shape{.rows = x.numel() / features, .features = features, .eps = eps};
  Tensor y = Tensor::empty(x.shape(), {.dtype = y_dtype, .device = x.device()});
  Tensor mean = Tensor::empty({shape.rows}, {.dtype = statistics_dtype(x), .device = x.device()});
  Tensor rstd = Tensor::empty({shape.rows}, {.dtype = statistics_dtype(x), .device = x.device()});
  kernels::layer_norm_forward(x, weight, bias, shape, y, mean, rstd);
  std::vector<Tensor> inputs{x};
  if (weight.defined()) inputs.push_back(weight);
  if (bias.defined()) inputs.push_back(bias);
  std::optional<Saved> saved_weight;
  if (weight.defined()) saved_weight.emplace(weight);
  record(Op::LayerNorm, inputs, y,
         [x = Saved(x), weight = saved_weight, mean = Saved(mean), rstd = Saved(rstd), shape,
          has_bias = bias.defined()](const Tensor& dy, const auto& needs) {
           Grads grads(needs.size());
           const std::size_t weight_index = 1, bias_index = weight ? 2 : 1;
           if (needs[0]) grads[0] = Tensor::empty(x.get().shape(), check::like(x.get()));
           if (weight && needs[weight_index]) grads[weight_index] = Tensor::empty({shape.features}, check::like(dy));
           if (has_bias && needs[bias_index]) grads[bias_index] = Tensor::empty({shape.features}, check::like(dy));
           Tensor none;
           kernels::layer_norm_backward(dy, x, weight ? weight->get() : none, mean, rstd, shape, grads[0],
                                        weight ? grads[weight_index] : none, has_bias ? grads[bias_index] : none);
           return grads;
         });
  return y;
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, double eps) {
  constexpr Op op = Op::LayerNorm;
  const OpSpan span(op);
  check::floating(op, x_in);
  MG_CHECK(x_in.dim() >= 1 && x_in.size(-1) > 0, "{}: needs a last dim to normalize over, got shape {}", op,
           x_in.shape());
  const Shape features{x_in.size(-1)};
  MG_CHECK(!weight_in.defined() || weight_in.shape() == features, "{}: the weight must be {}, got {}", op, features,
           weight_in.shape());
  MG_CHECK(!bias_in.defined() || bias_in.shape() == features, "{}: the bias must be {}, got {}", op, features,
           bias_in.shape());
  MG_CHECK(eps >= 0, "{}: eps must be >= 0, got {}", op, eps);
  if (!x_in.device().is_cpu()) {
    auto [x, weight, bias] = autocast_inputs(op, x_in, weight_in, bias_in);
    if (weight.defined()) check::same_dtype(op, x, weight);  // no implicit casts outside autocast
    if (bias.defined()) check::same_dtype(op, x, bias);
    return composed_layer_norm(x, weight, bias, eps);
  }
  // On the CPU x is read as it is; under autocast y has the dtype the cast of x would have had.
  const DType y_dtype = autocast_input_dtype(op, x_in);
  auto [weight, bias] = autocast_inputs(op, weight_in, bias_in);
  std::vector<Tensor> on_device{x_in};
  for (const auto& [name, t] : {std::pair{"weight", weight}, {"bias", bias}}) {
    if (!t.defined()) continue;
    MG_CHECK(t.dtype() == y_dtype,
             "{}: x is {} and the {} {}; mixgrad never casts implicitly: cast one to the other's dtype with "
             "mg::cast, or run the op under mg::Autocast",
             op,
             y_dtype == x_in.dtype() ? fmt::format("{}", y_dtype)
                                     : fmt::format("{} (read as {} under autocast)", x_in.dtype(), y_dtype),
             name, t.dtype());
    on_device.push_back(t);
  }
  check::same_device(op, on_device);
  return fused_layer_norm(x_in, weight, bias, y_dtype, eps);
}

Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight_in,
                  const Tensor& bias_in, BatchNormOptions options) {
  constexpr Op op = Op::BatchNorm;
  const OpSpan span(op);
  check::floating(op, x_in);
  MG_CHECK(x_in.dim() >= 2, "{}: needs [batch, channels] or [batch, channels, ...], got {}", op, x_in.shape());
  const std::int64_t batch = x_in.size(0), channels = x_in.size(1),
                     spatial = x_in.numel() / std::max<std::int64_t>(batch * channels, 1);
  const Shape per_channel{channels};
  for (const auto& [name, t] : {std::pair{"weight", weight_in},
                                {"bias", bias_in},
                                {"running_mean", running_mean},
                                {"running_var", running_var}})
    MG_CHECK(!t.defined() || t.shape() == per_channel, "{}: the {} must be [{}] (one per channel), got {}", op, name,
             channels, t.shape());
  MG_CHECK(running_mean.defined() == running_var.defined(), "{}: pass both running statistics or neither", op);
  MG_CHECK(options.training || running_mean.defined(),
           "{}: evaluation mode needs the running statistics; pass them or use training mode", op);
  const std::int64_t count = batch * spatial;
  MG_CHECK(!options.training || count > 1,
           "{}: training needs more than one value per channel to compute a "
           "variance, got input {}",
           op, x_in.shape());
  MG_CHECK(options.momentum >= 0 && options.momentum <= 1 && options.eps >= 0,
           "{}: needs momentum in [0, 1] and eps >= 0, got {} and {}", op, options.momentum, options.eps);
  auto [x, weight, bias] = autocast_inputs(op, x_in, weight_in, bias_in);
  // No implicit casts outside autocast; the running statistics are exempt: they are f32 buffers
  // whatever the model's dtype (nn/norm.h).
  if (weight.defined()) check::same_dtype(op, x, weight);
  if (bias.defined()) check::same_dtype(op, x, bias);
  const DType stats = statistics_dtype(x);

  // [N, C, spatial]: per-channel statistics are a mean over dims 2 then 0 (equal-sized groups, so
  // the mean of means is the mean), broadcast back as [1, C, 1].
  Tensor xs = reshape(cast(x, stats), {batch, channels, spatial});
  Tensor mu, var;
  if (options.training) {
    mu = mean(mean(xs, 2, true), 0, true);
    Tensor centered = sub(xs, mu);
    var = mean(mean(mul(centered, centered), 2, true), 0, true);
    if (running_mean.defined()) {
      // running = (1 - momentum) running + momentum batch, with the unbiased variance, as PyTorch.
      NoGradGuard no_grad;
      const double m = options.momentum, unbias = static_cast<double>(count) / static_cast<double>(count - 1);
      Tensor new_mean = add(mul(cast(running_mean, stats), 1 - m), mul(reshape(mu, per_channel), m));
      Tensor new_var = add(mul(cast(running_var, stats), 1 - m), mul(reshape(var, per_channel), m * unbias));
      Tensor(running_mean).copy_(new_mean);
      Tensor(running_var).copy_(new_var);
    }
  } else {
    mu = reshape(cast(running_mean, stats), {1, channels, 1});
    var = reshape(cast(running_var, stats), {1, channels, 1});
  }
  Tensor y = mul(sub(xs, mu), pow(add(var, options.eps), -0.5));
  if (weight.defined()) y = mul(y, reshape(cast(weight, stats), {1, channels, 1}));
  if (bias.defined()) y = add(y, reshape(cast(bias, stats), {1, channels, 1}));
  return reshape(cast(y, x.dtype()), x.shape());
}

}  // namespace mg
