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

// ==== SM90: wgmma (rung 4, kernels/cuda/wgmma_layout.h) =================================================
// NVIDIA CUTLASS's include/cute/atom/mma_traits_sm90_gmma.hpp (the accumulator and make_gmma_desc's
// canonical layouts), include/cute/arch/mma_sm90_desc.hpp (the descriptor's bit fields) and
// include/cute/swizzle.hpp (the swizzle functor), transcribed as numbers: the independent description
// tests/test_wgmma_layout.cpp checks wgmma_layout.h against.

// CLayout_64xN: ((4,8,4),(2,2,N/8)) : ((128,1,16),(64,8,512)), thread t = 128 threads of the warpgroup,
// value v of its N/2 registers, index = row + 64 column of the 64 x N tile of D (column-major).
inline CuteLayout cute_clayout_64xn(int n) {
  return {{{{4, 128}, {8, 1}, {4, 16}}}, {{{2, 64}, {2, 8}, {n / 8, 512}}}};
}

// Swizzle<BBits, MBase, SShift>: yyy_msk = (2^BBits - 1) << (MBase + max(0, SShift)); offset ^ shiftr(
// offset & yyy_msk, SShift), a negative SShift shifting left. A GMMA layout's swizzle acts on the smem
// pointer itself (pointer_swizzle.hpp: SwizzleFn::apply(reinterpret_cast<uintptr_t>(ptr))): a byte address.
struct CuteSwizzle {
  int bits, base, shift;
  long yyy_msk() const { return ((1L << bits) - 1) << (base + (shift > 0 ? shift : 0)); }
  long operator()(long offset) const {
    const long yyy = offset & yyy_msk();
    return offset ^ (shift >= 0 ? yyy >> shift : yyy << -shift);
  }
};
// The four GMMA swizzles: Swizzle<b, 4, 3>, b = 0 (INTERLEAVE), 1 (B32), 2 (B64), 3 (B128).
inline CuteSwizzle cute_gmma_swizzle(int b) { return {b, 4, 3}; }

// cute::GMMA::LayoutType, the descriptor's bits 62-63: INTERLEAVE 0, B128 1, B64 2, B32 3.
inline int cute_layout_type(int swizzle_bits) {
  constexpr int kByBits[4] = {0, 3, 2, 1};  // b = 0, 1, 2, 3
  return kByBits[swizzle_bits];
}

// GmmaDescriptor's bit fields (mma_sm90_desc.hpp): (first bit, width) of each.
struct DescriptorField {
  const char* name;
  int first, width;
};
inline const DescriptorField kCuteStartAddress{"start_address_", 0, 14};  // address >> 4
inline const DescriptorField kCuteLeadingByteOffset{"leading_byte_offset_", 16, 14};  // LBO >> 4
inline const DescriptorField kCuteStrideByteOffset{"stride_byte_offset_", 32, 14};  // SBO >> 4
inline const DescriptorField kCuteBaseOffset{"base_offset_", 49, 3};
inline const DescriptorField kCuteLayoutType{"layout_type_", 62, 2};

// make_gmma_desc's canonical layouts, in elements (T = 16 / element bytes elements a 16-byte chunk,
// W = 2^b chunks a swizzle row), mode 0 along mn, mode 1 along k:
//   K-major,  INTERLEAVE: ((8,m),(T,2)) : ((1T,SBO),(1,LBO))
//   K-major,  B32/64/128: ((8,m),(T,2)) : ((WT,SBO),(1,T))
//   MN-major, INTERLEAVE: ((T,1,m),(8,k)) : ((1,T,SBO),(1T,LBO))
//   MN-major, B32/64/128: ((T,W,m),(8,k)) : ((1,T,LBO),(WT,SBO))
// LBO and SBO are given here in bytes (what the descriptor holds, multiples of 16) and enter the
// layout divided by the element size. The result maps (mn, k) to an element offset from the start; the
// address of (mn, k) is Swizzle<b,4,3>(start + element_bytes * layout(mn, k)). m and k get extents
// large enough for any coordinate the tests use (the last mode of a CuTe layout is not wrapped).
inline CuteLayout cute_gmma_canonical(bool k_major, int swizzle_bits, int element_bytes, int lbo_bytes, int sbo_bytes) {
  const int t = 16 / element_bytes, w = 1 << swizzle_bits;
  const int lbo = lbo_bytes / element_bytes, sbo = sbo_bytes / element_bytes;
  constexpr int kMany = 1 << 20;
  if (k_major) {
    if (swizzle_bits == 0) return {{{{8, t}, {kMany, sbo}}}, {{{t, 1}, {2, lbo}}}};
    return {{{{8, w * t}, {kMany, sbo}}}, {{{t, 1}, {2, t}}}};
  }
  if (swizzle_bits == 0) return {{{{t, 1}, {1, t}, {kMany, sbo}}}, {{{8, t}, {kMany, lbo}}}};
  return {{{{t, 1}, {w, t}, {kMany, lbo}}}, {{{8, w * t}, {kMany, sbo}}}};
}

}  // namespace mg::testing::cute
