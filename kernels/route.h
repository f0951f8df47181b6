// MG_ROUTE(out, fn, args...): the backend of `out`'s device runs kernel `fn` (kernels/backends.h).
// The one router of the kernel layer: kernels/dispatch.cpp's entry points and the FP8 and FP4 families'
// (kernels/fp8.cpp, kernels/fp4.cpp) call it after their argument checks. Only those files include it.
#pragma once

#include "core/error.h"
#include "core/tensor.h"

namespace mg::kernels {

#ifdef MG_WITH_CUDA
#define MG_ROUTE(out, fn, ...) ((out).device().is_cuda() ? cuda::fn(__VA_ARGS__) : cpu::fn(__VA_ARGS__))
#else
// Without the backend no tensor can be on a GPU (allocation fails first); checked all the same, so
// a device pointer never reaches host code.
inline void require_cpu(const char* kernel, const Tensor& out) {
  MG_CHECK(out.device().is_cpu(), "kernel {}: tensors on {} need the CUDA backend, which this build lacks", kernel,
           out.device());
}
#define MG_ROUTE(out, fn, ...) (require_cpu(#fn, out), cpu::fn(__VA_ARGS__))
#endif

}  // namespace mg::kernels
