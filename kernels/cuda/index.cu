// CUDA row gather and scatters: the embedding lookup, its gradient, and max's backward
// (contract: kernels/index.h; reference: kernels/cpu/index.cpp).
//
//   gather_rows        table [rows, width], indices i32 [count]      -> out [count, width]
//   scatter_add_rows   grad [count, width], indices i32 [count]      -> grad_table [rows, width] (zeroed first)
//   scatter_along_dim  values [outer, inner], indices i32 [outer, inner] -> out [outer, n, inner]
//   share_among_ties   g [], x [n], max []                               -> dx [n]: g / ties where x ties max
//
// gather_rows and scatter_along_dim only move bits, so they are exact in every dtype.
// scatter_add_rows adds with f32 atomicAdd: a token seen many times is summed in f32 (into an f32
// scratch table when grad_table is f16/bf16, then rounded once), but in whatever order the atomics
// land, so its last bits may differ run to run and from the CPU. A gather formulation would need the
// indices sorted first; the embedding gradient is not worth that yet.
//
// Launch geometry: 1-D grid-stride loops of 256-thread blocks over the elements written:
//   gather_rows        one thread per 16/8/4/2-byte unit of out (the widest that divides a row and
//                      keeps both pointers aligned), so a row of 64 f16 is 8 uint4 copies
//   scatter_add_rows   one thread per grad element (adjacent threads: adjacent columns of one row),
//                      then one thread per table element for the rounding pass
//   scatter_along_dim  one thread per out element, a gather: out[o, j, i] = index[o, i] == j ? value : 0,
//                      so out needs no separate zeroing
//   share_among_ties   one thread per element twice: a count of the ties (integer atomicAdd into a
//                      64-bit counter: the same total in any order), then g / ties in f32, rounded once
//
// Test: build/tests/test_cuda_kernels -tc='cuda gather*' -tc='cuda scatter*'. Benchmark: none of its own
// yet; profile it inside a training step with nsys.
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/index.h"

namespace mg::kernels::cuda {

namespace {

constexpr int kBlock = 256;

template <class Unit>
__global__ void __launch_bounds__(kBlock) gather_rows_kernel(const Unit* table, const std::int32_t* index,
                                                             std::int64_t count, std::int64_t row_units, Unit* out) {
  for (std::int64_t t = first_index(); t < count * row_units; t += grid_stride()) {
    const std::int64_t row = t / row_units, unit = t % row_units;
    out[t] = table[static_cast<std::int64_t>(index[row]) * row_units + unit];
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    scatter_add_kernel(const T* grad, const std::int32_t* index, std::int64_t count, std::int64_t width, float* sum) {
  for (std::int64_t t = first_index(); t < count * width; t += grid_stride()) {
    const std::int64_t row = t / width, column = t % width;
    atomicAdd(sum + static_cast<std::int64_t>(index[row]) * width + column, to_float(grad[t]));
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock) round_into(const float* sum, std::int64_t n, T* out) {
  for (std::int64_t t = first_index(); t < n; t += grid_stride()) out[t] = from_float<T>(sum[t]);
}

template <class Bits>
__global__ void __launch_bounds__(kBlock)
    scatter_along_dim_kernel(const Bits* values, const std::int32_t* index, ReduceShape s, Bits* out) {
  for (std::int64_t t = first_index(); t < s.outer * s.n * s.inner; t += grid_stride()) {
    const std::int64_t o = t / (s.n * s.inner), j = t / s.inner % s.n, i = t % s.inner;
    const std::int64_t from = o * s.inner + i;
    out[t] = index[from] == j ? values[from] : Bits{0};  // all-zero bits are 0 in every dtype
  }
}

// x[t] ties max: equal to it, or NaN where max is NaN (the CPU's rule, kernels/cpu/index.cpp).
__device__ __forceinline__ bool ties_max(float value, float max) { return isnan(max) ? isnan(value) : value == max; }

// Adds the number of elements of x that tie *max to *ties (zeroed before).
template <class T>
__global__ void __launch_bounds__(kBlock)
    count_ties_kernel(const T* x, std::int64_t n, const T* max, unsigned long long* ties) {
  const float m = to_float(*max);
  unsigned long long found = 0;
  for (std::int64_t t = first_index(); t < n; t += grid_stride()) found += ties_max(to_float(x[t]), m);
  if (found) atomicAdd(ties, found);
}

// dx[t] = g / ties where x[t] ties *max, else 0.
template <class T>
__global__ void __launch_bounds__(kBlock)
    share_kernel(const T* g, const T* x, std::int64_t n, const T* max, const unsigned long long* ties, T* dx) {
  const float m = to_float(*max), share = to_float(*g) / static_cast<float>(*ties);
  for (std::int64_t t = first_index(); t < n; t += grid_stride())
    dx[t] = from_float<T>(ties_max(to_float(x[t]), m) ? share : 0.0f);
}

// Calls fn(Unit{}) with the widest unit of 16, 8, 4 or 2 bytes that divides `bytes` and aligns every pointer.
template <class Fn>
void with_unit(std::size_t bytes, std::initializer_list<const void*> pointers, Fn&& fn) {
  auto fits = [&](std::size_t unit) {
    if (bytes % unit != 0) return false;
    for (const void* p : pointers)
      if (reinterpret_cast<std::uintptr_t>(p) % unit != 0) return false;
    return true;
  };
  if (fits(16)) return fn(uint4{});
  if (fits(8)) return fn(uint2{});
  if (fits(4)) return fn(std::uint32_t{});
  fn(std::uint16_t{});  // every GPU dtype is 2 or 4 bytes
}

}  // namespace

void gather_rows(const Tensor& table, const Tensor& indices, Tensor& out) {
  const std::size_t row_bytes = dtype_bytes(table.dtype(), table.size(1));
  if (out.numel() == 0 || row_bytes == 0) return;
  mg::cuda::DeviceGuard guard(out.device().index);
  with_unit(row_bytes, {table.data_ptr(), out.data_ptr()}, [&](auto zero) {
    using Unit = decltype(zero);
    const std::int64_t count = indices.numel(), row_units = static_cast<std::int64_t>(row_bytes / sizeof(Unit));
    MG_LAUNCH(gather_rows_kernel, blocks_for(count * row_units, kBlock), kBlock, 0, stream_of(out))
    (device_ptr<Unit>(table), device_ptr<std::int32_t>(indices), count, row_units, device_ptr<Unit>(out));
    MG_CUDA_LAUNCHED();
  });
}

void scatter_add_rows(const Tensor& grad, const Tensor& indices, Tensor& grad_table) {
  if (grad_table.numel() == 0) return;
  MG_CHECK(grad.dtype() == grad_table.dtype(),
           "CUDA kernel scatter_add_rows: grad is {} but grad_table is {}; "
           "they must match",
           grad.dtype(), grad_table.dtype());
  mg::cuda::DeviceGuard guard(grad_table.device().index);
  const cudaStream_t stream = stream_of(grad_table);
  visit_device_floating(grad_table.dtype(), "scatter_add_rows", [&](auto zero) {
    using T = decltype(zero);
    // An f32 table is its own accumulator; an f16/bf16 one gets an f32 scratch table, rounded once at the end.
    const bool in_place = grad_table.dtype() == DType::F32;
    Tensor sum = in_place ? grad_table
                          : Tensor::empty(grad_table.shape(), {.dtype = DType::F32, .device = grad_table.device()});
    MG_CUDA_CHECK(cudaMemsetAsync(sum.data_ptr(), 0, sum.nbytes(), stream));  // all-zero bits are 0.0f
    const std::int64_t count = indices.numel(), width = grad_table.size(1);
    if (count * width > 0) {
      MG_LAUNCH_UNORDERED(scatter_add_kernel, blocks_for(count * width, kBlock), kBlock, 0, stream)
      (device_ptr<T>(grad), device_ptr<std::int32_t>(indices), count, width, device_ptr<float>(sum));
      MG_CUDA_LAUNCHED();
    }
    if (in_place) return;
    MG_LAUNCH(round_into, blocks_for(sum.numel(), kBlock), kBlock, 0, stream)
    (device_ptr<float>(sum), sum.numel(), device_ptr<T>(grad_table));
    MG_CUDA_LAUNCHED();
  });
}

void scatter_along_dim(const Tensor& values, const Tensor& indices, const ReduceShape& s, Tensor& out) {
  if (out.numel() == 0) return;
  mg::cuda::DeviceGuard guard(out.device().index);
  visit_device_dtype(out.dtype(), "scatter_along_dim", [&](auto zero) {
    using Bits = std::conditional_t<sizeof(zero) == 2, std::uint16_t, std::uint32_t>;  // moved, never read as numbers
    MG_LAUNCH(scatter_along_dim_kernel, blocks_for(out.numel(), kBlock), kBlock, 0, stream_of(out))
    (device_ptr<Bits>(values), device_ptr<std::int32_t>(indices), s, device_ptr<Bits>(out));
    MG_CUDA_LAUNCHED();
  });
}

void share_among_ties(const Tensor& g, const Tensor& x, const Tensor& max, Tensor& dx) {
  if (dx.numel() == 0) return;
  mg::cuda::DeviceGuard guard(dx.device().index);
  const cudaStream_t stream = stream_of(dx);
  // Two i32 elements hold the 64-bit count (the allocator aligns every tensor to far more than 8 bytes).
  Tensor ties = Tensor::empty({2}, {.dtype = DType::I32, .device = dx.device()});
  MG_CUDA_CHECK(cudaMemsetAsync(ties.data_ptr(), 0, ties.nbytes(), stream));
  auto* count = static_cast<unsigned long long*>(ties.data_ptr());
  visit_device_floating(x.dtype(), "max backward", [&](auto zero) {
    using T = decltype(zero);
    MG_LAUNCH(count_ties_kernel, blocks_for(x.numel(), kBlock), kBlock, 0, stream)
    (device_ptr<T>(x), x.numel(), device_ptr<T>(max), count);
    MG_CUDA_LAUNCHED();
    MG_LAUNCH(share_kernel, blocks_for(x.numel(), kBlock), kBlock, 0, stream)
    (device_ptr<T>(g), device_ptr<T>(x), x.numel(), device_ptr<T>(max), count, device_ptr<T>(dx));
    MG_CUDA_LAUNCHED();
  });
}

}  // namespace mg::kernels::cuda
