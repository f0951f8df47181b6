// Rung 4's instruction (kernels/cuda/wgmma.cuh) alone: one wgmma.m64n128k16 of one warpgroup, its
// operands placed where wgmma_layout.h's descriptors say, in all four majors and both 16-bit types
// (kernels/cuda/wgmma_probe.h). On an H100 or H200 this checks the hardware against wgmma_layout.h,
// which tests/test_wgmma_layout.cpp checks against CuTe; on the CUDA emulator, the emulator's model.
#include "tests/testing.h"

#include <vector>

#ifdef MG_WITH_CUDA
#include "tests/cuda_device.h"

#include "kernels/cuda/wgmma_probe.h"
#include "kernels/fp8.h"

using namespace mg;
using namespace mg::testing;

TEST_CASE("cuda wgmma: one m64n128k16 from shared memory, every major, multiplies like the CPU") {
  if (!have_gpu()) return;
  if (!hopper()) {
    check_error(
        [] {
          kernels::cuda::probe_wgmma(DType::F16, false, false, std::vector<float>(64 * 16),
                                     std::vector<float>(16 * 128));
        },
        "compute capability 9.0");
    return;
  }
  // Small integers: exact in f16 and bf16, every sum exact in f32 in any order, so D must be the
  // CPU's to the bit; an operand element read from the wrong place changes it.
  Generator generator(23);
  for (const DType dtype : {DType::F16, DType::BF16})
    for (int majors = 0; majors < 4; ++majors) {
      const bool a_mn = majors & 1, b_mn = majors & 2;
      INFO(dtype_name(dtype) << ", A " << (a_mn ? "M" : "K") << "-major, B " << (b_mn ? "N" : "K") << "-major");
      const std::vector<double> a = randint(-8, 9, {64, 16}, generator).to(DType::F32).to_vector<double>();
      const std::vector<double> b = randint(-8, 9, {16, 128}, generator).to(DType::F32).to_vector<double>();
      const std::vector<float> d = kernels::cuda::probe_wgmma(dtype, a_mn, b_mn, std::vector<float>(a.begin(), a.end()),
                                                              std::vector<float>(b.begin(), b.end()));
      REQUIRE(d.size() == 64u * 128u);
      int mismatches = 0;
      std::string first;
      for (int i = 0; i < 64; ++i)
        for (int j = 0; j < 128; ++j) {
          double sum = 0.0;
          for (int k = 0; k < 16; ++k)
            sum += a[static_cast<std::size_t>(i * 16 + k)] * b[static_cast<std::size_t>(k * 128 + j)];
          if (d[static_cast<std::size_t>(128 * i + j)] != sum && mismatches++ == 0)
            first = fmt::format("D({}, {}) = {}, the CPU's {}", i, j, d[static_cast<std::size_t>(128 * i + j)], sum);
        }
      INFO(first);
      CHECK(mismatches == 0);
    }
  check_error([] { kernels::cuda::probe_wgmma(DType::F32, false, false, {}, {}); }, "probe_wgmma");
}

// What QGMMA's accumulator keeps, told apart as tests/test_cuda_fp8_gemm.cpp does for mma.sync: row 0 of A
// and column 0 of B hold one large product (256) and then small ones (2^-12 each; 3 x 2^-12 for row 1
// and column 1), 8 instructions of 32 chained through D. An accumulator of f32 keeps every small
// product; one of 14 significant bits that truncates (kHopperWgmmaFp8Accumulator, the model: what
// DeepSeek-V3 and SageAttention2 report) drops every group of 32, whose sum is below its last bit at
// 256. The emulator gives the model's numbers; an H100 or H200 gives what the hardware keeps, printed
// (scripts/gpu-check keeps it) and held to the model, so a GPU that keeps more or less fails here
// and the model is corrected from the measurement.
TEST_CASE("cuda wgmma: the FP8 form's accumulator (QGMMA), one large product and many small ones") {
  if (!have_gpu()) return;
  if (!hopper()) return;  // the f16 case above checks the refusal
  constexpr int k = 256;
  const double a_small[2] = {0x1p-6, 1.5 * 0x1p-6}, b_small[2] = {0x1p-6, 0x1p-5};
  std::vector<std::uint8_t> a(64 * k, 0), b(128 * k, 0);  // zeros elsewhere
  for (int r = 0; r < 2; ++r)
    for (int kk = 0; kk < k; ++kk) {
      a[static_cast<std::size_t>(r * k + kk)] = fp8::encode(kk == 0 ? 256.0f : static_cast<float>(a_small[r]),
                                                            DType::E4M3, fp8::Overflow::Saturate);
      b[static_cast<std::size_t>(r * k + kk)] = fp8::encode(kk == 0 ? 1.0f : static_cast<float>(b_small[r]),
                                                            DType::E4M3, fp8::Overflow::Saturate);
    }
  const std::vector<float> d = kernels::cuda::probe_wgmma_fp8(DType::E4M3, DType::E4M3, a, b);
  REQUIRE(d.size() == 64u * 128u);
  // The model: each instruction's 32 products summed exactly, added to D and cut (kernels/fp8.h).
  std::string table = fmt::format("{:<30} {:>16} {:>16} {:>16} {:>16}\n", "", "(0,0)", "(0,1)", "(1,0)", "(1,1)");
  std::vector<double> model(4), exact(4);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      float sum = 0.0f;
      double all = 0.0;
      for (int g = 0; g < k; g += 32) {
        double group = 0.0;
        for (int kk = g; kk < g + 32; ++kk)
          group += fp8::decode(a[static_cast<std::size_t>(i * k + kk)], DType::E4M3) *
                   fp8::decode(b[static_cast<std::size_t>(j * k + kk)], DType::E4M3);
        sum = kernels::fp8_accumulate(sum, group, kernels::kHopperWgmmaFp8Accumulator);
        all += group;
      }
      model[static_cast<std::size_t>(2 * i + j)] = sum;
      exact[static_cast<std::size_t>(2 * i + j)] = all;
    }
  const std::vector<double> got = {d[0], d[1], d[128], d[129]};
  for (const auto& [label, row] :
       {std::pair{"exact (f32 would keep it)", exact}, std::pair{"the model (14 bits, cut)", model},
        std::pair{cuda_emulated() ? "the CUDA emulator" : "this GPU", got}})
    table += fmt::format("{:<30} {:>16.10f} {:>16.10f} {:>16.10f} {:>16.10f}\n", label, row[0], row[1], row[2], row[3]);
  MESSAGE("FP8 wgmma (QGMMA) accumulation, 256 then 255 small products in 8 chained instructions:\n" << table);
  CHECK(model[0] == 256.0);  // the model drops every small product
  CHECK(got == model);
}

#endif  // MG_WITH_CUDA
