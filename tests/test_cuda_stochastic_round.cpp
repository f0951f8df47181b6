// Stochastic rounding on a GPU (kernels/cuda/stochastic_round.cu) against the CPU's (kernels/cpu/):
// the same codes byte for byte, and the same f16/bf16 values (a NaN's payload aside), for every format,
// with the specials and the ends in the data (saturation, inf, NaN, -0, subnormals), two streams.
// The CPU-side properties: test_stochastic_round.
#include "tests/testing.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/stochastic_round.h"

#include "tests/cuda_kernel_checks.h"

using namespace mg;
using namespace mg::testing;

TEST_CASE("cuda stochastic rounding: the CPU's bytes for every format and stream") {
  if (!have_gpu()) return;
  std::vector<double> xs;
  for (int i = 0; i < 5000; ++i) xs.push_back(std::sin(i * 0.37) * std::pow(2.0, (i % 60) - 30));
  for (const double special : {0.0, -0.0, 460.0, -1e10, 7.0, 65519.0, 3e38, 0x1p-25, 0x1p-40, 0x1.8p-134,
                               std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                               std::numeric_limits<double>::quiet_NaN()})
    xs.push_back(special);
  if (xs.size() % 2) xs.push_back(0.3);  // E2M1 packs pairs
  const Tensor x = from_vector(xs, {static_cast<std::int64_t>(xs.size())});
  const Tensor gx = x.to(Device::cuda());
  for (const DType format : {DType::F16, DType::BF16, DType::E4M3, DType::E5M2, DType::E2M1}) {
    for (const stochastic::RoundingStream stream :
         {stochastic::RoundingStream{.seed = 1},
          stochastic::RoundingStream{.seed = 1ull << 40, .step = 7, .tensor = 3}}) {
      CAPTURE(format);
      CAPTURE(stream.seed);
      Tensor cpu = Tensor::empty(x.shape(), {.dtype = format});
      Tensor gpu = Tensor::empty(x.shape(), {.dtype = format, .device = Device::cuda()});
      kernels::stochastic_round(x, cpu, stream);
      kernels::stochastic_round(gx, gpu, stream);
      check_same_bits(gpu, cpu);
    }
  }
  Tensor out = Tensor::empty({4}, {.dtype = DType::BF16, .device = Device::cuda()});
  check_error([&] { kernels::stochastic_round(x, out, {}); }, "must have one shape and device");
}
