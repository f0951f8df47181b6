// The layouts of rung 4 of the GEMM ladder (gemm_wgmma.cu), as plain functions the host can call:
// the 64-bit matrix descriptors through which wgmma reads its operands from shared memory, the
// canonical layouts a descriptor describes (where element (mn, k) of an instruction's operand lies),
// the swizzles TMA writes and wgmma reads, and which accumulator element each lane holds. The kernel
// builds its descriptors with these functions, the emulator's wgmma (wgmma.cuh) reads its operands
// through them, and tests/test_wgmma_layout.cpp prints and checks them against CuTe's SM90 GMMA
// layouts (NVIDIA CUTLASS, include/cute/atom/mma_traits_sm90_gmma.hpp, transcribed in
// tests/cute_layouts.h). No CUDA header here.
//
// A descriptor (the PTX ISA's "Matrix Descriptor Format"): bits 0-13 the start address >> 4, 16-29 the
// leading dimension byte offset (LBO) >> 4, 32-45 the stride dimension byte offset (SBO) >> 4, 49-51
// a base offset, 62-63 the swizzle: 0 none ("interleave"), 1 128 bytes, 2 64 bytes, 3 32 bytes. The
// base offset is (address >> 7) % 8 of the swizzle pattern's origin when the pattern does not start
// on its period: 0 here, since every tile starts on 1024 bytes and a k step's start (+32, +64, +96
// bytes, or whole 8-row blocks) stays within the period's first row or moves by whole periods.
//
// One instruction reads an operand of 64 (A) or N (B) rows along m or n ("mn") and 32 bytes along k
// (16 f16 or bf16, 32 FP8). Its layout in shared memory is built of 16-byte chunks, in one of two
// majors: K-major (k contiguous: A stored [m][k], B stored [n][k]) or MN-major (mn contiguous: A
// stored [k][m], B stored [k][n]; 16-bit types only). CuTe's canonical forms, in elements
// (T = 16 / element bytes, W = the swizzle's span in chunks: 1, 2, 4, 8 for none, 32, 64, 128 bytes):
//   K-major,  none:     ((8, m), (T, 2)) : ((T, SBO), (1, LBO))
//   K-major,  swizzled: ((8, m), (T, 2)) : ((W T, SBO), (1, T))     LBO unused
//   MN-major, none:     ((T, 1, m), (8, k)) : ((1, T, SBO), (T, LBO))
//   MN-major, swizzled: ((T, W, m), (8, k)) : ((1, T, LBO), (W T, SBO))
// and the swizzle then acts on the byte address (CuTe's Swizzle<b, 4, 3>, b = 1, 2, 3): bits 4.. of
// the 16-byte chunk XOR bits 7.. of the address, exactly as TMA lays a box with
// CU_TENSOR_MAP_SWIZZLE_32B/64B/128B. Rung 4's tiles are 128-byte swizzled rows of 64 16-bit elements
// of k (K-major: SBO 1024, the next k16 32 bytes on) or of mn (MN-major: 64 rows of k, a 64-wide
// block of mn every 8 KiB: LBO 8192, SBO 1024, the next k16 2048 bytes on).
#pragma once

#include <cstdint>

#include "kernels/cuda/mma_layout.h"

namespace mg::kernels::cuda::wgmma_layout {

enum class Swizzle : std::uint8_t { None = 0, B32 = 1, B64 = 2, B128 = 3 };  // the value: CuTe's b

// The swizzle's span: a row of its pattern, 16 (none), 32, 64 or 128 bytes.
MG_LAYOUT_FN int span_bytes(Swizzle s) { return 16 << static_cast<int>(s); }

// Where the byte at (unswizzled) shared address `address` lies.
MG_LAYOUT_FN std::uint32_t swizzle(std::uint32_t address, Swizzle s) {
  const std::uint32_t bits = static_cast<std::uint32_t>(s);
  return address ^ (((address >> 7) & ((1u << bits) - 1)) << 4);
}

struct Descriptor {
  std::uint32_t start;  // shared address, 16-byte aligned
  std::uint32_t leading, stride;  // LBO and SBO in bytes, multiples of 16
  Swizzle swizzle;
};

// The descriptor's field for a swizzle (the ISA's numbering is not CuTe's b).
MG_LAYOUT_FN std::uint64_t swizzle_field(Swizzle s) {
  return s == Swizzle::B128 ? 1 : s == Swizzle::B64 ? 2 : s == Swizzle::B32 ? 3 : 0;
}

MG_LAYOUT_FN std::uint64_t encode(const Descriptor& d) {
  return std::uint64_t{(d.start >> 4) & 0x3FFFu} | std::uint64_t{(d.leading >> 4) & 0x3FFFu} << 16 |
         std::uint64_t{(d.stride >> 4) & 0x3FFFu} << 32 | swizzle_field(d.swizzle) << 62;
}

MG_LAYOUT_FN Descriptor decode(std::uint64_t bits) {
  const std::uint64_t field = bits >> 62;
  return {static_cast<std::uint32_t>(bits & 0x3FFFu) << 4, static_cast<std::uint32_t>((bits >> 16) & 0x3FFFu) << 4,
          static_cast<std::uint32_t>((bits >> 32) & 0x3FFFu) << 4,
          field == 1   ? Swizzle::B128
          : field == 2 ? Swizzle::B64
          : field == 3 ? Swizzle::B32
                       : Swizzle::None};
}
// The base offset (bits 49-51), which no rung-4 descriptor sets.
MG_LAYOUT_FN int base_offset(std::uint64_t bits) { return static_cast<int>((bits >> 49) & 0x7u); }

// The byte offset from the descriptor's start, before the swizzle, of element (mn, k) of an operand
// of `element_bytes` elements: the canonical layouts above.
MG_LAYOUT_FN std::uint32_t canonical_offset(const Descriptor& d, bool k_major, int element_bytes, int mn, int k) {
  const int t = 16 / element_bytes;  // elements a chunk
  const int w = span_bytes(d.swizzle) / 16;  // chunks a swizzle row
  const auto u = [](int x) { return static_cast<std::uint32_t>(x); };
  if (k_major) {
    if (d.swizzle == Swizzle::None)
      return u(mn % 8) * 16 + u(mn / 8) * d.stride + u(k % t) * u(element_bytes) + u(k / t) * d.leading;
    return u(mn % 8) * u(w * 16) + u(mn / 8) * d.stride + u(k * element_bytes);
  }
  if (d.swizzle == Swizzle::None)
    return u(mn % t) * u(element_bytes) + u(mn / t) * d.stride + u(k % 8) * 16 + u(k / 8) * d.leading;
  return u(mn % (t * w)) * u(element_bytes) + u(mn / (t * w)) * d.leading + u(k % 8) * u(w * 16) + u(k / 8) * d.stride;
}

// The shared address of element (mn, k): the canonical offset from the start, swizzled.
MG_LAYOUT_FN std::uint32_t element_address(const Descriptor& d, bool k_major, int element_bytes, int mn, int k) {
  return swizzle(d.start + canonical_offset(d, k_major, element_bytes, mn, k), d.swizzle);
}

// ---- the accumulator ------------------------------------------------------------------------------------

// wgmma.m64nNk* leaves D (64 x N f32) in the warpgroup's registers: warp w holds rows 16 w to 16 w + 15,
// as mma.sync's m16n8 accumulator repeated along n (CuTe's CLayout_64xN): lane l's value v is row
// 16 w + l / 4 + 8 ((v / 2) % 2), column 8 (v / 4) + 2 (l % 4) + v % 2.
MG_LAYOUT_FN mma_layout::Cell accumulator_cell(int warp, int lane, int v) {
  return {16 * warp + lane / 4 + 8 * ((v / 2) % 2), 8 * (v / 4) + 2 * (lane % 4) + v % 2};
}

// ---- rung 4's tiles --------------------------------------------------------------------------------------

constexpr int kRowBytes = 128;  // a swizzled row: 64 16-bit elements, the 128-byte swizzle's span
constexpr int kAtomBytes = 8 * kRowBytes;  // the swizzle's period: 8 rows (SBO)
constexpr int kInstructionK = 32;  // bytes of k one instruction reads (16 f16 or bf16, 32 FP8)

// The descriptor of k step `step` (0 to 3: 32 bytes of k each) of a tile written by TMA with the
// 128-byte swizzle: K-major, rows of 128 bytes of k, one per mn (SBO: 8 rows); or MN-major, rows of
// 128 bytes of mn, one per k, each 64 rows of k a block of 64 mn (LBO: the next block, `mn_block`
// bytes on; SBO: 8 rows of k).
MG_LAYOUT_FN Descriptor tile_descriptor(std::uint32_t tile, bool k_major, int step, std::uint32_t mn_block) {
  if (k_major) return {tile + static_cast<std::uint32_t>(step * kInstructionK), 16, kAtomBytes, Swizzle::B128};
  return {tile + static_cast<std::uint32_t>(step * 16 * kRowBytes), mn_block, kAtomBytes, Swizzle::B128};
}

// The epilogue's staging: a consumer warp's 16 rows of C, in chunks 128 bytes wide (64 16-bit or 32 f32
// columns) of 16 rows each, one TMA store box a chunk, written with the 128-byte swizzle the box's map
// names. The byte offset, before the swizzle, of element (row, column) of the warp's 16 rows, for C
// elements of `element_bytes`. A lane writes the pair (column, column + 1) of its accumulator:
// tests/test_wgmma_layout.cpp counts those stores' bank conflicts: none for 16-bit C (the 8 rows a
// phase touches sit in 8 different 16-byte chunks), two ways for f32 C (a phase's 4 rows of 32 bytes
// pair up on the same chunks; TMA's dense box leaves no room to pad them apart).
constexpr int kStagingRows = 16;
constexpr int kStagingChunkBytes = kStagingRows * kRowBytes;
MG_LAYOUT_FN std::uint32_t staging_offset(int row, int column, int element_bytes) {
  const int byte = column * element_bytes;
  return static_cast<std::uint32_t>((byte / kRowBytes) * kStagingChunkBytes + row * kRowBytes + byte % kRowBytes);
}

}  // namespace mg::kernels::cuda::wgmma_layout
