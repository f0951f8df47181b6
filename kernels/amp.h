// Kernels of loss scaling and master weights: passes over every gradient of a model at once.
//
// unscale:  for each i, dst[i] = src[i] * factor, computed in f32 (f64 when dst is f64) and rounded
//           once into dst[i]'s dtype; found_inf (one f32 element) is set to 1 if any stored result is
//           inf or NaN and is otherwise left as it was, so calls for several optimizers accumulate
//           into one flag (PyTorch's _amp_foreach_non_finite_check_and_unscale_).
//           src[i] and dst[i] have one shape and device; dst[i] may be src[i] (in place) or an f32
//           master gradient of an f16 src[i] (conversion and unscaling in the same pass).
// Cost: one read of every src and one write of every dst. found_inf is a tensor, not a bool, so
// that the CUDA backend (a later issue: one multi-tensor launch) can keep it on the device until
// the scaler's step decision.
// Tests: build/tests/test_amp_scaler.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace mg::kernels {

void unscale(const std::vector<Tensor>& src, const std::vector<Tensor>& dst, double factor, Tensor& found_inf);

namespace cpu {
void unscale(const std::vector<Tensor>& src, const std::vector<Tensor>& dst, double factor, Tensor& found_inf);
}  // namespace cpu

}  // namespace mg::kernels
