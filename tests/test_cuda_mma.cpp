// The Tensor Core instructions of rung 3 (kernels/cuda/mma.cuh) one at a time, against CuTe's
// description of them (tests/cute_layouts.h): what each lane holds after one ldmatrix.x4 (plain and
// .trans), and what one mma.sync computes when every lane loads its fragments with mma_layout.h's
// functions (kernels/cuda/mma_probe.h). On a GPU this checks the hardware; on the CUDA emulator, the
// emulator's models (which read the registers with the PTX ISA's formulas, not mma_layout.h's).
// tests/test_mma_layout.cpp checks mma_layout.h against the same CuTe layouts on the host: together,
// the kernel's layouts, the ISA's, CuTe's and the device's agree. The ldmatrix tables print with -s.
#include "tests/testing.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "tests/cute_layouts.h"

#ifdef MG_WITH_CUDA
#include "kernels/cuda/mma_probe.h"

using namespace mg;
using namespace mg::testing;
using namespace mg::testing::cute;

TEST_CASE("cuda mma: ldmatrix, every form, gives every lane the rows and elements CuTe's copy atoms say") {
  if (!have_gpu()) return;
  for (const int matrices : {1, 2, 4})
    for (const bool transpose : {false, true}) {
      // Element e of the row lane r points at holds 8 r + e: a received value names its row and element.
      const std::vector<std::uint32_t> registers = kernels::cuda::probe_ldmatrix(matrices, transpose);
      REQUIRE(registers.size() == 32u * static_cast<std::size_t>(matrices));
      std::string table = fmt::format("ldmatrix.x{}{}: lane: register.half = (row, element) received\n", matrices,
                                      transpose ? ".trans" : "");
      int mismatches = 0;
      for (int lane = 0; lane < 32; ++lane) {
        std::string line;
        for (int reg = 0; reg < matrices; ++reg)
          for (int half = 0; half < 2; ++half) {
            const std::uint32_t word = registers[static_cast<std::size_t>(matrices * lane + reg)];
            const int value = static_cast<int>((word >> (16 * half)) & 0xFFFF);
            const auto [row, element] = cute_ldmatrix(matrices, transpose, lane, reg, half);
            if (value != 8 * row + element) ++mismatches;
            line += fmt::format(" {}.{}=({:2},{})", reg, half, value / 8, value % 8);
          }
        table += fmt::format("  {:2}:{}\n", lane, line);
      }
      if (matrices == 4) fmt::print("{}", table);
      CHECK_MESSAGE(mismatches == 0, mismatches << " of " << 64 * matrices << " halves of ldmatrix.x" << matrices
                                                << (transpose ? ".trans" : "") << " differ from CuTe's copy atom");
    }
  check_error([] { (void)kernels::cuda::probe_ldmatrix(3, false); }, "probe_ldmatrix");
}

TEST_CASE("cuda mma: one mma.sync, its fragments loaded by mma_layout.h, multiplies like the CPU") {
  if (!have_gpu()) return;
  // Small integers: exact in f16, bf16 and TF32, every product and sum exact in f32 in any order, so
  // the product must be the CPU's to the bit; a fragment element in the wrong place changes it.
  Generator generator(5);
  for (const DType dtype : {DType::F16, DType::BF16, DType::F32}) {
    INFO(dtype_name(dtype));
    const int depth = dtype == DType::F32 ? 8 : 16;
    const std::vector<double> a = randint(-8, 9, {16, depth}, generator).to(DType::F32).to_vector<double>();
    const std::vector<double> b = randint(-8, 9, {depth, 8}, generator).to(DType::F32).to_vector<double>();
    const std::vector<float> d = kernels::cuda::probe_mma(dtype, std::vector<float>(a.begin(), a.end()),
                                                          std::vector<float>(b.begin(), b.end()));
    REQUIRE(d.size() == 128u);
    int mismatches = 0;
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 8; ++j) {
        double sum = 0.0;
        for (int k = 0; k < depth; ++k)
          sum += a[static_cast<std::size_t>(i * depth + k)] * b[static_cast<std::size_t>(k * 8 + j)];
        if (d[static_cast<std::size_t>(8 * i + j)] != sum) ++mismatches;
      }
    CHECK(mismatches == 0);
  }
  check_error([] { kernels::cuda::probe_mma(DType::F32, std::vector<float>(16 * 16), std::vector<float>(16 * 8)); },
              "probe_mma");
}

#endif  // MG_WITH_CUDA
