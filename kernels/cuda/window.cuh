// The sliding-window geometry of kernels/window.h as the CUDA kernels of convolution (conv.cu) and
// pooling (pool.cu) use it: the window with its output size worked out once on the host, and which
// windows cover an input pixel, for the backward passes written as gathers (each input pixel adds up
// the windows that read it, in the CPU's order, so no atomics are needed).
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/window.h"

namespace mg::kernels::cuda {

// Window2d with its output size worked out on the host (Window2d's methods are host code).
struct Geometry {
  Window2d w;
  std::int64_t out_h, out_w;

  __host__ __device__ std::int64_t planes() const { return w.batch * w.channels; }
};

inline Geometry geometry_of(const Window2d& w) { return {w, w.out_h(), w.out_w()}; }

// The window positions [begin, end) along one axis that cover input position i.
struct Covering {
  std::int64_t begin, end;
};
__device__ __forceinline__ Covering covering(std::int64_t i, std::int64_t pad, std::int64_t kernel, std::int64_t stride,
                                             std::int64_t out) {
  const std::int64_t padded = i + pad;  // window o covers it when o * stride <= padded < o * stride + kernel
  return {padded < kernel ? 0 : (padded - kernel) / stride + 1, min(out, padded / stride + 1)};
}

}  // namespace mg::kernels::cuda
