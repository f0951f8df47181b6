// Shared by the GPU-against-CPU kernel suites (test_cuda_reduce, test_cuda_kernels).
//
// How a case reads (add one the same way):
//   1. build the inputs on the CPU in f32, f16 and bf16, with odd sizes and both memory patterns
//      (inner == 1 and inner > 1), sized to reach every launch path of the kernel file;
//   2. run kernels::cpu::fn into CPU outputs, and kernels::cuda::fn on copies of the inputs into GPU
//      outputs poisoned with NaN (i32: -12345) first, so an element a kernel forgot to write fails;
//   3. bring the GPU outputs back and compare them
//      - exactly, where both backends do the same operations in the same order (moves, max and
//        argmax, the window sums of pooling and col2im) or where the inputs make every order exact
//        (sums of small whole numbers are exact in f32, whatever the order of additions);
//      - otherwise within check_near's tolerance: 1 eps of the stored dtype (the two backends may round
//        f32 values that differ in their last bits to neighbouring f16/bf16 values) plus a number of
//        f32 eps derived beside each case for the reordered f32 arithmetic and CUDA's expf/tanhf
//        (at most 2 ulp off; glibc's 1).
// A reordered f32 sum of n terms: each addition rounds by at most eps/2 of a partial sum, and the
// errors of the two orders add like a random walk, so their difference stays within about
// 2.5 sqrt(n) eps of the largest partial sum (6 standard deviations); `reorder(n)` = 4 sqrt(n) + 16
// eps leaves room for the last, tree-shaped levels of the GPU's reduction.
#pragma once

#include <cstring>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/copy.h"
#include "tests/testing.h"

namespace mg::testing {

inline const DType kFloating[] = {DType::F32, DType::F16, DType::BF16};
inline const double kEps32 = dtype_eps(DType::F32);
inline const double kNaN = std::numeric_limits<double>::quiet_NaN();

inline double reorder(std::int64_t n) { return 4.0 * std::sqrt(static_cast<double>(n)) + 16.0; }

inline Tensor cpu_empty(const Shape& shape, DType dtype) { return Tensor::empty(shape, {.dtype = dtype}); }

// A GPU tensor full of NaN (i32: -12345, never a valid index).
inline Tensor poisoned(const Shape& shape, DType dtype) {
  Tensor out = Tensor::empty(shape, {.dtype = dtype, .device = Device::cuda()});
  kernels::copy_between_devices(full(shape, dtype == DType::I32 ? -12345.0 : kNaN, {.dtype = dtype}), out);
  return out;
}

inline Tensor gpu(const Tensor& t) { return t.to(Device::cuda()); }

inline Tensor uniform_values(const Shape& shape, DType dtype, double low, double high, std::uint64_t seed) {
  Generator generator(seed);
  return uniform(shape, low, high, generator, {.dtype = DType::F32}).to(dtype);
}

// Whole numbers in [low, high) times `scale` (a power of two keeps them exact in every dtype).
inline Tensor whole_numbers(const Shape& shape, DType dtype, std::int64_t low, std::int64_t high, std::uint64_t seed,
                            double scale = 1.0) {
  Generator generator(seed);
  return mul(randint(low, high, shape, generator).to(DType::F32), scale).to(dtype);
}

inline Tensor with_nan_at(const Tensor& t, const std::vector<std::int64_t>& positions) {
  std::vector<double> values = t.to_vector<double>();
  for (std::int64_t at : positions) values[static_cast<std::size_t>(at)] = kNaN;
  return from_vector(values, t.shape(), {.dtype = t.dtype()});
}

// The largest value that is not NaN.
inline double max_ignoring_nan(const Tensor& t) {
  double best = -std::numeric_limits<double>::infinity();
  for (double v : t.to_vector<double>())
    if (!std::isnan(v)) best = std::max(best, v);
  return best;
}

inline void check_exact(const Tensor& on_gpu, const Tensor& expected) {
  check_close(on_gpu.to(Device::cpu()), expected, 0.0, 0.0);
}

// The same bits, a NaN for a NaN: codes (FP8, E2M1, E8M0) byte for byte; f16/bf16/f32 values with the
// sign of zero, where only a NaN's payload may differ (each backend's conversions write NaNs of their own).
inline void check_same_bits(const Tensor& on_gpu, const Tensor& expected) {
  const Tensor got = on_gpu.to(Device::cpu());
  REQUIRE(got.dtype() == expected.dtype());
  REQUIRE(got.shape() == expected.shape());
  if (is_coded(got.dtype())) {
    CHECK(std::memcmp(got.data_ptr(), expected.data_ptr(), expected.nbytes()) == 0);
    return;
  }
  const std::vector<double> g = got.to_vector<double>(), e = expected.to_vector<double>();
  std::size_t differ = 0, first = 0;
  for (std::size_t i = 0; i < e.size(); ++i) {
    const bool same = std::isnan(e[i]) ? std::isnan(g[i]) : g[i] == e[i] && std::signbit(g[i]) == std::signbit(e[i]);
    if (!same && differ++ == 0) first = i;
  }
  INFO(differ << " elements differ; the first, " << first << ": " << (differ ? g[first] : 0.0) << " on the GPU, "
              << (differ ? e[first] : 0.0) << " on the CPU");
  CHECK(differ == 0);
}

// |gpu - cpu| <= (eps(stored) + f32_eps * eps32) |cpu| + atol, where `stored` is the dtype the value was
// last rounded to (f16 also gets its subnormal spacing 2^-24 as atol: a flip there is not relative).
inline void check_near(const Tensor& on_gpu, const Tensor& expected, double f32_eps, double atol = 0.0,
                       DType stored = DType::F32) {
  if (expected.dtype() != DType::F32) stored = expected.dtype();
  const double rounding = stored == DType::F32 ? 0.0 : dtype_eps(stored);
  if (stored == DType::F16) atol += std::ldexp(1.0, -24);
  check_close(on_gpu.to(Device::cpu()), expected, rounding + f32_eps * kEps32, atol);
}

// An [outer, n, inner] view of a tensor, named by the launch path it reaches.
struct View {
  std::int64_t outer, n, inner;
  const char* path;
};

}  // namespace mg::testing
