// The FP8 kernels on a GPU (kernels/cuda/fp8.cu, gemm_fp8.cu, gemm_fp8_mma.cu, mma_fp8.cuh) against
// the CPU's (kernels/cpu/fp8.cpp, kernels/cpu/gemm_fp8.cpp), mg::fp8_linear on a GPU against the CPU (every
// scaling; delayed with its history on either device), an nn::Linear trained there under the
// fp8_delayed recipe, every example model a few steps under every FP8 recipe, the argument checks, and
// the refusal of a GPU older than sm_89.
//
// Quantisation: block amax, codes, scale_inv and dequantised values are the CPU's bit for bit (any NaN
// matching any NaN), for f32/f16/bf16 inputs, every block shape of kernels/fp8.h, both formats, with
// saturation, inf, NaN, -0 and subnormal codes in the data.
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
#include <cstring>
#include <functional>
#include <memory>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/fp8.h"
#include "nn/models.h"
#include "tests/fp8_gemm_cases.h"

using namespace mg;
using namespace mg::testing;
using kernels::Fp8Accumulator;
using kernels::Fp8Blocks;
using kernels::Fp8Tensor;
using DType = DType;

using namespace mg::testing::fp8_cases;

TEST_CASE("cuda fp8: amax, quantisation and dequantisation are the CPU's bit for bit") {
  if (!have_gpu()) return;
  const std::vector<Fp8Blocks> block_shapes{{0, 0}, {1, 128}, {128, 128}, {1, 32}, {32, 1}, {128, 1}};
  int cases = 0;
  for (const Shape& shape : {Shape{37, 150}, Shape{150, 37}})
    for (const DType dtype : {DType::F32, DType::F16, DType::BF16}) {
      // Values across the formats' ranges, with the cases of the codec's table: overflow (the 4x scales
      // below saturate), inf, NaN, -0, and values far below the scales (subnormal codes and 0).
      std::vector<double> v = spread_randn(shape[0], shape[1], 7).to_vector<double>();
      v[3] = std::numeric_limits<double>::infinity();
      v[40] = std::nan("");
      v[41] = -0.0;
      v[42] = 1e-5;
      v[v.size() - 1] = -3e-7;
      const Tensor x = from_vector(v, shape).to(dtype), gx = x.to(Device::cuda());
      for (const Fp8Blocks blocks : block_shapes)
        for (const DType format : {DType::E4M3, DType::E5M2}) {
          INFO(fmt::format("{} {} blocks {}x{} {}", shape, dtype, blocks.rows, blocks.cols, name(format)));
          const Tensor amax = kernels::fp8_block_amax(x, blocks), gpu_amax = kernels::fp8_block_amax(gx, blocks);
          CHECK(gpu_amax.device() == Device::cuda());
          check_same_bits("amax", gpu_amax, amax);
          // Every third block's scale 4x too large: as delayed scaling meets a grown amax.
          std::vector<double> scale = scales_for(amax, format, false).to_vector<double>();
          for (std::size_t i = 0; i < scale.size(); i += 3) scale[i] *= 4.0;
          const Tensor s = from_vector(scale, amax.shape());
          const Fp8Tensor q = kernels::fp8_quantize(x, s, blocks, format);
          const Fp8Tensor gq = kernels::fp8_quantize(gx, s.to(Device::cuda()), blocks, format);
          CHECK(gq.codes.device() == Device::cuda());
          check_same_bits("codes", gq.codes, q.codes);
          check_same_bits("scale_inv", gq.scale_inv, q.scale_inv);
          check_same_bits("dequantized", kernels::fp8_dequantize(gq), kernels::fp8_dequantize(q));
          ++cases;
        }
    }
  CHECK(cases == 72);
}

// The recipes' quantisation on the device (kernels::fp8_quantize_fitted, fp8_quantize_delayed): the
// scales computed beside the amax (kernels/fp8_scale.h compiled for the device), the row-wise codes and
// the column-wise copy through the transposing tiles; the CPU's bits, and the history's.
TEST_CASE("cuda fp8: scales made on the device, row-wise codes and the column-wise copy are the CPU's bit for bit") {
  if (!have_gpu()) return;
  using kernels::Fp8Copies;
  using kernels::Fp8ScaleRule;
  using Kind = Fp8ScaleRule::Kind;
  std::vector<double> v = spread_randn(70, 45, 9).to_vector<double>();  // tiles cut at 32: edges on both sides
  v[5] = 1e-30;
  const Tensor x = from_vector(v, {70, 45}).to(DType::BF16), gx = x.to(Device::cuda());
  const std::vector<std::pair<Fp8Blocks, Fp8ScaleRule>> cases{
      {{0, 0}, {.kind = Kind::PerTensor, .margin = 1}},
      {{0, 0}, {.kind = Kind::PerTensor, .format = DType::E5M2, .power_of_two = true}},
      {{1, 32}, {.kind = Kind::Block}},
      {{32, 32}, {.kind = Kind::Block, .power_of_two = true}},
      {{32, 1}, {.kind = Kind::Mx}},
      {{1, 32}, {.kind = Kind::Mx, .format = DType::E5M2, .mx_floor = false}}};
  for (const auto& [blocks, rule] : cases)
    for (const Fp8Copies copies : {Fp8Copies::RowWise, Fp8Copies::ColumnWise, Fp8Copies::Both}) {
      INFO(fmt::format("blocks {}x{}, rule {}, copies {}", blocks.rows, blocks.cols, static_cast<int>(rule.kind),
                       static_cast<int>(copies)));
      const kernels::Fp8Quantized q = kernels::fp8_quantize_fitted(x, blocks, rule, copies);
      const kernels::Fp8Quantized gq = kernels::fp8_quantize_fitted(gx, blocks, rule, copies);
      check_same_bits("amax", gq.amax, q.amax);
      for (const auto& [gpu, cpu] : {std::pair{gq.rowwise, q.rowwise}, std::pair{gq.columnwise, q.columnwise}}) {
        REQUIRE(gpu.codes.defined() == cpu.codes.defined());
        if (!cpu.codes.defined()) continue;
        CHECK(gpu.blocks == cpu.blocks);
        check_same_bits("codes", gpu.codes, cpu.codes);
        check_same_bits("scale_inv", gpu.scale_inv, cpu.scale_inv);
      }
    }
  // Delayed: three steps of a history on the device, against the same on the CPU.
  Tensor history = zeros({3, 4}), scale = ones({3});
  Tensor g_history = history.to(Device::cuda()), g_scale = scale.to(Device::cuda());
  for (int step = 0; step < 3; ++step) {
    INFO("delayed, step " << step);
    const Tensor xs = (x.to(DType::F32) * full({}, std::exp2(step * 3))).to(DType::BF16);  // the amax grows
    const Fp8ScaleRule rule{.margin = step};
    const kernels::Fp8Quantized q = kernels::fp8_quantize_delayed(xs, history, scale, 1, rule, false, Fp8Copies::Both);
    const kernels::Fp8Quantized gq = kernels::fp8_quantize_delayed(xs.to(Device::cuda()), g_history, g_scale, 1, rule,
                                                                   false, Fp8Copies::Both);
    check_same_bits("codes", gq.rowwise.codes, q.rowwise.codes);
    check_same_bits("column-wise codes", gq.columnwise.codes, q.columnwise.codes);
    check_same_bits("scale_inv", gq.columnwise.scale_inv, q.columnwise.scale_inv);
    check_same_bits("amax history", g_history, history);
    check_same_bits("scale", g_scale, scale);
  }
  CHECK(history.data<float>()[4 + 2] > 0.0f);  // role 1's row holds three steps
  check_error([&] { (void)kernels::fp8_quantize_delayed(gx, history, scale, 1, {}, false, Fp8Copies::Both); },
              "kernels::fp8_quantize_delayed: the amax history is on cpu");
}

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

TEST_CASE("cuda fp8: fp8_linear forward and backward on the GPU are the CPU's") {
  if (!have_gpu()) return;
  const Fp8Accumulator promoted_every_32 = device_accumulator(32);  // the GPU's F32 mode, on the CPU
  // Delayed twice: its history on the CPU, and on the GPU (a Linear's buffers, moved with it).
  const std::vector<std::pair<Fp8Scaling, bool>> runs{{Fp8Scaling::Current, false},
                                                      {Fp8Scaling::Delayed, false},
                                                      {Fp8Scaling::Delayed, true},
                                                      {Fp8Scaling::Block, false},
                                                      {Fp8Scaling::Mx, false}};
  // Two sizes: 6 x 40 -> 24 on rung 1 (k = 40, 24 and 6), and 32 x 64 -> 48, whose k (64, 48 and 32) put
  // every recipe's three GEMMs on rung 3 (K-major operands from the column-wise copies).
  for (const auto& [rows, in, out] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{6, 40, 24}, {32, 64, 48}})
    for (const auto& [scaling, history_on_gpu] : runs) {
      const Fp8Options options{.scaling = scaling, .accumulator = promoted_every_32};
      INFO(options.describe() << (history_on_gpu ? std::string(", history on the GPU") : std::string()) << ", " << rows
                              << " x " << in << " -> " << out);
      Generator generator(5);
      const Tensor x = randn({rows, in}, generator).requires_grad_(true);
      const Tensor w = randn({out, in}, generator).requires_grad_(true);
      const Tensor b = randn({out}, generator).requires_grad_(true);
      const Tensor g = randn({rows, out}, generator).to(DType::BF16);
      const Tensor gx = x.detach().to(Device::cuda()).requires_grad_(true);
      const Tensor gw = w.detach().to(Device::cuda()).requires_grad_(true);
      const Tensor gb = b.detach().to(Device::cuda()).requires_grad_(true);
      Fp8History history = Fp8History::fresh(4), gpu_history = Fp8History::fresh(4);
      if (history_on_gpu)
        gpu_history = {gpu_history.amax_history.to(Device::cuda()), gpu_history.scale.to(Device::cuda())};
      for (int step = 0; step < 2; ++step) {  // delayed scaling: the second step uses the recorded amax
        INFO("step " << step);
        const Tensor y = fp8_linear(x, w, b, options, &history);
        const Tensor gy = fp8_linear(gx, gw, gb, options, &gpu_history);
        CHECK(gy.device() == Device::cuda());
        backward(y, g, {.keep_tape = true});  // the GPU graph is on the tape too
        backward(gy, g.to(Device::cuda()));
        const auto compare = [](const std::string& what, const Tensor& gpu, const Tensor& cpu) {
          if (cuda_emulated())
            check_same_bits(what, gpu, cpu);
          else  // the hardware's accumulator is not the model's for sure: the bound, with G = 1
            check_close(gpu.to(Device::cpu()).to(DType::F64), cpu.to(DType::F64), 0.02, 0.02);
        };
        compare("y", gy, y);
        compare("dx", gx.grad(), x.grad());
        compare("dW", gw.grad(), w.grad());
        check_close(gb.grad().to(Device::cpu()).to(DType::F64), b.grad().to(DType::F64), 1e-6, 1e-6);  // f32 sums
        CHECK(gpu_history.scale.device() == (history_on_gpu ? Device::cuda() : Device::cpu()));
        check_same_bits("amax history", gpu_history.amax_history, history.amax_history);
        check_same_bits("scales", gpu_history.scale, history.scale);
        for (Tensor t : {x, w, b, gx, gw, gb}) t.zero_grad();
      }
    }
  // Operands on two devices are refused with the op's name.
  check_error([&] { (void)fp8_linear(ones({2, 4}).to(Device::cuda()), ones({3, 4}), {}, {}); }, "mg::fp8_linear");
}

TEST_CASE("cuda fp8: an nn::Linear under the fp8_delayed recipe trains on the GPU, its history with it") {
  if (!have_gpu()) return;
  const amp::Recipe recipe = amp::Recipe::parse("fp8_delayed");
  Generator generator(11);
  auto layer = std::make_shared<nn::Linear>(40, 24, true, generator);
  recipe.prepare(*layer);  // the delayed-scaling buffers
  layer->to(Device::cuda());
  REQUIRE(layer->fp8_history.amax_history.device() == Device::cuda());
  const Tensor x = randn({6, 40}, generator);
  const double amax = kernels::fp8_block_amax(x, {}).item();
  for (int step = 0; step < 2; ++step) {
    Tensor loss;
    {
      Autocast region = recipe.autocast();
      loss = sum(cast((*layer)(x.to(Device::cuda())), DType::F32));
    }
    backward(loss);
    const Tensor grad = layer->weight.grad();
    REQUIRE(grad.defined());
    CHECK(grad.device() == Device::cuda());
    for (double g : grad.to(Device::cpu()).to_vector<double>()) REQUIRE(std::isfinite(g));
    layer->weight.zero_grad();
    layer->bias.zero_grad();
  }
  // The input's row of the history: this step's amax, then the last one's (written back to the GPU).
  const std::vector<double> history = layer->fp8_history.amax_history.to(Device::cpu()).to_vector<double>();
  CHECK(history[0] == amax);
  CHECK(history[1] == amax);
}

TEST_CASE("cuda fp8: every example model trains a few steps under every FP8 recipe on the GPU") {
  if (!have_gpu()) return;
  // Tiny shapes (the emulator runs a kernel ~1000x slower than the CPU's loop): the first step's loss
  // is the CPU's within the bound of an FP8 GEMM, and 4 steps of Adam on one batch lower it.
  // Under the sanitizers (MG_TEST_REDUCED) the MLP and the GPT under two recipes only.
  Generator data(11);
  const Tensor images = randn({8, 1, 8, 8}, data), classes = randint(0, 3, {8}, data);
  const Tensor tokens = randint(0, 7, {2, 7}, data);
  const Tensor context = slice(tokens, 1, 0, 6), next = slice(tokens, 1, 1, 7);
  struct Model {
    std::string name;
    std::function<std::shared_ptr<nn::Module>(Generator&)> build;
    Tensor inputs, labels;
  };
  std::vector<Model> models{
      {"mlp",
       [](Generator& g) {
         return nn::mlp({64, 16, 3}, g);
       },
       images, classes},
      {"tiny_gpt",
       [](Generator& g) {
         return std::make_shared<nn::TinyGPT>(
             nn::GptOptions{.vocab = 7, .block_size = 6, .embed_dim = 8, .heads = 2, .layers = 1}, g);
       },
       context, next},
  };
  std::vector<std::string> recipes{"fp8_delayed", "mxfp8"};
  if (!reduced_sizes()) {
    models.push_back({"cnn",
                      [](Generator& g) {
                        return nn::cnn({.image_size = 8, .channels1 = 2, .channels2 = 4, .hidden = 8, .classes = 3}, g);
                      },
                      images, classes});
    models.push_back(
        {"char_lstm", [](Generator& g) { return std::make_shared<nn::CharLSTM>(7, 4, 8, 1, g); }, context, next});
    recipes = {"fp8_delayed", "fp8_current", "fp8_block", "mxfp8"};
  }
  for (const std::string& name : recipes) {
    for (const Model& m : models) {
      INFO(name << " " << m.name);
      auto run = [&](Device device) {
        Generator init(1);
        train::Trainer trainer(m.build(init), {.recipe = amp::Recipe::parse(name),
                                               .optimizer = {.name = "adam", .lr = 0.02},
                                               .device = device});
        std::vector<double> losses;
        for (int step = 0; step < 4; ++step)
          losses.push_back(trainer.step(m.inputs.to(device), m.labels.to(device)).loss.item());
        return losses;
      };
      const std::vector<double> gpu = run(Device::cuda()), cpu = run(Device::cpu());
      CHECK(std::fabs(gpu[0] - cpu[0]) <= 0.02 * std::fabs(cpu[0]));
      CHECK(std::isfinite(gpu.back()));
      CHECK(gpu.back() < gpu.front());
    }
  }
}

TEST_CASE("cuda fp8: argument checks") {
  if (!have_gpu()) return;
  const Tensor x = ones({4, 64});
  const Fp8Tensor q = kernels::fp8_quantize(x, ones({1, 1}), {}, DType::E4M3), gq = on(q, Device::cuda());
  Tensor c = Tensor::empty({4, 4}, {.device = Device::cuda()});
  const kernels::GemmShape shape{.m = 4, .n = 4, .k = 64, .transpose_b = true};
  // Operands on two devices.
  check_error([&] { kernels::fp8_gemm(gq, q, c, shape); }, "must be on one device");
  check_error([&] { kernels::fp8_gemm({gq.codes, q.scale_inv, {}}, gq, c, shape); }, "the codes' device");
  check_error([&] { (void)kernels::fp8_quantize(x.to(Device::cuda()), ones({1, 1}), {}, DType::E4M3); }, "scale");
  check_error([&] { kernels::fp8_gemm(gq, gq, c, shape, {}, {.bias = ones({4})}); }, "C's device");
  // A GPU's Limited accumulator is the device's own (kernels/fp8.h), whatever else is asked for.
  check_error([&] { kernels::fp8_gemm(gq, gq, c, shape, {.limited = true, .mantissa_bits = 10}); },
              "Tensor Core's own");
  check_error([&] { kernels::fp8_gemm(gq, gq, c, shape, {.limited = true, .group = 8, .promote_every = 32}); },
              "only promote_every");
  // Rung 1's grid holds n up to 65535 x 16; past it a GEMM rung 3 cannot take (B [k, n]) is refused.
  const std::int64_t wide = 65536 * 16 + 1;
  const auto codes = [](const Shape& shape) {
    return Fp8Tensor{Tensor::empty(shape, {.dtype = DType::E4M3, .device = Device::cuda()}),
                     ones({1, 1}).to(Device::cuda()),
                     {}};
  };
  Tensor wide_c = Tensor::empty({1, wide}, {.device = Device::cuda()});
  check_error(
      [&] {
        kernels::fp8_gemm(codes({1, 16}), codes({16, wide}), wide_c, {.m = 1, .n = wide, .k = 16});
      },
      "beyond rung 1");
  // A scale that is not finite and positive is found on the GPU too (read back).
  check_error(
      [&] {
        (void)kernels::fp8_quantize(x.to(Device::cuda()), zeros({1, 1}).to(Device::cuda()), {}, DType::E4M3);
      },
      "finite positive");
}

// Registered as its own ctest entry (test_cuda_fp8_before_sm89) with MG_EMULATOR_COMPUTE_CAPABILITY=80:
// the emulator then reports an A100's compute capability, and the GEMM must refuse it by name.
TEST_CASE("cuda fp8: a GPU older than sm_89 is refused, naming the device and its capability") {
  if (!have_gpu()) return;
  const char* capability = std::getenv("MG_EMULATOR_COMPUTE_CAPABILITY");
  if (!cuda_emulated() || capability == nullptr || std::atoi(capability) >= 89) {
    MESSAGE(
        "skipped: runs on the emulator with MG_EMULATOR_COMPUTE_CAPABILITY below 89 (ctest test_cuda_fp8_before_sm89)");
    return;
  }
  const Fp8Tensor q = on(kernels::fp8_quantize(ones({16, 32}), ones({1, 1}), {}, DType::E4M3), Device::cuda());
  Tensor c = Tensor::empty({16, 16}, {.device = Device::cuda()});
  const std::string expected = fmt::format("has compute capability {}.{}", std::atoi(capability) / 10,
                                           std::atoi(capability) % 10);
  check_error([&] { kernels::fp8_gemm(q, q, c, {.m = 16, .n = 16, .k = 32, .transpose_b = true}); }, expected);
  check_error([&] { kernels::fp8_gemm(q, q, c, {.m = 16, .n = 16, .k = 32, .transpose_b = true}); }, "sm_89");
  check_error([&] { kernels::fp8_gemm(q, q, c, {.m = 16, .n = 16, .k = 32, .transpose_b = true}); }, "cuda:0");
  // Quantisation needs no Tensor Cores: it runs there.
  CHECK(kernels::fp8_dequantize(q).to(Device::cpu()).to_vector<double>() == std::vector<double>(16 * 32, 1.0));
}
