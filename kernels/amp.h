// Kernels of loss scaling: passes over every gradient of a model at once, and the scale's update.
// Every number they share with the GradScaler (the factor, the scale, the inf/NaN flag) is a
// one-element tensor on the gradients' device, so that on a GPU nothing here makes the host wait.
//
// unscale:  for each i, dst[i] = src[i] * factor, computed in f32 (f64 when dst is f64) and rounded
//           once into dst[i]'s dtype; factor is one f32 element (the GradScaler's 1/S, computed on
//           the device as 1.0f / scale, or clipping's max_norm / total; on the CPU it may be an f64,
//           which f64 gradients use whole and the others round to f32). found_inf (one f32 element)
//           is set to 1 if any stored result is inf or NaN and is otherwise left as it was, so calls
//           for several optimizers accumulate into one flag (PyTorch's
//           _amp_foreach_non_finite_check_and_unscale_). src[i] and dst[i] have one shape and
//           device; dst[i] may be src[i] (in place) or an f32 master gradient of an f16 src[i]
//           (conversion and unscaling in the same pass).
// find_non_finite: unscale's check without its store: found_inf = 1 if any src[i] * factor (in f32)
//           is inf or NaN. The GradScaler's check before a fused optimizer step, which reads the
//           scaled gradients and the factor itself (kernels/optim.h): one read of every gradient.
// Cost: one read of every src (and one write of every dst). The CUDA backend runs each pass as one
// multi-tensor launch (kernels/cuda/amp.cu).
//
// update_scale: PyTorch's _amp_update_scale_ on one-element tensors, so that the scale lives on the
//           device next to found_inf: scale (f32 [1]), growth_tracker (i32 [1]) and found_inf
//           (f32 [1]) on one device. If found_inf != 0: scale *= backoff_factor, tracker = 0.
//           Otherwise tracker += 1, and when it reaches growth_interval: scale *= growth_factor
//           (kept only while the result is finite), tracker = 0. Products in f64, rounded to f32.
//           With a ScaleRule's limits, also: an overflow backs off only
//           when it makes `hysteresis` in a row (counted in overflow_streak, i32 [1]; each one is
//           still a skipped step and resets the tracker), the backoff stops at min_scale, and a
//           growth that would pass max_scale is not made. So the whole policy runs on the device.
// Tests: build/tests/test_amp_scaler, build/tests/test_cuda_amp.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/host_device.h"
#include "core/tensor.h"
#include "kernels/backends.h"

namespace mg::kernels {

void find_non_finite(const std::vector<Tensor>& src, const Tensor& factor, Tensor& found_inf);
// The rule of update_scale, the one loss-scale rule of mixgrad (amp::GradScalerOptions embeds it):
// PyTorch's three numbers and defaults, and the limits mixgrad adds (their defaults are PyTorch's
// behaviour: no hysteresis, no floor, no cap).
struct ScaleRule {
  double growth_factor = 2.0;  // the scale's growth after growth_interval clean steps
  double backoff_factor = 0.5;  // its backoff after an overflow
  std::int64_t growth_interval = 2000;  // consecutive clean steps before the scale grows
  std::int64_t hysteresis = 1;  // consecutive overflows per backoff (each one still skips its step)
  double min_scale = 0.0;  // the backoff stops here
  double max_scale = FLT_MAX;  // growth stops before passing this
};
// An mg::Error naming `owner` unless growth_factor > 1, backoff_factor in (0, 1), growth_interval
// and hysteresis in [1, 2^31) and 0 <= min_scale <= max_scale <= the largest f32.
void check_rule(const ScaleRule& rule, std::string_view owner);
// The backends' unscale with dst empty is find_non_finite (check only).
MG_KERNELS(void unscale(const std::vector<Tensor>& src, const std::vector<Tensor>& dst, const Tensor& factor,
                        Tensor& found_inf);
           // overflow_streak is i32 [1] beside the scale (may be undefined when hysteresis is 1).
           void update_scale(Tensor& scale, Tensor& growth_tracker, Tensor& overflow_streak, const Tensor& found_inf,
                             const ScaleRule& rule);)

// One update_scale step on the values themselves, written once for the CPU kernel and the CUDA
// thread that runs it (so both round the f64 product to f32 the same way).
MG_HOST_DEVICE inline void update_scale_step(float& scale, std::int32_t& growth_tracker, std::int32_t& overflow_streak,
                                             bool found_inf, const ScaleRule& rule) {
  if (found_inf) {
    growth_tracker = 0;
    if (++overflow_streak < rule.hysteresis) return;  // not yet: this overflow only counts towards the streak
    overflow_streak = 0;
    const float backed_off = static_cast<float>(scale * rule.backoff_factor);
    scale = backed_off < rule.min_scale ? static_cast<float>(rule.min_scale) : backed_off;
    return;
  }
  overflow_streak = 0;
  const std::int64_t successful = std::int64_t{growth_tracker} + 1;
  if (successful != rule.growth_interval) {
    growth_tracker = static_cast<std::int32_t>(successful);
    return;
  }
  const float grown = static_cast<float>(scale * rule.growth_factor);
  // an inf scale would turn every gradient into inf or NaN; past the cap, the scale stays
  if (std::isfinite(grown) && grown <= rule.max_scale) scale = grown;
  growth_tracker = 0;
}

}  // namespace mg::kernels
