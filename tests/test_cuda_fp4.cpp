// Casts to and from codes on a GPU (kernels/cuda/copy.cu): E2M1 (two a byte), E8M0, E4M3 and E5M2
// from and to f32, f16 and bf16, and code to code, give the CPU's codes byte for byte and its values (a
// NaN's payload aside; core/convert.cpp, held to ml_dtypes by test_fp4_format and test_fp8_format), with
// the ends of every format in the data.
#include "tests/testing.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/cuda_kernel_checks.h"

using namespace mg;
using namespace mg::testing;

TEST_CASE("cuda fp4: casts to and from codes are the CPU's bytes") {
  if (!have_gpu()) return;
  std::vector<double> xs;
  for (int i = 0; i < 3000; ++i) xs.push_back(std::sin(i * 0.91) * std::pow(2.0, (i % 48) - 24));
  for (const double special : {0.0, -0.0, 0.25, 0.75, 5.0, 7.0, -100.0, 1.5, 3.0, 0x1p-127, 0x1.8p-127, 0x1p127,
                               0x1.8p127, 464.0, 61440.0, std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()})
    xs.push_back(special);
  if (xs.size() % 2) xs.push_back(1.0);
  const Tensor x = from_vector(xs, {static_cast<std::int64_t>(xs.size())});
  int cases = 0;
  for (const DType source : {DType::F32, DType::F16, DType::BF16}) {
    const Tensor cpu_source = x.to(source), gpu_source = cpu_source.to(Device::cuda());
    for (const DType coded : {DType::E2M1, DType::E8M0, DType::E4M3, DType::E5M2}) {
      CAPTURE(source);
      CAPTURE(coded);
      const Tensor cpu = cpu_source.to(coded), gpu = gpu_source.to(coded);
      REQUIRE(gpu.device().is_cuda());
      check_same_bits(gpu, cpu);
      // And back from the codes (a NaN code decodes to a NaN of the backend's own payload), and into
      // another coded format.
      check_same_bits(gpu.to(source), cpu.to(source));
      check_same_bits(gpu.to(DType::E2M1), cpu.to(DType::E2M1));
      ++cases;
    }
  }
  CHECK(cases == 12);
  check_error([&] { (void)x.to(DType::I32).to(Device::cuda()).to(DType::E2M1); }, "cast the i32 tensor to f32 first");
}
