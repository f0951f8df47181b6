// Random masks drawn on the device that uses them, from the counter-based generator of
// core/philox.h: element i depends only on (seed, first_block, i), so the CPU and a GPU draw the very
// same mask, and a checkpoint's generator state reproduces it.
//
// dropout_mask: keep[i] = 1 if u_i >= p else 0, in keep's dtype (floating), where
//               u_i = philox::unit_float(philox::random_word(seed, first_block, i)) is the f32 in [0, 1)
//               that mg::rand draws for element i. Reserve keep.numel() words of the generator first.
// Tests: build/tests/test_ops_elementwise (dropout), build/tests/test_cuda_ops (same mask on a GPU).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/backends.h"

namespace mg::kernels {

MG_KERNELS(void dropout_mask(std::uint64_t seed, std::uint64_t first_block, double p, Tensor& keep);)

// The CUDA backend (kernels/cuda/), in builds with MG_WITH_CUDA.
}  // namespace mg::kernels
