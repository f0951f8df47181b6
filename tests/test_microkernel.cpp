// The GEMM microkernels (kernels/cpu/microkernel.h): vdpbf16ps's rules, pinned on the scalar model
// by hand-made cases (odd element first, two roundings, DAZ on every input, FTZ on every result), and
// every instruction kernel this CPU runs against its model, bit for bit, on panels that hold zeros,
// subnormals, huge values, infinities and NaN. On a CPU without an instruction its case says so and
// checks the models alone; tests/test_gemm_packed checks the whole GEMM around them. The Fma kernels'
// second entry, run_gathered (both operands read in place), against run on the same values packed.
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/microkernel.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::kernels::cpu;

namespace {

std::uint16_t bf16_bits(float x) {  // x must be a bf16 value
  const auto bits = std::bit_cast<std::uint32_t>(x);
  REQUIRE((bits & 0xFFFFu) == 0);
  return static_cast<std::uint16_t>(bits >> 16);
}

float dot(float acc, float a_even, float a_odd, float b_even, float b_odd) {
  return bf16_dot_step(acc, bf16_bits(a_even), bf16_bits(a_odd), bf16_bits(b_even), bf16_bits(b_odd));
}

bool same_bits(float x, float y) {
  return std::isnan(x) ? std::isnan(y) : std::bit_cast<std::uint32_t>(x) == std::bit_cast<std::uint32_t>(y);
}

// A bf16 bit pattern of every kind: mostly ordinary values near 1, then zeros of both signs,
// subnormals, values near the ends of the range (products overflow or fall below 2^-126), inf, NaN.
std::uint16_t random_bf16(std::mt19937& rng) {
  const std::uint32_t kind = rng() % 100, sign = (rng() & 1u) << 15, mantissa = rng() & 0x7Fu;
  if (kind < 80) return static_cast<std::uint16_t>(sign | (120u + rng() % 16) << 7 | mantissa);  // 2^-7 .. 2^8
  if (kind < 84) return static_cast<std::uint16_t>(sign);  // +-0
  if (kind < 88) return static_cast<std::uint16_t>(sign | std::max(mantissa, 1u));  // subnormal
  if (kind < 92) return static_cast<std::uint16_t>(sign | (1u + rng() % 8) << 7 | mantissa);  // tiny normal
  if (kind < 96) return static_cast<std::uint16_t>(sign | (240u + rng() % 14) << 7 | mantissa);  // huge
  if (kind < 98) return static_cast<std::uint16_t>(sign | 0x7F80u);  // inf
  return static_cast<std::uint16_t>(0x7FC0u | mantissa);  // NaN
}

// Runs `kernel` on random panels, `steps` steps, into a tile of row stride ld; returns the tile.
std::vector<float> run_kernel(const MicroKernel& kernel, std::int64_t steps, std::int64_t ld, bool accumulate,
                              std::uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  const bool pairs = kernel.arith == MicroArith::Bf16Dot;
  std::vector<std::uint32_t> a(static_cast<std::size_t>(steps * kernel.mr)),
      b(static_cast<std::size_t>(steps * kernel.nr));
  for (auto* panel : {&a, &b})
    for (std::uint32_t& word : *panel) {
      if (pairs) {
        word = specials ? random_bf16(rng) | std::uint32_t{random_bf16(rng)} << 16
                        : (0x3F00u + rng() % 0x100) | (0x3F00u + rng() % 0x100) << 16;
      } else {  // an f32 value of the same kinds: a bf16 pattern widened, with random low bits
        word = std::uint32_t{specials ? random_bf16(rng) : static_cast<std::uint16_t>(0x3F00u + rng() % 0x100)} << 16 |
               (rng() & 0xFFFFu);
        if (std::isnan(std::bit_cast<float>(word))) word = 0x7FC00000u;
      }
    }
  std::vector<float> tile(static_cast<std::size_t>(kernel.mr * ld));
  std::uniform_real_distribution<float> start(-4.0f, 4.0f);
  for (float& value : tile) value = start(rng);
  kernel.run(steps, a.data(), b.data(), tile.data(), ld, accumulate);
  return tile;
}

}  // namespace

TEST_CASE("bf16 dot step: the odd element of the pair first, each product added with one rounding") {
  // 1 + 2^-24 (1 + 2^-7) is past the halfway point: rounds up to 1 + 2^-23; then -2^-23 gives 1.
  // The other order (or one exact sum) would give 1 - 2^-24.
  const float odd_product_a = 1.0f + 0x1p-7f, odd_product_b = 0x1p-24f;
  CHECK(dot(1.0f, -0x1p-23f, odd_product_a, 1.0f, odd_product_b) == 1.0f);
  CHECK(dot(1.0f, odd_product_a, -0x1p-23f, odd_product_b, 1.0f) == 1.0f - 0x1p-24f);
  // Ordinary values: exactly acc + a_odd b_odd + a_even b_even when nothing rounds.
  CHECK(dot(0.5f, 3.0f, -2.0f, 0.25f, 1.5f) == 0.5f - 3.0f + 0.75f);
  // Ties go to even: 1 + 2^-24 is halfway between 1 and 1 + 2^-23.
  CHECK(dot(1.0f, 0.0f, 0x1p-24f, 0.0f, 1.0f) == 1.0f);
  CHECK(dot(1.0f + 0x1p-23f, 0.0f, 0x1p-24f, 0.0f, 1.0f) == 1.0f + 0x1p-22f);
}

TEST_CASE("bf16 dot step: subnormal inputs count as zero, subnormal results are flushed to zero") {
  const float bf16_subnormal = std::bit_cast<float>(std::uint32_t{0x0001u} << 16);  // 2^-133
  REQUIRE(std::fpclassify(bf16_subnormal) == FP_SUBNORMAL);
  // DAZ on an operand: 2^-133 * 2^100 would be 2^-33, a normal f32.
  CHECK(dot(0.0f, 0.0f, bf16_subnormal, 0.0f, 0x1p100f) == 0.0f);
  CHECK(dot(1.0f, bf16_subnormal, 0.0f, 0x1p100f, 0.0f) == 1.0f);
  // DAZ on the accumulator: a subnormal f32 sum reads as 0.
  CHECK(dot(0x1p-130f, 0.0f, 0x1p-63f, 0.0f, 0x1p-63f) == 0x1p-126f);
  CHECK(dot(0x1p-130f, 0.0f, 0.0f, 0.0f, 0.0f) == 0.0f);
  // FTZ on the result: 2^-70 * 2^-60 = 2^-130 is subnormal, written as zero of its sign (the even
  // product, -0 * 0 = -0, keeps that sign: -0 + -0 = -0, where +0 would make it +0).
  const float positive = dot(0.0f, 0.0f, 0x1p-70f, 0.0f, 0x1p-60f),
              negative = dot(0.0f, -0.0f, -0x1p-70f, 0.0f, 0x1p-60f);
  CHECK(positive == 0.0f);
  CHECK_FALSE(std::signbit(positive));
  CHECK(negative == 0.0f);
  CHECK(std::signbit(negative));
  // Tininess is judged after rounding: 2^-126 + 2^-149 - 2^-149 (1 + 2^-7) is 2^-126 - 2^-156 exactly,
  // below the smallest normal, but rounds to 2^-126, which is kept.
  CHECK(dot(0x1p-126f + 0x1p-149f, 0.0f, -(1.0f + 0x1p-7f) * 0x1p-75f, 0.0f, 0x1p-74f) == 0x1p-126f);
  // 2^-126, the smallest normal, survives; so do huge products, up to inf.
  CHECK(dot(0.0f, 0.0f, 0x1p-63f, 0.0f, 0x1p-63f) == 0x1p-126f);
  CHECK(std::isinf(dot(0.0f, 0.0f, 0x1p100f, 0.0f, 0x1p100f)));
  CHECK(std::isnan(dot(0.0f, 0.0f, std::numeric_limits<float>::infinity(), 0.0f, 0.0f)));
}

TEST_CASE("bf16 dot step: the instruction follows the same rules, case by case") {
  const MicroKernel* kernel = microkernel(MicroKernelId::Avx512Bf16Dot);
  if (!kernel) {
    MESSAGE("this CPU has no AVX512_BF16: the rules are checked on the model alone");
    return;
  }
  // {acc, a_even, a_odd, b_even, b_odd}: the cases of the two cases above.
  const float bf16_subnormal = std::bit_cast<float>(std::uint32_t{0x0001u} << 16);
  const std::vector<std::array<float, 5>> cases{
      {1.0f, -0x1p-23f, 1.0f + 0x1p-7f, 1.0f, 0x1p-24f},
      {1.0f, 1.0f + 0x1p-7f, -0x1p-23f, 0x1p-24f, 1.0f},
      {1.0f, 0.0f, 0x1p-24f, 0.0f, 1.0f},
      {0.0f, 0.0f, bf16_subnormal, 0.0f, 0x1p100f},
      {0x1p-130f, 0.0f, 0x1p-63f, 0.0f, 0x1p-63f},
      {0.0f, -0.0f, -0x1p-70f, 0.0f, 0x1p-60f},
      {0.0f, 0.0f, 0x1p-70f, 0.0f, 0x1p-60f},
      {0x1p-126f + 0x1p-149f, 0.0f, -(1.0f + 0x1p-7f) * 0x1p-75f, 0.0f, 0x1p-74f},
  };
  for (const auto& [acc, a_even, a_odd, b_even, b_odd] : cases) {
    // One step of k; every row of A and column of B holds the same pair, so every lane computes it.
    std::vector<std::uint32_t> a(static_cast<std::size_t>(kernel->mr),
                                 bf16_bits(a_even) | std::uint32_t{bf16_bits(a_odd)} << 16);
    std::vector<std::uint32_t> b(static_cast<std::size_t>(kernel->nr),
                                 bf16_bits(b_even) | std::uint32_t{bf16_bits(b_odd)} << 16);
    std::vector<float> tile(static_cast<std::size_t>(kernel->mr * kernel->nr), acc);
    kernel->run(1, a.data(), b.data(), tile.data(), kernel->nr, true);
    const float want = dot(acc, a_even, a_odd, b_even, b_odd);
    INFO("acc " << acc << ", pairs (" << a_even << ", " << a_odd << ") (" << b_even << ", " << b_odd
                << "): the model gives " << want);
    for (float got : tile) REQUIRE(same_bits(got, want));
  }
}

TEST_CASE("microkernels: the table names every kernel, the models run everywhere") {
  const std::vector<const MicroKernel*> kernels = runnable_microkernels();
  REQUIRE(kernels.size() >= 3);
  for (MicroKernelId model : {MicroKernelId::ModelFma, MicroKernelId::ModelBf16Dot, MicroKernelId::ModelFma6x16}) {
    REQUIRE(microkernel(model) != nullptr);
    CHECK(model_of(model) == model);
  }
  const MicroCpu& cpu = micro_cpu();
  CHECK((microkernel(MicroKernelId::Avx512Bf16Dot) != nullptr) == cpu.avx512_bf16);
  CHECK((!cpu.bf16_dot_pays || cpu.avx512_bf16));  // whether the instruction pays, only where it exists
  CHECK((microkernel(MicroKernelId::Avx512Fma) != nullptr) == cpu.avx512f);
  CHECK((microkernel(MicroKernelId::Avx2Fma) != nullptr) == cpu.avx2_fma);
  CHECK(microkernel_name(MicroKernelId::Avx512Bf16Dot) == "avx512-bf16-dot");
}

TEST_CASE("microkernels: every instruction kernel this CPU runs matches its model bit for bit") {
  int compared = 0;
  for (MicroKernelId id : {MicroKernelId::Avx2Fma, MicroKernelId::Avx512Fma, MicroKernelId::Avx512Bf16Dot}) {
    const MicroKernel* kernel = microkernel(id);
    if (!kernel) {
      MESSAGE("this CPU lacks the instructions of " << microkernel_name(id) << ": its model is tested alone");
      continue;
    }
    const MicroKernel* model = microkernel(model_of(id));
    REQUIRE(model != nullptr);
    REQUIRE(model->mr == kernel->mr);
    REQUIRE(model->nr == kernel->nr);
    REQUIRE(model->arith == kernel->arith);
    for (std::int64_t steps : {0, 1, 2, 7, 64, 257})
      for (bool accumulate : {false, true})
        for (bool specials : {false, true}) {
          const std::int64_t ld = kernel->nr + 3;  // rows of the tile not adjacent
          const auto seed = static_cast<std::uint32_t>(steps * 4 + accumulate * 2 + specials);
          const std::vector<float> got = run_kernel(*kernel, steps, ld, accumulate, seed, specials);
          const std::vector<float> want = run_kernel(*model, steps, ld, accumulate, seed, specials);
          int mismatches = 0;
          for (std::size_t i = 0; i < got.size(); ++i) mismatches += !same_bits(got[i], want[i]);
          INFO(kernel->name << ": " << steps << " steps, accumulate " << accumulate << ", specials " << specials);
          CHECK(mismatches == 0);
          ++compared;
        }
  }
  MESSAGE(compared << " runs compared with their model");
}

TEST_CASE("microkernels: run_gathered reads in place what run reads from packed panels, bit for bit") {
  // kernels/cpu/conv_shifted.h's operands: row i's value of step s at lines[i][offsets[s]] (lines
  // overlapping, offsets in no order), B's row s at b + s * b_stride. Packed into run's panels, the
  // same values must give the same tile, on every kernel that has the entry (the Fma kernels).
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  std::vector<float> image(600), b_rows(300 * 40);
  for (float& v : image) v = value(rng);
  for (float& v : b_rows) v = value(rng);
  int compared = 0;
  for (const MicroKernel* kernel : runnable_microkernels()) {
    if (!kernel->run_gathered) continue;
    for (std::int64_t steps : {0, 1, 5, 257})
      for (bool accumulate : {false, true}) {
        const int mr = kernel->mr, nr = kernel->nr;
        const std::int64_t b_stride = nr + 5, ld = nr + 3;
        std::vector<const float*> lines(static_cast<std::size_t>(mr));
        for (int i = 0; i < mr; ++i) lines[static_cast<std::size_t>(i)] = image.data() + 17 * i;
        std::vector<std::int64_t> offsets(static_cast<std::size_t>(steps));
        for (std::int64_t s = 0; s < steps; ++s) offsets[static_cast<std::size_t>(s)] = (s * 29) % 300;
        std::vector<float> a(static_cast<std::size_t>(steps * mr)), b(static_cast<std::size_t>(steps * nr));
        for (std::int64_t s = 0; s < steps; ++s) {
          for (int i = 0; i < mr; ++i)
            a[static_cast<std::size_t>(s * mr + i)] =
                lines[static_cast<std::size_t>(i)][offsets[static_cast<std::size_t>(s)]];
          for (int j = 0; j < nr; ++j)
            b[static_cast<std::size_t>(s * nr + j)] = b_rows[static_cast<std::size_t>(s * b_stride + j)];
        }
        std::vector<float> packed(static_cast<std::size_t>(mr * ld)), in_place(packed.size());
        for (std::size_t i = 0; i < packed.size(); ++i) packed[i] = in_place[i] = value(rng);  // the sums to add to
        kernel->run(steps, a.data(), b.data(), packed.data(), ld, accumulate);
        kernel->run_gathered(steps, lines.data(), offsets.data(), b_rows.data(), b_stride, in_place.data(), ld,
                             accumulate);
        int mismatches = 0;
        for (std::size_t i = 0; i < packed.size(); ++i) mismatches += !same_bits(packed[i], in_place[i]);
        INFO(kernel->name << ": " << steps << " steps, accumulate " << accumulate);
        CHECK(mismatches == 0);
        ++compared;
      }
  }
  CHECK(compared >= 8);  // the two models at least, on any CPU
}
