// CUDA random masks (kernels/random.h): thread i computes Philox word i on its own (core/philox.h,
// the CPU's code), so the mask is the CPU's bit for bit.
// Launch geometry: a grid-stride loop over keep's elements, 256 threads a block.
// Tests: build/tests/test_cuda_ops (dropout).
#include "core/philox.h"
#include "kernels/cuda/common.cuh"
#include "kernels/random.h"

namespace mg::kernels::cuda {

namespace {

template <class T>
__global__ void dropout_mask_kernel(std::uint64_t seed, std::uint64_t first_block, double p, T* keep, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const float u = philox::unit_float(philox::random_word(seed, first_block, static_cast<std::uint64_t>(i)));
    keep[i] = from_float<T>(static_cast<double>(u) >= p ? 1.0f : 0.0f);
  }
}

}  // namespace

void dropout_mask(std::uint64_t seed, std::uint64_t first_block, double p, Tensor& keep) {
  const std::int64_t n = keep.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  mg::cuda::DeviceGuard guard(keep.device().index);
  visit_device_floating(keep.dtype(), "dropout_mask", [&](auto zero) {
    using T = decltype(zero);
    MG_LAUNCH(dropout_mask_kernel, blocks_for(n, kThreads), kThreads, 0, stream_of(keep))
    (seed, first_block, p, device_ptr<T>(keep), n);
  });
  MG_CUDA_LAUNCHED();
}

}  // namespace mg::kernels::cuda
