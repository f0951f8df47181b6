// CUDA im2col and col2im: convolution as one GEMM (contract: kernels/conv.h; geometry:
// kernels/window.h; reference: kernels/cpu/conv.cpp).
//
//   x, dx [batch, channels, height, width]
//   cols  [batch * out_h * out_w, channels * kernel_h * kernel_w] (col2im's: dx's dtype or f32)
//   cols[(n, oh, ow), (c, kh, kw)] = x[n, c, oh * stride_h - pad_h + kh, ow * stride_w - pad_w + kw] (0 in the padding)
//
// im2col moves bits (exact in every dtype). col2im, its adjoint, is a gather rather than the CPU's
// scatter: one thread per input pixel sums the columns that read it, window (oh, ow) in increasing
// order, in f32, and rounds once. No atomics and nothing to zero; and since the CPU adds each pixel's
// terms in that same order, the f32 sums agree with it bit for bit.
//
// Launch geometry: 1-D grid-stride loops of 256-thread blocks over the elements written: im2col one
// thread per cols element (adjacent threads: adjacent kw, so stores are coalesced); col2im one thread
// per dx element, visiting at most ceil(kernel_h / stride_h) * ceil(kernel_w / stride_w) windows.
//
// Test: build/tests/test_cuda_kernels -tc='cuda im2col*' -tc='cuda col2im*'. Benchmark: none of its own
// yet; profile the CNN example's training step with nsys.
#include <type_traits>

#include "kernels/conv.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/window.cuh"

namespace mg::kernels::cuda {

namespace {

constexpr int kBlock = 256;

template <class Bits>
__global__ void __launch_bounds__(kBlock) im2col_kernel(const Bits* x, Geometry g, Bits* cols) {
  const Window2d& w = g.w;
  const std::int64_t window = w.kernel_h * w.kernel_w, width = w.channels * window, positions = g.out_h * g.out_w;
  for (std::int64_t t = first_index(); t < w.batch * positions * width; t += grid_stride()) {
    const std::int64_t row = t / width, column = t % width;
    const std::int64_t n = row / positions, oh = row % positions / g.out_w, ow = row % g.out_w;
    const std::int64_t c = column / window, kh = column % window / w.kernel_w, kw = column % w.kernel_w;
    const std::int64_t ih = oh * w.stride_h - w.pad_h + kh, iw = ow * w.stride_w - w.pad_w + kw;
    const bool inside = ih >= 0 && ih < w.height && iw >= 0 && iw < w.width;
    // Padding is all-zero bits: 0 in every dtype.
    cols[t] = inside ? x[((n * w.channels + c) * w.height + ih) * w.width + iw] : Bits{0};
  }
}

template <class In, class Out>
__global__ void __launch_bounds__(kBlock) col2im_kernel(const In* cols, Geometry g, Out* dx) {
  const Window2d& w = g.w;
  const std::int64_t width = w.channels * w.kernel_h * w.kernel_w;
  for (std::int64_t t = first_index(); t < w.batch * w.channels * w.height * w.width; t += grid_stride()) {
    const std::int64_t iw = t % w.width, ih = t / w.width % w.height;
    const std::int64_t c = t / (w.width * w.height) % w.channels, n = t / (w.width * w.height * w.channels);
    const Covering rows = covering(ih, w.pad_h, w.kernel_h, w.stride_h, g.out_h);
    const Covering columns = covering(iw, w.pad_w, w.kernel_w, w.stride_w, g.out_w);
    float sum = 0.0f;
    for (std::int64_t oh = rows.begin; oh < rows.end; ++oh) {
      const std::int64_t kh = ih + w.pad_h - oh * w.stride_h;
      for (std::int64_t ow = columns.begin; ow < columns.end; ++ow) {
        const std::int64_t kw = iw + w.pad_w - ow * w.stride_w;
        sum += to_float(cols[((n * g.out_h + oh) * g.out_w + ow) * width + (c * w.kernel_h + kh) * w.kernel_w + kw]);
      }
    }
    dx[t] = from_float<Out>(sum);
  }
}

}  // namespace

void im2col(const Tensor& x, const Window2d& window, Tensor& cols) {
  if (cols.numel() == 0) return;
  mg::cuda::DeviceGuard guard(cols.device().index);
  visit_device_dtype(x.dtype(), "im2col", [&](auto zero) {
    using Bits = std::conditional_t<sizeof(zero) == 2, std::uint16_t, std::uint32_t>;  // moved, never read as numbers
    MG_LAUNCH(im2col_kernel, blocks_for(cols.numel(), kBlock), kBlock, 0, stream_of(cols))
    (device_ptr<Bits>(x), geometry_of(window), device_ptr<Bits>(cols));
    MG_CUDA_LAUNCHED();
  });
}

void col2im(const Tensor& cols, const Window2d& window, Tensor& dx) {
  if (dx.numel() == 0) return;
  MG_CHECK(cols.dtype() == dx.dtype() || cols.dtype() == DType::F32,
           "CUDA kernel col2im: cols is {} but dx is {}; cols must be dx's dtype or f32", cols.dtype(), dx.dtype());
  mg::cuda::DeviceGuard guard(dx.device().index);
  visit_device_floating(dx.dtype(), "col2im", [&](auto zero) {
    using Out = decltype(zero);
    auto launch = [&](auto* cols_values) {
      MG_LAUNCH(col2im_kernel, blocks_for(dx.numel(), kBlock), kBlock, 0, stream_of(dx))
      (cols_values, geometry_of(window), device_ptr<Out>(dx));
      MG_CUDA_LAUNCHED();
    };
    // f32 cols: conv2d's f32 window gradients, rounded once here.
    if (cols.dtype() == DType::F32)
      launch(device_ptr<const float>(cols));
    else
      launch(device_ptr<const Out>(cols));
  });
}

}  // namespace mg::kernels::cuda
