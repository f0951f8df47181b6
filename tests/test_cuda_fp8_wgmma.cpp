// Rung 4 of the FP8 GEMM (kernels/cuda/gemm_fp8_wgmma.cu: wgmma's QGMMA on an H100 or H200) against the
// CPU's Limited model with wgmma's accumulator (kernels/fp8.h, kHopperWgmmaFp8Accumulator), promoted
// as often: bit for bit on the emulator, within test_cuda_fp8.cpp's bound on a GPU (where the model is an
// assumption about the hardware: the count equal bit for bit is printed). ctest runs the suite on an
// emulated GPU of 2 SMs, so every block walks several tiles and the ring of stages wraps from tile to
// tile. Then the accumulator told apart by promotion (a large product, many small ones: what a GPU
// run prints is the measurement), and what rung 4 does not take, refused.
#include "tests/testing.h"

#include <string>
#include <vector>

#ifdef MG_WITH_CUDA
#include "tests/cuda_device.h"

#include "kernels/fp8.h"
#include "tests/fp8_gemm_cases.h"

using namespace mg;
using namespace mg::testing;
using namespace mg::testing::fp8_cases;

namespace {

// wgmma's accumulator, promoted every `promote_every` products (0: never).
Fp8Accumulator wgmma_accumulator(int promote_every) {
  Fp8Accumulator accumulator = kernels::kHopperWgmmaFp8Accumulator;
  accumulator.promote_every = promote_every;
  return accumulator;
}

}  // namespace

// K-major operands, as fp8_linear gives them in every recipe, ragged against the 128 x 128 tiles and
// the 128-code k steps (k = 400: the last step 16 codes, its one instruction half full; n = 136: a
// second tile of 8 columns), every output dtype, mixed formats, and each way of keeping the sums:
// per tensor promoted every 128 or 256 or never, DeepSeek-V3's blocks (a chunk a step), a weight
// gradient's per-column scales, and blocks longer than k (one chunk).
TEST_CASE("cuda fp8 wgmma: rung 4 is the CPU's Limited model with wgmma's accumulator, bit for bit") {
  if (!have_gpu()) return;
  if (!hopper()) {
    MESSAGE("not compute capability 9.0: rung 4 does not run here");
    return;
  }
  using enum DType;
  struct Rung4Case {
    GemmCase g;
    int promote_every;
    const char* kernel_end;  // how kernel_name says the sums are kept
  };
  const std::vector<Rung4Case> cases{
      {{150, 136, 400, false, true, E4M3, E4M3, kPerTensor, BF16, true}, 128, "promoted every 128"},
      {{150, 136, 400, false, true, E5M2, E4M3, kPerTensor, F32, false}, 0, "never promoted"},
      {{40, 264, 512, false, true, E4M3, E5M2, kPerTensor, F16, false}, 256, "promoted every 256"},
      {{150, 136, 400, false, true, E4M3, E4M3, kDeepSeek, F16, true}, 128, "scales every 128"},
      {{70, 132, 272, false, true, E5M2, E4M3, kWeightGradient, F32, false}, 128, "scales every 128"},
      {{130, 24, 96, false, true, E4M3, E5M2, kDeepSeek, BF16, true}, 128, "promoted every 128"},  // one chunk
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& [g, promote_every, kernel_end] = cases[i];
    const Fp8Accumulator accumulator = wgmma_accumulator(promote_every);
    INFO(describe(g) << ", wgmma's accumulator promoted every " << promote_every);
    const GemmOperands o = operands(g, 500 + i);
    const std::string kernel = kernels::cuda::fp8_gemm_kernel_name(o.a, o.b, o.shape, accumulator, g.out);
    CHECK(kernel.starts_with("fp8 wgmma 128x128x128"));
    CHECK(kernel.ends_with(kernel_end));
    const std::int64_t chunk = g.scaling.a_k > 0 && g.scaling.a_k < g.k ? g.scaling.a_k : g.k;
    const std::int64_t groups = promote_every > 0 ? std::min<std::int64_t>(promote_every, chunk) / 32
                                                  : ceil_div(chunk, 32);
    check_against_model("rung 4 against the model", run(o, g.out, accumulator, Device::cuda()),
                        run(o, g.out, accumulator, Device::cpu()), magnitudes(o), groups, g.k);
  }
}

// One large product, then 255 small ones (test_cuda_fp8.cpp's accumulator case, derived there by hand
// for 14 significant bits that truncate): row i of A is [256, a_i, ...], column j of B [1, b_j, ...],
// products p = a_i b_j of 2^-12 at (0, 0) and 3 x 2^-12 at (1, 1), below the accumulator's last bit at
// 256 (2^-5) a group of 32 at a time. The model gives 256 never promoted, 256 + 128 p promoted every
// 128 (the first step's groups lost, the second's kept). On a GPU the numbers are printed beside the
// model's: what Hopper's QGMMA keeps, measured (scripts/gpu-check keeps the output).
TEST_CASE("cuda fp8 wgmma: promotion every 128 keeps what wgmma's accumulator drops") {
  if (!have_gpu() || !hopper()) return;
  const std::int64_t k = 256, n = 4;  // C's rows of f32 on 16 bytes: 4 columns, the last two repeats
  const double row_values[2] = {0x1p-6, 3 * 0x1p-7}, column_values[2] = {0x1p-6, 0x1p-5};
  std::vector<double> a(2 * k), b(n * k);
  for (std::int64_t kk = 0; kk < k; ++kk) {
    for (int i = 0; i < 2; ++i) a[static_cast<std::size_t>(i * k + kk)] = kk == 0 ? 256.0 : row_values[i];
    for (int j = 0; j < n; ++j) b[static_cast<std::size_t>(j * k + kk)] = kk == 0 ? 1.0 : column_values[j % 2];
  }
  const Tensor one = from_vector({1.0}, {1, 1});
  const GemmOperands o{kernels::fp8_quantize(from_vector(a, {2, k}), one, {}, DType::E4M3),
                       kernels::fp8_quantize(from_vector(b, {n, k}), one, {}, DType::E4M3),
                       {.m = 2, .n = n, .k = k, .transpose_b = true},
                       {}};
  const double p00 = 0x1p-12, p11 = 3 * 0x1p-12;
  const std::vector<double> exact = run(o, DType::F32, {}, Device::cpu()).to_vector<double>();
  CHECK(exact[0] == 256 + 255 * p00);
  CHECK(exact[n + 1] == 256 + 255 * p11);
  std::string table = fmt::format("{:<24} {:>16} {:>16}  (device: {})\n", "accumulator", "(0,0)", "(1,1)",
                                  cuda_emulated() ? "the CUDA emulator" : "a GPU");
  table += fmt::format("{:<24} {:>16.10f} {:>16.10f}\n", "CPU f32 contract", exact[0], exact[n + 1]);
  for (const int promote_every : {0, 128}) {
    INFO("promoted every " << promote_every);
    const Fp8Accumulator accumulator = wgmma_accumulator(promote_every);
    REQUIRE(kernels::cuda::fp8_gemm_kernel_name(o.a, o.b, o.shape, accumulator).starts_with("fp8 wgmma"));
    const std::vector<double> gpu = run(o, DType::F32, accumulator, Device::cuda()).to_vector<double>();
    const std::vector<double> model = run(o, DType::F32, accumulator, Device::cpu()).to_vector<double>();
    CHECK(model[0] == (promote_every ? 256 + 128 * p00 : 256));
    CHECK(model[n + 1] == (promote_every ? 256 + 128 * p11 : 256));
    if (cuda_emulated()) CHECK(gpu == model);
    table += fmt::format("{:<24} {:>16.10f} {:>16.10f}\n",
                         promote_every ? "wgmma, promoted every 128" : "wgmma, never promoted", gpu[0], gpu[n + 1]);
    table += fmt::format("{:<24} {:>16.10f} {:>16.10f}\n", "  the model (13 bits)", model[0], model[n + 1]);
  }
  MESSAGE("FP8 wgmma (QGMMA) accumulation on rung 4, 256 then 255 small products:\n" << table);
}

// What rung 4 does not take, with wgmma's accumulator asked for, is refused with what it takes; the
// same GEMMs run with mma.sync's accumulator (rungs 1 and 3).
TEST_CASE("cuda fp8 wgmma: a GEMM rung 4 does not take is refused, saying what it takes") {
  if (!have_gpu() || !hopper()) return;
  using enum DType;
  const std::vector<std::pair<GemmCase, int>> refused{
      {{64, 64, 256, true, true, E4M3, E4M3, kPerTensor, DType::F32, false}, 128},  // A M-major
      {{64, 64, 256, false, true, E4M3, E4M3, kMx, DType::F32, false}, 32},  // scales every 32
      {{64, 64, 256, false, true, E4M3, E4M3, kPerTensor, DType::F32, false}, 64},  // promoted inside a step
      {{64, 60, 256, false, true, E4M3, E4M3, kPerTensor, DType::F16, false}, 128},  // C's rows of 120 bytes
  };
  for (const auto& [g, promote_every] : refused) {
    INFO(describe(g) << ", promoted every " << promote_every);
    const GemmOperands o = operands(g, 7);
    CHECK(kernels::cuda::fp8_gemm_kernel_name(o.a, o.b, o.shape, wgmma_accumulator(promote_every), g.out)
              .starts_with("none:"));
    check_error([&] { (void)run(o, g.out, wgmma_accumulator(promote_every), Device::cuda()); },
                "which only rung 4 runs");
    (void)run(o, g.out, {}, Device::cuda());  // the F32 accumulator: rung 1 or 3
  }
}

#endif
