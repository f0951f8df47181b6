#include "optim/clip.h"

#include <algorithm>
#include <cmath>

#include "core/factory.h"
#include "kernels/amp.h"

namespace mg::optim {

namespace {

constexpr std::int64_t kChunk = 1024;

// (sum |g|^p)^(1/p) over every element, or max |g| for p = inf; accumulated in f64.
double total_norm(const std::vector<Tensor>& gradients, double p) {
  const bool max_norm = std::isinf(p);
  double accumulated = 0.0;  // sum of |g|^p, or the largest |g|
  bool saw_nan = false;  // max would drop a NaN that the sum keeps: remember it
  double values[kChunk];
  for (const Tensor& g : gradients) {
    // A gradient on a GPU is read from a host copy (a wait per tensor; clipping is not a hot path yet).
    std::vector<unsigned char> host;
    if (!g.device().is_cpu()) host = g.host_bytes("optim::clip_grad_norm_");
    const auto* bytes = g.device().is_cpu() ? static_cast<const char*>(g.data_ptr())
                                            : reinterpret_cast<const char*>(host.data());
    for (std::int64_t start = 0; start < g.numel(); start += kChunk) {
      const std::int64_t n = std::min(kChunk, g.numel() - start);
      convert(bytes + dtype_bytes(g.dtype(), start), g.dtype(), values, DType::F64, n);
      for (std::int64_t i = 0; i < n; ++i) {
        const double magnitude = std::fabs(values[i]);
        if (max_norm) {
          saw_nan |= std::isnan(magnitude);
          accumulated = std::max(accumulated, magnitude);
        } else {
          accumulated += p == 2.0 ? magnitude * magnitude : p == 1.0 ? magnitude : std::pow(magnitude, p);
        }
      }
    }
  }
  if (max_norm) return saw_nan ? NAN : accumulated;
  return p == 2.0 ? std::sqrt(accumulated) : p == 1.0 ? accumulated : std::pow(accumulated, 1.0 / p);
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& gradients, double max_norm, double norm_type) {
  MG_CHECK(max_norm > 0.0, "optim::clip_grad_norm_: max_norm must be > 0 (or inf, never clip), got {}", max_norm);
  MG_CHECK(norm_type > 0.0,
           "optim::clip_grad_norm_: norm_type must be > 0 (2: Euclidean, inf: largest magnitude), "
           "got {}",
           norm_type);
  for (std::size_t i = 0; i < gradients.size(); ++i) {
    const Tensor& g = gradients[i];
    MG_CHECK(g.defined(),
             "optim::clip_grad_norm_: gradient {} is undefined; pass only the gradients that exist "
             "(optimizer.gradients(), or clip_grad_norm_(optimizer, ...))",
             i);
    MG_CHECK(is_floating(g.dtype()) && g.device() == gradients[0].device(),
             "optim::clip_grad_norm_: gradient {} "
             "is {} on {}; gradients must be floating tensors on one device ({})",
             i, g.dtype(), g.device(), gradients[0].device());
  }
  const double total = total_norm(gradients, norm_type);
  const double coefficient = max_norm / (total + 1e-6);
  // PyTorch multiplies by min(coefficient, 1) always; skipping a multiplication by 1 is the same
  // result. Written as !(>= 1) so that a NaN coefficient (a NaN total) scales, as PyTorch does.
  if (!(coefficient >= 1.0) && !gradients.empty()) {
    // In place, also for f16 gradients: the factor is <= 1, so nothing can overflow, and each
    // element is rounded once, as any f16 result is. (The flush to zero that forbids unscaling f16
    // gradients in place comes from the huge 1/S; a clipping factor shrinks the norm to max_norm,
    // which leaves the elements that matter far above f16's subnormals.)
    // An inf/NaN found here was already there (or is PyTorch's NaN): the flag is ignored.
    // The factor in f64 on the CPU (f64 gradients use it whole, the others round it to f32, as a GPU
    // kernel reads it).
    const Device device = gradients[0].device();
    const DType factor_dtype = device.is_cpu() ? DType::F64 : DType::F32;
    Tensor ignored = zeros({}, {.device = device});
    kernels::unscale(gradients, gradients, full({}, coefficient, {.dtype = factor_dtype, .device = device}), ignored);
    for (const Tensor& g : gradients) g.impl().storage->bump_version();
  }
  return total;
}

double clip_grad_norm_(Optimizer& optimizer, double max_norm, double norm_type) {
  return clip_grad_norm_(optimizer.gradients(), max_norm, norm_type);
}

}  // namespace mg::optim
