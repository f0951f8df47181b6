// Stochastic rounding of a tensor (core/stochastic_round.h): out[i] = SR(x[i]) in out's dtype, with
// element i rounded by rounding_word(stream, i), so the CPU and a GPU write the same bits and a run
// rounds the same way with any number of threads.
//
// stochastic_round: x f32; out f16, bf16, e4m3, e5m2 or e2m1 (two a byte), of x's shape and device.
// Tests: build/tests/test_stochastic_round (CPU), build/tests/test_cuda_stochastic_round (the same bits on a GPU).
#pragma once

#include "core/stochastic_round.h"
#include "core/tensor.h"
#include "kernels/backends.h"

namespace mg::kernels {

MG_KERNELS(void stochastic_round(const Tensor& x, Tensor& out, const stochastic::RoundingStream& stream);)

}  // namespace mg::kernels
