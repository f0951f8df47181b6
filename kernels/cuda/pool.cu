// CUDA 2-D max and average pooling, forward and backward (contract: kernels/pool.h; geometry:
// kernels/window.h; reference: kernels/cpu/pool.cpp).
//
//   x, dx [batch, channels, height, width]   out, dout, argmax (i32) [batch, channels, out_h, out_w]
//
// Forward: one thread per output element reads its window row by row, as the CPU does, so the max,
// its argmax (ih * width + iw of the first maximum; a NaN wins and stays; padding never wins) and the
// window sum (kernels/pool.h's window_sum, shared with the CPU: four lanes by window column) are the
// CPU's to the bit. The average divides by kernel_h * kernel_w (padding counts as zeros:
// count_include_pad).
//
// Backward is a gather, not a scatter: one thread per input pixel visits the windows that cover it,
// (oh, ow) in increasing order, and adds their share in f32 (max: dout where argmax names this pixel;
// avg: dout / divisor). No atomics, nothing to zero, and the additions come in the CPU's order, so
// the f32 sums are the CPU's bit for bit and rounded once on store.
//
// Launch geometry: 1-D grid-stride loops of 256-thread blocks over the elements written (adjacent
// threads: adjacent ow or iw, so stores are coalesced). A pixel is covered by at most
// ceil(kernel_h / stride_h) * ceil(kernel_w / stride_w) windows.
//
// Test: build/tests/test_cuda_kernels -tc='cuda *pool2d*'. Benchmark: none of its own yet; profile the
// CNN example's training step with nsys.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/window.cuh"
#include "kernels/pool.h"

namespace mg::kernels::cuda {

namespace {

constexpr int kBlock = 256;

// Runs visit(input offset in the plane) over the window of output (oh, ow), row by row, padding skipped.
template <class Visit>
__device__ __forceinline__ void for_each_pixel(const Window2d& w, std::int64_t oh, std::int64_t ow, Visit&& visit) {
  const std::int64_t ih0 = oh * w.stride_h - w.pad_h, iw0 = ow * w.stride_w - w.pad_w;
  for (std::int64_t ih = max(ih0, std::int64_t{0}); ih < min(ih0 + w.kernel_h, w.height); ++ih)
    for (std::int64_t iw = max(iw0, std::int64_t{0}); iw < min(iw0 + w.kernel_w, w.width); ++iw)
      visit(ih * w.width + iw);
}

// A pixel as f32, for window_sum.
template <class T>
struct Widen {
  __device__ float operator()(T v) const { return to_float(v); }
};

template <class T>
__global__ void __launch_bounds__(kBlock) max_pool_forward(const T* x, Geometry g, T* out, std::int32_t* argmax) {
  const std::int64_t out_plane = g.out_h * g.out_w;
  for (std::int64_t t = first_index(); t < g.planes() * out_plane; t += grid_stride()) {
    const std::int64_t position = t % out_plane;
    const T* pixels = x + t / out_plane * g.w.height * g.w.width;
    float best = 0.0f;
    std::int64_t best_at = -1;
    // The CPU's rule: the first pixel, then any larger one or a NaN (which then stays).
    for_each_pixel(g.w, position / g.out_w, position % g.out_w, [&](std::int64_t at) {
      const float v = to_float(pixels[at]);
      const bool take = best_at < 0 || (best == best && !(v <= best));
      best = take ? v : best;
      best_at = take ? at : best_at;
    });
    out[t] = from_float<T>(best);
    argmax[t] = static_cast<std::int32_t>(best_at);
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock) avg_pool_forward(const T* x, Geometry g, T* out) {
  const std::int64_t out_plane = g.out_h * g.out_w;
  const float divisor = static_cast<float>(g.w.kernel_h * g.w.kernel_w);
  for (std::int64_t t = first_index(); t < g.planes() * out_plane; t += grid_stride()) {
    const std::int64_t position = t % out_plane;
    const T* pixels = x + t / out_plane * g.w.height * g.w.width;
    const std::int64_t oh = position / g.out_w, ow = position % g.out_w;
    const float total = window_sum<float>(pixels, g.w, oh * g.w.stride_h - g.w.pad_h, ow * g.w.stride_w - g.w.pad_w,
                                          Widen<T>{});  // the CPU's order (kernels/pool.h)
    out[t] = from_float<T>(total / divisor);
  }
}

// dx for both poolings: kMax adds dout where argmax names this pixel, otherwise dout / divisor.
template <class T, bool kMax>
__global__ void __launch_bounds__(kBlock) pool_backward(const T* dout, const std::int32_t* argmax, Geometry g, T* dx) {
  const std::int64_t plane_size = g.w.height * g.w.width, out_plane = g.out_h * g.out_w;
  const float divisor = static_cast<float>(g.w.kernel_h * g.w.kernel_w);
  for (std::int64_t t = first_index(); t < g.planes() * plane_size; t += grid_stride()) {
    const std::int64_t plane = t / plane_size, pixel = t % plane_size;
    const std::int64_t ih = pixel / g.w.width, iw = pixel % g.w.width;
    const Covering rows = covering(ih, g.w.pad_h, g.w.kernel_h, g.w.stride_h, g.out_h);
    const Covering columns = covering(iw, g.w.pad_w, g.w.kernel_w, g.w.stride_w, g.out_w);
    float sum = 0.0f;
    for (std::int64_t oh = rows.begin; oh < rows.end; ++oh) {
      for (std::int64_t ow = columns.begin; ow < columns.end; ++ow) {
        const std::int64_t i = plane * out_plane + oh * g.out_w + ow;
        if constexpr (kMax) {
          if (argmax[i] == pixel) sum += to_float(dout[i]);
        } else {
          sum += to_float(dout[i]) / divisor;
        }
      }
    }
    dx[t] = from_float<T>(sum);
  }
}

void require_same_dtype(const char* kernel, const Tensor& in, const Tensor& out) {
  MG_CHECK(in.dtype() == out.dtype(), "CUDA kernel {}: the input is {} but the output is {}; they must match", kernel,
           in.dtype(), out.dtype());
}

}  // namespace

void max_pool2d(const Tensor& x, const Window2d& window, Tensor& out, Tensor& argmax) {
  if (out.numel() == 0) return;
  require_same_dtype("max_pool2d", x, out);
  mg::cuda::DeviceGuard guard(out.device().index);
  visit_device_floating(x.dtype(), "max_pool2d", [&](auto zero) {
    using T = decltype(zero);
    MG_LAUNCH(max_pool_forward, blocks_for(out.numel(), kBlock), kBlock, 0, stream_of(out))
    (device_ptr<T>(x), geometry_of(window), device_ptr<T>(out), device_ptr<std::int32_t>(argmax));
    MG_CUDA_LAUNCHED();
  });
}

void max_pool2d_backward(const Tensor& dout, const Tensor& argmax, const Window2d& window, Tensor& dx) {
  if (dx.numel() == 0) return;
  require_same_dtype("max_pool2d_backward", dout, dx);
  mg::cuda::DeviceGuard guard(dx.device().index);
  visit_device_floating(dx.dtype(), "max_pool2d_backward", [&](auto zero) {
    using T = decltype(zero);
    MG_LAUNCH((pool_backward<T, true>), blocks_for(dx.numel(), kBlock), kBlock, 0, stream_of(dx))
    (device_ptr<T>(dout), device_ptr<std::int32_t>(argmax), geometry_of(window), device_ptr<T>(dx));
    MG_CUDA_LAUNCHED();
  });
}

void avg_pool2d(const Tensor& x, const Window2d& window, Tensor& out) {
  if (out.numel() == 0) return;
  require_same_dtype("avg_pool2d", x, out);
  mg::cuda::DeviceGuard guard(out.device().index);
  visit_device_floating(x.dtype(), "avg_pool2d", [&](auto zero) {
    using T = decltype(zero);
    MG_LAUNCH(avg_pool_forward, blocks_for(out.numel(), kBlock), kBlock, 0, stream_of(out))
    (device_ptr<T>(x), geometry_of(window), device_ptr<T>(out));
    MG_CUDA_LAUNCHED();
  });
}

void avg_pool2d_backward(const Tensor& dout, const Window2d& window, Tensor& dx) {
  if (dx.numel() == 0) return;
  require_same_dtype("avg_pool2d_backward", dout, dx);
  mg::cuda::DeviceGuard guard(dx.device().index);
  visit_device_floating(dx.dtype(), "avg_pool2d_backward", [&](auto zero) {
    using T = decltype(zero);
    MG_LAUNCH((pool_backward<T, false>), blocks_for(dx.numel(), kBlock), kBlock, 0, stream_of(dx))
    (device_ptr<T>(dout), nullptr, geometry_of(window), device_ptr<T>(dx));
    MG_CUDA_LAUNCHED();
  });
}

}  // namespace mg::kernels::cuda
