// NVIDIA CUTLASS's CuTe describes each Tensor Core instruction as layouts: from (thread, value) to
// an element of the tile (mma_traits_sm80.hpp) or a bit of the rows read (copy_traits_sm75.hpp). The
// ones rung 3 of the GEMM uses, transcribed as numbers, and a ten-line evaluator: the independent
// description that tests/test_mma_layout.cpp (mma_layout.h's functions) and tests/test_cuda_mma.cpp
// (the device's, or the emulator's, instructions) are checked against.
#pragma once

#include <utility>
#include <vector>

namespace mg::testing::cute {

// A flat list of modes (extent, stride); a coordinate is split over them first mode fastest
// (column-major, as CuTe numbers a nested shape), and the index is the sum of coordinate x stride.
struct Modes {
  std::vector<std::pair<int, int>> modes;
  int operator()(int coordinate) const {
    int index = 0;
    for (const auto& [extent, stride] : modes) {
      index += (coordinate % extent) * stride;
      coordinate /= extent;
    }
    return index;
  }
};
// Layout<Shape<ThreadShape, ValueShape>, Stride<...>>: (thread, value) -> index.
struct CuteLayout {
  Modes thread, value;
  int operator()(int t, int v) const { return thread(t) + value(v); }
};

// mma_traits_sm80.hpp, as written there (the tile index is column-major: row + rows * column).
// SM80_16x8x16_F32F16F16F32_TN (and BF16): 16x16 A, 16x8 (n x k: index n + 8 k) B, 16x8 C.
inline const CuteLayout kCuteA16816{{{{4, 32}, {8, 1}}}, {{{2, 16}, {2, 8}, {2, 128}}}};
inline const CuteLayout kCuteB16816{{{{4, 16}, {8, 1}}}, {{{2, 8}, {2, 64}}}};
inline const CuteLayout kCuteC16x8{{{{4, 32}, {8, 1}}}, {{{2, 16}, {2, 8}}}};  // SM80_16x8_Row
// SM80_16x8x8_F32TF32TF32F32_TN.
inline const CuteLayout kCuteA1688Tf32{{{{4, 16}, {8, 1}}}, {{{2, 8}, {2, 64}}}};
inline const CuteLayout kCuteB1688Tf32{{{{4, 8}, {8, 1}}}, {{{2, 32}}}};
// copy_traits_sm75.hpp: the bits each thread receives (DstLayout), of 4 matrices of 8 rows of 128
// bits laid one after another; row r of that stack is the one lane r pointed at (SrcLayout).
inline const CuteLayout kCuteLdsmNx1{{{{32, 32}}}, {{{32, 1}}}};  // SM75_U32x1_LDSM_N
inline const CuteLayout kCuteLdsmNx2{{{{32, 32}}}, {{{32, 1}, {2, 1024}}}};  // SM75_U32x2_LDSM_N
inline const CuteLayout kCuteLdsmN{{{{32, 32}}}, {{{32, 1}, {4, 1024}}}};  // SM75_U32x4_LDSM_N
inline const CuteLayout kCuteLdsmTx1{{{{4, 256}, {8, 16}}}, {{{16, 1}, {2, 128}}}};  // SM75_U16x2_LDSM_T
inline const CuteLayout kCuteLdsmTx2{{{{4, 256}, {8, 16}}}, {{{16, 1}, {2, 128}, {2, 1024}}}};  // SM75_U16x4_LDSM_T
inline const CuteLayout kCuteLdsmT{{{{4, 256}, {8, 16}}}, {{{16, 1}, {2, 128}, {4, 1024}}}};  // SM75_U16x8_LDSM_T

// What lane `lane` receives in half `half` of register `reg` from ldmatrix.x{matrices} (1, 2 or 4):
// (the lane whose row it is, the 16-bit element of that row), by CuTe.
inline std::pair<int, int> cute_ldmatrix(int matrices, bool transpose, int lane, int reg, int half) {
  const CuteLayout& layout = transpose ? (matrices == 1   ? kCuteLdsmTx1
                                          : matrices == 2 ? kCuteLdsmTx2
                                                          : kCuteLdsmT)
                                       : (matrices == 1   ? kCuteLdsmNx1
                                          : matrices == 2 ? kCuteLdsmNx2
                                                          : kCuteLdsmN);
  const int bit = layout(lane, 16 * half + 32 * reg);  // the half's first bit
  return {bit / 128, (bit % 128) / 16};
}

}  // namespace mg::testing::cute
