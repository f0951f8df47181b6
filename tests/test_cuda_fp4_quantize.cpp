// FP4 on a GPU (kernels/cuda/fp4.cu) against the CPU's (kernels/cpu/fp4.cpp): the same codes, scales and
// tensor factors byte for byte for NVFP4 and MXFP4, to nearest and stochastically, ragged shapes and 2-D
// blocks, with zeros and a NaN in the data; the same decoded values; fp4_gemm (a decode pass and the bf16
// rungs) near the CPU's (decoded in packing); and the nvfp4 and mxfp4 recipes
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

TEST_CASE("cuda fp4_gemm: the CPU's result, up to the order of the f32 sums") {
  if (!have_gpu()) return;
  const std::int64_t m = 37, n = 45, k = 290;
  Generator generator(21);
  const Tensor x = randn({m, k}, generator), w = randn({n, k}, generator), bias = randn({n}, generator);
  for (const auto format : {kernels::Fp4Format::Nv, kernels::Fp4Format::Mx}) {
    const kernels::Fp8Blocks blocks = format == kernels::Fp4Format::Nv ? kernels::Fp8Blocks{1, 16}
                                                                       : kernels::Fp8Blocks{1, 32};
    const kernels::Fp4Tensor a = kernels::fp4_quantize(x, blocks, {.format = format});
    const kernels::Fp4Tensor b = kernels::fp4_quantize(w, blocks, {.format = format});
    const kernels::Fp4Tensor a_gpu{gpu(a.codes), gpu(a.scales), gpu(a.tensor_factor), a.blocks, a.format};
    const kernels::Fp4Tensor b_gpu{gpu(b.codes), gpu(b.scales), gpu(b.tensor_factor), b.blocks, b.format};
    // Each element's bound: two f32 sums of k exact products in different orders, 2 (k + 4) * 2^-24 *
    // sum |a_k b_k| * the factors, plus bf16's rounding of the result.
    const std::vector<double> av = kernels::fp4_decode(a, DType::F32).to_vector<double>();
    const std::vector<double> bv = kernels::fp4_decode(b, DType::F32).to_vector<double>();
    const double factors = a.tensor_factor.item() * b.tensor_factor.item();
    for (const DType out : {DType::F32, DType::BF16}) {
      CAPTURE(out);
      Tensor c_cpu = Tensor::empty({m, n}, {.dtype = out}), c_gpu = gpu(c_cpu);
      kernels::fp4_gemm(a, b, c_cpu, {.bias = bias, .activation = kernels::Activation::Relu});
      kernels::fp4_gemm(a_gpu, b_gpu, c_gpu, {.bias = gpu(bias), .activation = kernels::Activation::Relu});
      const std::vector<double> got = c_gpu.to(Device::cpu()).to_vector<double>(), want = c_cpu.to_vector<double>();
      int bad = 0;
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          double magnitude = 0.0;
          for (std::int64_t p = 0; p < k; ++p)
            magnitude += std::fabs(av[static_cast<std::size_t>(i * k + p)] * bv[static_cast<std::size_t>(j * k + p)]);
          const double expected = want[static_cast<std::size_t>(i * n + j)];
          const double bound = 2.0 * static_cast<double>(k + 4) * 0x1p-24 * magnitude * factors +
                               (out == DType::BF16 ? 0x1p-7 * std::fabs(expected) : 0.0) + 1e-30;
          bad += std::fabs(got[static_cast<std::size_t>(i * n + j)] - expected) > bound;
        }
      CHECK(bad == 0);
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
