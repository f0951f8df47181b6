// The loop plan of an elementwise op with NumPy broadcasting, shared by the CPU loop
// (kernels/cpu/elementwise.cpp) and the CUDA kernel (kernels/cuda/elementwise.cu).
//
// Each operand (out first, then the N inputs) gets an element stride per output dim, 0 where it is
// broadcast. Neighbouring dims that are contiguous for every operand are merged, so a same-shape op
// becomes one flat dim and a bias add becomes [rows] x [cols] with the bias's row stride 0.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mg::kernels {

template <std::size_t N>
struct LoopPlan {
  std::vector<std::int64_t> sizes;  // merged dims, outermost first
  std::vector<std::array<std::int64_t, N + 1>> strides;  // per dim: out's stride, then each input's
};

template <std::size_t N>
inline LoopPlan<N> make_plan(const Shape& out_shape, const std::array<const Tensor*, N>& inputs) {
  const std::size_t rank = out_shape.size();
  // Element strides per operand for every output dim (right-aligned broadcasting).
  std::vector<std::array<std::int64_t, N + 1>> full(rank);
  for (std::size_t k = 0; k <= N; ++k) {
    const Shape& shape = k == 0 ? out_shape : inputs[k - 1]->shape();
    std::int64_t stride = 1;
    for (std::size_t i = 0; i < rank; ++i) {
      std::size_t d = rank - 1 - i;
      bool present = i < shape.size();
      std::int64_t size = present ? shape[shape.size() - 1 - i] : 1;
      full[d][k] = (size == 1) ? 0 : stride;
      stride *= size;
    }
  }
  LoopPlan<N> plan;
  for (std::size_t d = 0; d < rank; ++d) {
    if (out_shape[d] == 1) continue;  // a size-1 dim moves nothing
    if (!plan.sizes.empty()) {
      // Merge into the previous dim when, for every operand, stepping the previous dim once equals
      // stepping this one across its whole length.
      auto& prev = plan.strides.back();
      bool mergeable = true;
      for (std::size_t k = 0; k <= N; ++k) mergeable &= prev[k] == full[d][k] * out_shape[d];
      if (mergeable) {
        plan.sizes.back() *= out_shape[d];
        prev = full[d];
        continue;
      }
    }
    plan.sizes.push_back(out_shape[d]);
    plan.strides.push_back(full[d]);
  }
  if (plan.sizes.empty()) {  // a scalar, or all sizes 1
    plan.sizes.push_back(1);
    plan.strides.push_back({});
  }
  return plan;
}

}  // namespace mg::kernels
