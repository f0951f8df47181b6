// The FP8 GEMM on a GPU (kernels/cuda/gemm_fp8.cu, gemm_fp8_mma.cu, mma_fp8.cuh) against the CPU's
// model of the Tensor Core accumulator (kernels/cpu/gemm_fp8.cpp); rung 4 (wgmma) has its own suite,
// tests/test_cuda_fp8_wgmma.cpp.
//
// The GEMM is compared with the CPU's Limited model (kernels/fp8.h) with the device's accumulator
// (kernels::cuda::fp8_mma_accumulator: Ada's 14-bit model on sm_89, Hopper's f32 HMMA on sm_90): the
// GPU's F32 mode (promotion after every mma.sync) with the model promoted every 32 products, its
// Limited mode with the model promoted as often; per-tensor, 1x128 with 128x128, MX 1x32 and the
// {128, 1} blocks of a weight gradient, all four layouts, mixed formats, ragged m, n and k, C in
// f32/f16/bf16, bias + relu. On the emulator the mma.sync is that model (mma_fp8.cuh), so the
// comparison is bit for bit; ctest runs the suite on an emulated Hopper and again on an emulated Ada
// (test_cuda_fp8_sm89), where promotion matters. On a real GPU the model is an assumption about the
// hardware, so there the check is the bound both must meet, and the count of elements equal bit for
// bit is printed:
//   |GPU - model| <= 2 (G 2^-13 + (2k + 16) 2^-24) S + eps(C) |model| + 2^-24
// with S = sum over k of |a_ik b_kj| (scales included) plus |bias_j|, and G the mma.sync between two
// promotions: an accumulator that keeps 14 significant bits and truncates loses less than 2^-13 of the
// running sum at each of its G additions, the f32 steps (promotions, scales, bias) and the CPU's f32
// adds cost 2^-24 each, and each side rounds once into C. The factor 2 leaves room for an accumulator
// one bit shorter. The GPU's F32 mode is also held to the CPU's F32 contract with that bound (G = 1).
//
// The accumulator's width and rounding, told apart: one large product followed by many small ones,
// whose groups of 32 fall below the 14-bit accumulator's last bit. The emulator must give its model's
// numbers (derived by hand below for Ada's; the f32 sums for Hopper's); a real GPU's are printed beside
// them (scripts/gpu-check keeps the output), which is how a GPU run measures what the hardware does. An
// H200 gave the f32 sums in every mode (bench/results/fp8_accumulator-h200-2026-11-28.txt).
#include "tests/testing.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

// A build without CUDA (-DMG_CUDA=OFF) has none of the kernels these cases name: the suite is empty there.
#ifdef MG_WITH_CUDA
#include "kernels/fp8.h"
#include "tests/fp8_gemm_cases.h"

using namespace mg;
using namespace mg::testing;
using namespace mg::testing::fp8_cases;  // Fp8Accumulator, Fp8Blocks, Fp8Tensor and the cases

TEST_CASE("cuda fp8: the GEMM is the CPU's Limited model, bit for bit on the emulator") {
  if (!have_gpu()) return;
  using enum DType;
  const std::vector<GemmCase> cases{
      // Per-tensor: every layout and format pair, m, n and k ragged against 16, 8 and 32.
      {19, 13, 70, false, false, E4M3, E4M3, kPerTensor, F32, false},
      {19, 13, 70, true, false, E4M3, E5M2, kPerTensor, BF16, true},
      {19, 13, 70, false, true, E5M2, E4M3, kPerTensor, F16, false},
      {19, 13, 70, true, true, E5M2, E5M2, kPerTensor, F32, true},
      {1, 1, 1, false, false, E4M3, E4M3, kPerTensor, F32, false},
      {5, 3, 0, false, true, E4M3, E4M3, kPerTensor, BF16, true},  // k = 0: C = act(bias)
      // DeepSeek-V3's blocks: the forward (x [m, k] by rows of 128, W [n, k] in 128 x 128), and dx
      // (dy by rows of 128, W [k, n] in 128 x 128) with a ragged last block.
      {33, 17, 256, false, true, E4M3, E4M3, kDeepSeek, BF16, true},
      {33, 17, 300, false, false, E5M2, E4M3, kDeepSeek, F32, false},
      // MX: 32-element blocks with power-of-two scales, both along rows and (transposed) down columns.
      {24, 20, 96, false, true, E4M3, E4M3, kMx, F32, true},
      {20, 24, 100, true, false, E4M3, E5M2, kMx, BF16, false},
      // A weight gradient: dy^T x, both stored [k, *] with {128, 1} blocks.
      {17, 21, 300, true, false, E5M2, E4M3, kWeightGradient, F32, false},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const GemmCase& g = cases[i];
    INFO(describe(g));
    const GemmOperands o = operands(g, 100 + i);
    const std::vector<double> s = magnitudes(o);
    // F32: on the GPU, promotion after every mma.sync; the model promoted every 32 products.
    const Tensor gpu_f32 = run(o, g.out, {}, Device::cuda());
    const Tensor model_32 = run(o, g.out, device_accumulator(32), Device::cpu());
    check_against_model("F32 mode against the model promoted every 32", gpu_f32, model_32, s, 1, g.k);
    // ... and within the bound of the CPU's F32 contract.
    check_within_bound("F32 mode against the CPU's F32", gpu_f32, run(o, g.out, {}, Device::cpu()), s, 1, g.k);
    // Limited: the same promotion on both sides (0: never, within a per-tensor chunk of all of k).
    const Fp8Accumulator limited = device_accumulator(g.scaling.promote_every);
    const std::int64_t groups = g.scaling.promote_every > 0 ? g.scaling.promote_every / 32 : ceil_div(g.k, 32);
    check_against_model("Limited mode", run(o, g.out, limited, Device::cuda()), run(o, g.out, limited, Device::cpu()),
                        s, groups, g.k);
  }
}

// Rung 3 (kernels/cuda/gemm_fp8_mma.cu): K-major operands, as fp8_linear gives them in every recipe.
// Ragged against its 128 x 128 and 64 x 128 tiles and its 128-code k steps (k = 400: the last step a
// quarter full, its last instruction half, and with blocks the last chunk of 16 codes), every format
// pair and output dtype, each way of keeping the sums: per tensor promoted after every instruction
// (F32) or every 64 or 128 or never (Limited), DeepSeek-V3's blocks (chunks of 128: F32, and Limited
// promoted at each chunk's end), MX (chunks of 32), a weight gradient's blocks, and per-row scales in
// a single chunk (k below the block). Each is the CPU's model bit for bit on the emulator, and rung
// 1's result for the same operands stored the other way bit for bit everywhere: the same sums in the
// same order.
TEST_CASE("cuda fp8: the GEMM's rung 3 (K-major) is the CPU's model and rung 1, bit for bit, in every recipe") {
  if (!have_gpu()) return;
  using enum DType;
  struct Rung3Case {
    GemmCase g;
    int promote_every;  // -1: the F32 accumulator (the model's promote_every is 32), else Limited
    const char* kernel;  // the name's start and end (kernel_name: the tile, then how the sums are kept)
    const char* kernel_end;
  };
  const char* per_tensor = "fp8 mma 128x128x128, 3 stages";
  const char* two_sets = "fp8 mma 64x128x128, 3 stages";
  const std::vector<Rung3Case> cases{
      {{150, 140, 400, false, true, E4M3, E4M3, kPerTensor, BF16, true}, -1, per_tensor, "stages"},
      {{150, 140, 400, false, true, E4M3, E5M2, kPerTensor, F32, false}, -1, per_tensor, "stages"},
      {{130, 20, 48, false, true, E5M2, E4M3, kPerTensor, F16, true}, -1, per_tensor, "stages"},
      {{17, 129, 256, false, true, E5M2, E5M2, kPerTensor, F32, true}, -1, per_tensor, "stages"},
      {{5, 3, 0, false, true, E4M3, E4M3, kPerTensor, BF16, true}, -1, per_tensor, "stages"},
      {{150, 140, 400, false, true, E4M3, E4M3, kPerTensor, F32, false}, 128, two_sets, "promoted every 128"},
      {{70, 140, 400, false, true, E5M2, E4M3, kPerTensor, BF16, true}, 64, two_sets, "promoted every 64"},
      {{70, 33, 256, false, true, E4M3, E4M3, kPerTensor, F32, false}, 0, two_sets, "never promoted"},
      {{150, 140, 400, false, true, E4M3, E4M3, kDeepSeek, BF16, true}, -1, two_sets, "scales every 128"},
      {{150, 140, 400, false, true, E4M3, E5M2, kDeepSeek, F32, false},
       128,
       two_sets,
       "promoted every 128, scales every 128"},
      {{70, 140, 400, false, true, E4M3, E4M3, kMx, F16, true}, -1, two_sets, "scales every 32"},
      {{70, 140, 400, false, true, E5M2, E4M3, kMx, F32, false}, 32, two_sets, "scales every 32"},
      {{21, 17, 272, false, true, E5M2, E4M3, kWeightGradient, F32, false}, -1, two_sets, "scales every 128"},
      {{130, 20, 96, false, true, E4M3, E4M3, kDeepSeek, BF16, true}, -1, per_tensor, "stages"},  // one chunk
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Rung3Case& c = cases[i];
    const GemmCase& g = c.g;
    const Fp8Accumulator accumulator = c.promote_every < 0 ? Fp8Accumulator{} : device_accumulator(c.promote_every);
    INFO(describe(g) << ", " << (c.promote_every < 0 ? "F32" : "Limited") << " promoted every " << c.promote_every);
    const GemmOperands o = operands(g, 300 + i);
    const std::string kernel = kernels::cuda::fp8_gemm_kernel_name(o.a, o.b, o.shape, accumulator);
    CHECK(kernel.starts_with(c.kernel));
    CHECK(kernel.ends_with(c.kernel_end));
    const Tensor gpu = run(o, g.out, accumulator, Device::cuda());
    const int model_promotion = c.promote_every < 0 ? 32 : c.promote_every;
    check_against_model("rung 3 against the model", gpu,
                        run(o, g.out, device_accumulator(model_promotion), Device::cpu()), magnitudes(o),
                        model_promotion > 0 ? model_promotion / 32 : ceil_div(g.k, 32), g.k);
    const GemmOperands t = with_a_transposed(o);
    CHECK(kernels::cuda::fp8_gemm_kernel_name(t.a, t.b, t.shape, accumulator).find("rung 1") != std::string::npos);
    check_same_bits("rung 3 against rung 1", gpu, run(t, g.out, accumulator, Device::cuda()).to(Device::cpu()));
  }
  // What rung 3 leaves to rung 1: other layouts (above), k not a multiple of 16, chunks other than
  // 32 and 128, a Limited accumulator promoted more often than its chunks end.
  const auto rung = [](const GemmCase& g, const Fp8Accumulator& accumulator) {
    const GemmOperands o = operands(g, 9);
    return kernels::cuda::fp8_gemm_kernel_name(o.a, o.b, o.shape, accumulator);
  };
  CHECK(rung({64, 64, 40, false, true, E4M3, E4M3, kPerTensor, F32, false}, {}).find("rung 1") != std::string::npos);
  const Scaling blocks_of_64{"1x64 blocks", 1, 64, 1, 64, false, 64};
  CHECK(rung({64, 64, 256, false, true, E4M3, E4M3, blocks_of_64, F32, false}, {}).find("rung 1") != std::string::npos);
  CHECK(rung({64, 64, 256, false, true, E4M3, E4M3, kDeepSeek, F32, false}, device_accumulator(64)).find("rung 1") !=
        std::string::npos);
}

// One large product, then 255 small ones: row i of A is [256, a_i, a_i, ...], column j of B is
// [1, b_j, b_j, ...], per-tensor scales of 1. At 256 the 14-bit accumulator's last bit is 2^-5.
//   (0, 0): products 2^-12; a group of 32 adds 2^-7, a quarter of that bit
//   (1, 1): products 3 x 2^-12; a group adds 3 x 2^-7 = 0.75 of the bit (nearest would round it up)
//   (0, 1): products 2^-11, a group half the bit (a tie);  (1, 0): 1.5 x 2^-12, 0.375 of the bit
// By hand, for (0, 0) and (1, 1), with s = 255 products p (31 in the first group, 32 in the other 7):
//   f32 (the CPU's contract)     256 + 255 p                  exact in f32
//   13 bits, never promoted      256                          every group truncated away
//   promoted every 128           256 + 128 p                  the first 4 groups lost, the last 4 kept
//   promoted every 32 (F32 mode) 256 + 224 p                  only the first group's 31 p lost
// That is Ada's model (sm_89). Hopper's (sm_90: f32 HMMA) keeps every product: 256 + 255 p in every
// mode, as the H200 measured. Each mode runs on rung 3 (A [2, k], K-major) and on rung 1 (A stored
// [k, 2]), which must agree bit for bit.
TEST_CASE("cuda fp8: the accumulator's width and rounding, one large product and many small ones") {
  if (!have_gpu()) return;
  const std::int64_t k = 256;
  std::vector<double> a(2 * k), b(k * 2);  // A [2, k], B stored [n = 2, k] (transposed)
  const double a_small[2] = {0x1p-6, 1.5 * 0x1p-6}, b_small[2] = {0x1p-6, 0x1p-5};
  for (int r = 0; r < 2; ++r)
    for (std::int64_t kk = 0; kk < k; ++kk) {
      a[static_cast<std::size_t>(r * k + kk)] = kk == 0 ? 256.0 : a_small[r];
      b[static_cast<std::size_t>(r * k + kk)] = kk == 0 ? 1.0 : b_small[r];
    }
  const Tensor one = ones({1, 1});
  const Fp8Tensor qa = kernels::fp8_quantize(from_vector(a, {2, k}), one, {}, DType::E4M3);
  const Fp8Tensor qb = kernels::fp8_quantize(from_vector(b, {2, k}), one, {}, DType::E4M3);
  CHECK(kernels::fp8_dequantize(qa).to_vector<double>() == a);  // every value is an E4M3 value
  CHECK(kernels::fp8_dequantize(qb).to_vector<double>() == b);
  const GemmOperands o{qa, qb, {.m = 2, .n = 2, .k = k, .transpose_b = true}, {}};
  struct Mode {
    const char* name;
    Fp8Accumulator accumulator;
    double p00, p11;  // the model's (0, 0) and (1, 1): 256 + count x p
  };
  const double p00 = 0x1p-12, p11 = 3 * 0x1p-12;
  const std::vector<Mode> modes{
      {"F32 (promoted every 32)", {}, 256 + 224 * p00, 256 + 224 * p11},
      {"Limited, never promoted", device_accumulator(0), 256, 256},
      {"Limited, promoted every 128", device_accumulator(128), 256 + 128 * p00, 256 + 128 * p11},
  };
  const std::vector<double> exact = run(o, DType::F32, {}, Device::cpu()).to_vector<double>();
  const Fp8Accumulator own = kernels::cuda::fp8_mma_accumulator(Device::cuda());
  const bool ada = own.mantissa_bits == kernels::kAdaFp8Accumulator.mantissa_bits;
  CHECK(exact == std::vector<double>{256 + 255 * p00, 256 + 255 * 0x1p-11, 256 + 255 * 1.5 * 0x1p-12, 256 + 255 * p11});
  std::string table = fmt::format("{:<28} {:>16} {:>16} {:>16} {:>16}  (device: {})\n", "accumulator", "(0,0)", "(0,1)",
                                  "(1,0)", "(1,1)", cuda_emulated() ? "the CUDA emulator" : "a GPU");
  table += fmt::format("{:<28} {:>16.10f} {:>16.10f} {:>16.10f} {:>16.10f}\n", "CPU f32 contract", exact[0], exact[1],
                       exact[2], exact[3]);
  const GemmOperands rung1 = with_a_transposed(o);  // the same sums on rung 1 (o is K-major: rung 3)
  CHECK(kernels::cuda::fp8_gemm_kernel_name(o.a, o.b, o.shape, {}).starts_with("fp8 mma 128x128x128"));
  CHECK(kernels::cuda::fp8_gemm_kernel_name(rung1.a, rung1.b, rung1.shape, {}).ends_with("(rung 1)"));
  for (const Mode& mode : modes) {
    const std::vector<double> gpu = run(o, DType::F32, mode.accumulator, Device::cuda()).to_vector<double>();
    CHECK(run(rung1, DType::F32, mode.accumulator, Device::cuda()).to_vector<double>() == gpu);
    table += fmt::format("{:<28} {:>16.10f} {:>16.10f} {:>16.10f} {:>16.10f}\n", mode.name, gpu[0], gpu[1], gpu[2],
                         gpu[3]);
    if (cuda_emulated()) {
      INFO(mode.name);
      // Ada's model loses what the hand derivation above says; Hopper's f32 HMMA keeps every product.
      CHECK(gpu[0] == (ada ? mode.p00 : exact[0]));
      CHECK(gpu[3] == (ada ? mode.p11 : exact[3]));
      // The CPU's Limited model gives the same numbers (F32 mode: promote_every 32).
      const Fp8Accumulator model = device_accumulator(mode.accumulator.limited ? mode.accumulator.promote_every : 32);
      CHECK(run(o, DType::F32, model, Device::cpu()).to_vector<double>() == gpu);
    }
  }
  MESSAGE("FP8 mma.sync accumulation, 256 then 255 small products (the device's model: "
          << own.mantissa_bits + 1 << " significant bits, " << (ada ? "truncation" : "to nearest") << ", groups of "
          << own.group << "):\n"
          << table);
}

#endif  // MG_WITH_CUDA
