// kernels/gemm.h's accumulation modes: f32 (the Tensor Core contract) and f16 (the running sum rounded
// to f16 after every kF16AccumulationBlock products), on the CPU and, where a device is visible (a
// GPU, or the CUDA emulation build), in the WMMA kernel with a half accumulator fragment.
//
// The hand-computed cases pin the block size: k ones summed in f16 stop growing once a block's
// contribution (16) is half the f16 spacing of the sum (32 above 2^15): the sum ends at 32768
// whatever k beyond that, where rounding after every product would stop at 2048, blocks of 8 at
// 16384, and f32 reaches k. An H200 gave 32768 (kernels/gemm.h).
// The random cases compare with a reference in f64 that applies the same rule: each block's
// products summed exactly, added to the running sum, rounded to f16. The code under test sums a
// block in f32 first (16 exact products: a relative error below 16 x 2^-24), which can move a sum
// across an f16 rounding boundary: at most one f16 spacing apart, so the tolerance is eps(f16) of
// the larger of the result and the block sums (1 unit, the spacing of the running sum).
#include "tests/testing.h"

#include <Eigen/Core>

#include <cmath>
#include <vector>

#include "kernels/gemm.h"

using namespace mg;
using namespace mg::testing;

namespace {

double round_to_f16(double x) { return static_cast<double>(static_cast<float>(Eigen::half(static_cast<float>(x)))); }

// C = A B (row-major [m, k] by [k, n]) as kernels/gemm.h's f16 accumulation defines it, in f64.
std::vector<double> f16_accumulated(const std::vector<double>& a, const std::vector<double>& b, std::int64_t m,
                                    std::int64_t n, std::int64_t k) {
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (std::int64_t k0 = 0; k0 < k; k0 += kernels::kF16AccumulationBlock) {
        double block = 0;
        for (std::int64_t kk = k0; kk < std::min<std::int64_t>(k, k0 + kernels::kF16AccumulationBlock); ++kk)
          block += a[static_cast<std::size_t>(i * k + kk)] * b[static_cast<std::size_t>(kk * n + j)];
        sum = round_to_f16(sum + block);
      }
      c[static_cast<std::size_t>(i * n + j)] = sum;
    }
  return c;
}

// The sum of k ones (a [1, k] by [k, 1] product of f16 ones) with `accumulation`, on `device`.
double sum_of_ones(std::int64_t k, kernels::Accumulation accumulation, Device device) {
  const Tensor a = full({1, k}, 1.0, {.dtype = DType::F16, .device = device});
  const Tensor b = full({k, 1}, 1.0, {.dtype = DType::F16, .device = device});
  Tensor c = Tensor::empty({1, 1}, {.dtype = DType::F32, .device = device});
  kernels::GemmAccumulationGuard guard(accumulation);
  kernels::gemm(a, b, c, kernels::GemmShape{.m = 1, .n = 1, .k = k});
  return c.to(Device::cpu()).item<double>();
}

// A [m, k] by [k, n] product of N(0, 1) f16 values, stored in the layouts the flags say, with f16
// accumulation on `device`, against the f64 reference of the rule; C in `out`.
void check_random_product(std::int64_t m, std::int64_t n, std::int64_t k, bool transpose_a, bool transpose_b, DType out,
                          Device device) {
  INFO("m " << m << " n " << n << " k " << k << " transpose_a " << transpose_a << " transpose_b " << transpose_b
            << " out " << out << " on " << device);
  Generator generator(static_cast<std::uint64_t>(m * 1000 + n * 10 + k));
  const Tensor a = randn({m, k}, generator).to(DType::F16), b = randn({k, n}, generator).to(DType::F16);
  const std::vector<double> expected = f16_accumulated(a.to_vector<double>(), b.to_vector<double>(), m, n, k);
  // The operands as the layout flags store them: [k, m] and [n, k] when transposed.
  const Tensor stored_a = (transpose_a ? transpose(a, 0, 1) : a).to(device);
  const Tensor stored_b = (transpose_b ? transpose(b, 0, 1) : b).to(device);
  Tensor c = Tensor::empty({m, n}, {.dtype = out, .device = device});
  {
    kernels::GemmAccumulationGuard guard(kernels::Accumulation::F16);
    kernels::gemm(stored_a, stored_b, c,
                  {.m = m, .n = n, .k = k, .transpose_a = transpose_a, .transpose_b = transpose_b});
  }
  const std::vector<double> got = c.to(Device::cpu()).to_vector<double>();
  std::size_t off = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    // One f16 spacing of the running sum: eps(f16) of its size, at least the subnormal spacing.
    const double allowed = std::max(dtype_eps(DType::F16) * std::fabs(expected[i]), std::ldexp(1.0, -24));
    if (!(std::fabs(got[i] - expected[i]) <= allowed)) ++off;
  }
  CHECK_MESSAGE(off == 0, off << " of " << got.size() << " elements more than one f16 spacing from the reference");
}

}  // namespace

TEST_CASE("gemm accumulation: f32 by default, and the guard restores the mode it found") {
  CHECK(kernels::gemm_accumulation() == kernels::Accumulation::F32);
  {
    kernels::GemmAccumulationGuard f16(kernels::Accumulation::F16);
    CHECK(kernels::gemm_accumulation() == kernels::Accumulation::F16);
    {
      kernels::GemmAccumulationGuard f32(kernels::Accumulation::F32);
      CHECK(kernels::gemm_accumulation() == kernels::Accumulation::F32);
    }
    CHECK(kernels::gemm_accumulation() == kernels::Accumulation::F16);
  }
  CHECK(kernels::gemm_accumulation() == kernels::Accumulation::F32);
}

TEST_CASE("gemm accumulation on the CPU: k ones sum to k in f32, and stop at 32768 in f16 (blocks of 16)") {
  const Device cpu = Device::cpu();
  CHECK(sum_of_ones(65536, kernels::Accumulation::F32, cpu) == 65536);
  CHECK(sum_of_ones(2048, kernels::Accumulation::F16, cpu) == 2048);  // every integer to 2048 is an f16
  CHECK(sum_of_ones(32768, kernels::Accumulation::F16, cpu) == 32768);  // + 16 is exact below 2^15 (spacing <= 16)
  CHECK(sum_of_ones(65536, kernels::Accumulation::F16, cpu) == 32768);  // 32768 + 16 is a tie, kept at even 32768
  // A last partial block: 32768 + 5 rounds to 32768 as well; 2048 + 3 (spacing 2) to 2052.
  CHECK(sum_of_ones(32773, kernels::Accumulation::F16, cpu) == 32768);
  CHECK(sum_of_ones(2051, kernels::Accumulation::F16, cpu) == 2052);
}

TEST_CASE("gemm accumulation on the CPU: random f16 products against the rule in f64, every layout") {
  for (int layout = 0; layout < 4; ++layout) {
    check_random_product(5, 7, 3, layout & 1, layout & 2, DType::F32, Device::cpu());  // k < one block
    check_random_product(17, 9, 300, layout & 1, layout & 2, DType::F32, Device::cpu());
    check_random_product(3, 4, 1001, layout & 1, layout & 2, DType::F16, Device::cpu());
  }
}

TEST_CASE("gemm accumulation on the CPU: bf16 and f32 products ignore the f16 mode, bit for bit") {
  Generator generator(7);
  for (DType dtype : {DType::BF16, DType::F32}) {
    const Tensor a = randn({6, 500}, generator).to(dtype), b = randn({500, 5}, generator).to(dtype);
    Tensor f32 = Tensor::empty({6, 5}), f16 = Tensor::empty({6, 5});
    kernels::gemm(a, b, f32, {.m = 6, .n = 5, .k = 500});
    {
      kernels::GemmAccumulationGuard guard(kernels::Accumulation::F16);
      kernels::gemm(a, b, f16, {.m = 6, .n = 5, .k = 500});
    }
    CHECK_MESSAGE(f32.to_vector<float>() == f16.to_vector<float>(), dtype);
  }
}

#ifdef MG_WITH_CUDA
TEST_CASE("cuda gemm accumulation: the half accumulator fragment follows the same rule") {
  if (!have_gpu()) return;
  const Device gpu = Device::cuda();
  CHECK(sum_of_ones(65536, kernels::Accumulation::F32, gpu) == 65536);
  CHECK(sum_of_ones(65536, kernels::Accumulation::F16, gpu) == 32768);
  CHECK(sum_of_ones(2051, kernels::Accumulation::F16, gpu) == 2052);
  for (int layout = 0; layout < 4; ++layout) {
    check_random_product(5, 7, 3, layout & 1, layout & 2, DType::F32, gpu);
    check_random_product(40, 33, 300, layout & 1, layout & 2, DType::F32, gpu);  // two 32-wide tiles each way
    check_random_product(3, 4, 1001, layout & 1, layout & 2, DType::F16, gpu);
  }
  // The kernel that runs it, never split along k (an f16 accumulator has no f32 partial sums).
  const Tensor a = Tensor::empty({1, 20000}, {.dtype = DType::F16, .device = gpu});
  const Tensor b = Tensor::empty({20000, 1}, {.dtype = DType::F16, .device = gpu});
  kernels::GemmAccumulationGuard guard(kernels::Accumulation::F16);
  CHECK(kernels::cuda::gemm_kernel_name(a, b, {.m = 1, .n = 1, .k = 20000}) == "wmma simple 32x32x16, f16 accumulator");
}
#endif  // MG_WITH_CUDA
