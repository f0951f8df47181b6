// FP4 on a GPU (kernels/cuda/fp4.cu) against the CPU's (kernels/cpu/fp4.cpp): the same codes, scales and
// tensor factors byte for byte for NVFP4 and MXFP4, to nearest and stochastically, ragged shapes and 2-D
// blocks, with zeros and a NaN in the data; the same decoded values; and the nvfp4 and mxfp4 recipes
// training the MLP a few steps on the device, near the CPU's run. The CPU-side properties: test_fp4_quantize,
// test_fp4_linear.
#include "tests/testing.h"

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/fp4.h"
#include "nn/models.h"

#include "tests/cuda_kernel_checks.h"

using namespace mg;
using namespace mg::testing;

TEST_CASE("cuda fp4: the CPU's codes, scales and factors for both formats and roundings") {
  if (!have_gpu()) return;
  struct Case {
    std::int64_t rows, cols;
    kernels::Fp8Blocks blocks;
    kernels::Fp4Format format;
  };
  const std::vector<Case> cases{{5, 38, {1, 16}, kernels::Fp4Format::Nv},
                                {33, 40, {16, 16}, kernels::Fp4Format::Nv},
                                {7, 70, {1, 32}, kernels::Fp4Format::Mx}};
  for (const Case& c : cases) {
    Generator generator(static_cast<std::uint64_t>(c.rows + c.cols));
    Tensor x = mul(randn({c.rows, c.cols}, generator), exp(mul(randn({c.rows, c.cols}, generator), 2.0)));
    std::vector<double> values = x.to_vector<double>();
    values[3] = 0.0;
    values[4] = -0.0;
    if (c.format == kernels::Fp4Format::Mx) values[5] = std::numeric_limits<double>::quiet_NaN();  // one block NaN
    x = from_vector(values, {c.rows, c.cols});
    for (const DType dtype : {DType::F32, DType::BF16}) {
      for (const bool stochastic : {false, true}) {
        CAPTURE(c.rows);
        CAPTURE(dtype);
        CAPTURE(stochastic);
        const kernels::Fp4Rule rule{.format = c.format, .stochastic = stochastic, .stream = {.seed = 3, .step = 4}};
        const Tensor xd = x.to(dtype);
        const kernels::Fp4Tensor cpu = kernels::fp4_quantize(xd, c.blocks, rule);
        const kernels::Fp4Tensor gpu = kernels::fp4_quantize(xd.to(Device::cuda()), c.blocks, rule);
        CHECK(gpu.codes.device().is_cuda());
        check_same_bits(gpu.codes, cpu.codes);
        check_same_bits(gpu.scales, cpu.scales);
        check_same_bits(gpu.tensor_factor, cpu.tensor_factor);
        check_same_bits(kernels::fp4_decode(gpu), kernels::fp4_decode(cpu));
        check_same_bits(kernels::fp4_decode(gpu, DType::F32), kernels::fp4_decode(cpu, DType::F32));
      }
    }
  }
}

TEST_CASE("cuda fp4 recipes: the MLP trains a few steps on the device, near the CPU's run") {
  if (!have_gpu()) return;
  Generator data(11);
  const Tensor images = randn({20, 144}, data), classes = randint(0, 4, {20}, data);
  for (const std::string name : {"nvfp4", "mxfp4"}) {
    INFO(name);
    std::vector<double> losses[2];
    for (const Device device : {Device::cpu(), Device::cuda()}) {
      Generator init(1);
      train::Trainer trainer(nn::mlp({144, 32, 16, 4}, init), {.recipe = amp::Recipe::parse(name),
                                                               .optimizer = {.name = "adam", .lr = 0.01},
                                                               .device = device,
                                                               .read_every = 1});
      for (int step = 0; step < 4; ++step)
        losses[device.is_cuda()].push_back(trainer.step(images, classes).loss.item());
    }
    // The quantisations are the same bits; the GEMMs' f32 sums may differ in order, so a step's codes
    // can differ where a value sits on a rounding boundary: the losses agree to a few percent.
    for (std::size_t step = 0; step < losses[0].size(); ++step) {
      CAPTURE(step);
      CHECK(std::isfinite(losses[1][step]));
      CHECK(losses[1][step] == doctest::Approx(losses[0][step]).epsilon(0.05));
    }
    CHECK(losses[1].back() < losses[1].front());
  }
}
