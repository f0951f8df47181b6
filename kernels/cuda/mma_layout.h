// The layouts of rung 3 of the GEMM ladder (gemm_mma.cu) as plain functions that the host can call:
// where each element of a tile lies in shared memory, which 16 bytes each thread copies, which row
// each lane hands to ldmatrix, which element of a Tensor Core fragment each register holds, how the
// epilogue stages the sums, and in which order the blocks walk the tiles of C. The kernel computes
// every address with these functions, and the tests call the same ones on the host:
//   tests/test_mma_layout.cpp  prints the fragment tables beside CuTe's MMA atoms and ldmatrix copy
//                              atoms (NVIDIA CUTLASS, include/cute/atom/mma_traits_sm80.hpp and
//                              copy_traits_sm75.hpp: an independent description of the same
//                              hardware), and counts the bank conflicts of every warp's shared-memory
//                              access and the 32-byte sectors of every global one;
//   tests/test_cuda_mma.cpp    runs ldmatrix and mma.sync (mma.cuh) on the device, or the emulator's
//                              models of them, and checks what each lane receives against the same
//                              tables.
// No CUDA header here: the file is host C++ as much as device code.
//
// Shared memory is rows of 128 bytes, each 8 chunks of 16 bytes (one cp.async, one ldmatrix row).
// A warp's 16-byte accesses are served a quarter-warp (8 lanes, 128 bytes) at a time, and the 32
// banks are 4 bytes wide, so 8 lanes conflict-free must touch 8 different chunk positions of a row.
// A K-major tile (A stored [m][k], B stored [n][k]) has one 128-byte row per m (or n) row: the 8
// lanes of an ldmatrix read 8 consecutive rows at the same k, the same chunk position of 8 rows: an
// 8-way conflict, unless chunk c of row r is stored at chunk c ^ (r % 8). That XOR is the swizzle
// (CuTe's Swizzle<3,4,3> on byte offsets; TMA's CU_TENSOR_MAP_SWIZZLE_128B, which rung 4 will use):
// no padding, so a tile is exactly its data and every chunk stays 16-byte aligned.
#pragma once

#include <type_traits>

#ifdef __CUDACC__
#define MG_LAYOUT_FN __host__ __device__ __forceinline__ constexpr
#else
#define MG_LAYOUT_FN inline constexpr
#endif

namespace mg::kernels::cuda::mma_layout {

constexpr int kRowBytes = 128;  // a row of shared memory: one k step of a K-major tile
constexpr int kChunkBytes = 16;  // one cp.async, one ldmatrix row, one vector load or store
constexpr int kChunksPerRow = kRowBytes / kChunkBytes;
constexpr int kWarpTile = 64;  // every warp owns 64 x 64 of C: 4 m16 x 8 n8 accumulator fragments
constexpr int kFragsM = kWarpTile / 16, kFragsN = kWarpTile / 8;
constexpr int kSubsteps = 4;  // mma k-steps per k step: 128 bytes of k = 4 x 32 (k16 of f16/bf16, k8 of tf32)

// Tile coordinates: x along m (A) or n (B), k along k, both from the tile's corner.
struct Coord {
  int x, k;
};
// An element of a 2-D tile or fragment: row and column.
struct Cell {
  int row, column;
};

// ---- the swizzle ---------------------------------------------------------------------------------------

// CuTe's Swizzle<kBits, kBase, kShift> (include/cute/swizzle.hpp): the kBits bits of a byte offset
// above kBase + kShift are XORed into the kBits bits above kBase.
template <int kBits, int kBase, int kShift>
struct Swizzle {
  static constexpr int kYyyMask = ((1 << kBits) - 1) << (kBase + kShift);
  MG_LAYOUT_FN static int apply(int offset) { return offset ^ ((offset & kYyyMask) >> kShift); }
};
// Chunk c of 128-byte row r at chunk c ^ (r % 8): every tile but one.
using Swizzle128B = Swizzle<3, 4, 3>;
// Chunk c of row r at chunk c ^ 2 (r % 4): the MN-major tiles of TF32. ldmatrix moves 16-bit
// elements, so it cannot transpose f32: the lanes read those fragments one f32 each (LDS), a warp
// taking 8 consecutive x (two chunks) from each of 4 consecutive k rows. Under Swizzle128B rows 0
// and 1 would put chunks {0, 1} and {1, 0} on the same banks; XORing with 2 (r % 4) keeps the 4 rows'
// chunk pairs apart.
using SwizzleTf32MnMajor = Swizzle<2, 5, 2>;

// ---- one operand's tile in one stage -------------------------------------------------------------------

// kExtent rows (along m for A, n for B) by one k step (128 bytes of k: 64 f16/bf16 or 32 f32), in the
// operand's own global layout, so that a copy is 16 contiguous bytes of global memory:
//   K-major (A [m][k], B [n][k]): row x holds the step's k, 128 bytes;
//   MN-major (A [k][m], B [k][n]): k rows of x, cut into atoms of 128 bytes of x (64 f16 or 32 f32)
//   laid one after another: atom a is kStep rows of 128 bytes.
// Every layout is then rows of 128 bytes, and the swizzle applies to the row's chunks.
template <int kElementBytes_, int kExtent_, bool kKMajor_>
struct OperandTile {
  static constexpr int kElementBytes = kElementBytes_, kExtent = kExtent_;
  static constexpr bool kKMajor = kKMajor_;
  static constexpr int kStep = kRowBytes / kElementBytes;  // k per step
  static constexpr int kAtomBytes = kStep * kRowBytes;  // MN-major: 128 bytes of x by the step's k
  static constexpr int kBytes = kExtent * kRowBytes;
  static constexpr int kCopies = kBytes / kChunkBytes;  // 16-byte chunks a stage
  static constexpr int kChunkElements = kChunkBytes / kElementBytes;
  static constexpr int kChunksAlongX = kExtent * kElementBytes / kChunkBytes;  // MN-major: chunks of one k row
  using Swizzle = std::conditional_t<kElementBytes == 4 && !kKMajor, SwizzleTf32MnMajor, Swizzle128B>;
  static_assert(kExtent % 64 == 0, "whole atoms and whole swizzle periods");

  // The byte offset of element (x, k) in the tile.
  MG_LAYOUT_FN static int offset(int x, int k) {
    const int linear = kKMajor ? x * kRowBytes + k * kElementBytes
                               : (x * kElementBytes / kRowBytes) * (kStep * kRowBytes) + k * kRowBytes +
                                     (x * kElementBytes) % kRowBytes;
    return Swizzle::apply(linear);
  }
  // The first element of copy c (of kCopies): copies c, c + 1, ... are consecutive 16 bytes of one
  // global row (8 of them a 128-byte run), so a warp's 32 copies read whole 32-byte sectors.
  MG_LAYOUT_FN static Coord copy_start(int c) {
    if constexpr (kKMajor) return {c / kChunksPerRow, (c % kChunksPerRow) * kChunkElements};
    return {(c % kChunksAlongX) * kChunkElements, c / kChunksAlongX};
  }
  // With kThreads threads, thread t's copies are c = t, t + kThreads, ...: evenly spaced, kCopyApart
  // apart in the tile and kCopyStep bytes apart in shared memory (whole swizzle periods), so a thread
  // forms the address of its copy i as that of its first plus i times a constant.
  template <int kThreads>
  static constexpr int kCopyApartX = copy_start(kThreads).x - copy_start(0).x;
  template <int kThreads>
  static constexpr int kCopyApartK = copy_start(kThreads).k - copy_start(0).k;
  template <int kThreads>
  static constexpr int kCopyStep = offset(kCopyApartX<kThreads>, kCopyApartK<kThreads>);
};

// ---- which row each lane hands to ldmatrix -------------------------------------------------------------

// ldmatrix.x4 loads four 8x8 matrices of 16-bit elements: lanes 8i to 8i + 7 point at the 8 rows (16
// bytes each) of matrix i, and matrix i lands in every lane's register i: lane l gets row l / 4,
// elements 2 (l % 4) and 2 (l % 4) + 1 (with .trans: column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1).
// The functions below give lane `lane`'s row as the tile element it starts at, relative to the
// fragment's corner at the substep's first k, chosen so that register i is the fragment's register
// i (mma.sync's layouts below). With 4-byte elements a "16-bit pair" is one f32, and the same
// K-major choices give the TF32 fragments.
//
// A, 16 rows x one substep of k (16 f16 or 8 f32): matrices (rows 0-7, k lo), (rows 8-15, k lo),
// (rows 0-7, k hi), (rows 8-15, k hi): registers a0a1, a2a3, a4a5, a6a7 (f16), a0, a1, a2, a3 (tf32).
MG_LAYOUT_FN Coord ldmatrix_a_k_major(int lane, int element_bytes) {
  return {lane % 16, (lane / 16) * (kChunkBytes / element_bytes)};
}
// The same fragment from an MN-major tile (16-bit only), .trans: the matrices' rows are k.
MG_LAYOUT_FN Coord ldmatrix_a_mn_major(int lane) { return {8 * ((lane / 8) % 2), lane % 8 + 8 * (lane / 16)}; }
// B, a pair of n8 fragments (16 columns) x one substep of k: matrices (n 0-7, k lo), (n 0-7, k hi),
// (n 8-15, k lo), (n 8-15, k hi): registers b0b1 and b2b3 of the first fragment, then of the second
// (f16), or b0, b1 of each (tf32).
MG_LAYOUT_FN Coord ldmatrix_b_k_major(int lane, int element_bytes) {
  return {lane % 8 + 8 * (lane / 16), ((lane / 8) % 2) * (kChunkBytes / element_bytes)};
}
MG_LAYOUT_FN Coord ldmatrix_b_mn_major(int lane) { return {8 * (lane / 16), lane % 8 + 8 * ((lane / 8) % 2)}; }

// ---- mma.sync's fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16" and "for mma.m16n8k8") -------

// With group = lane / 4 and quad = lane % 4. Element e of an f16/bf16 fragment is half e % 2 of
// register e / 2 (the lower half first).
// m16n8k16, A (16 x 16, row): element e at row group + 8 ((e / 2) % 2), k 2 quad + e % 2 + 8 (e / 4).
MG_LAYOUT_FN Cell f16_a(int lane, int e) {
  return {lane / 4 + 8 * ((e / 2) % 2), 2 * (lane % 4) + e % 2 + 8 * (e / 4)};
}
// m16n8k16, B (16 x 8, col): element e at k 2 quad + e % 2 + 8 (e / 2), column group.
MG_LAYOUT_FN Cell f16_b(int lane, int e) { return {2 * (lane % 4) + e % 2 + 8 * (e / 2), lane / 4}; }
// m16n8k8 TF32, A (16 x 8): register r at row group + 8 (r % 2), k quad + 4 (r / 2).
MG_LAYOUT_FN Cell tf32_a(int lane, int r) { return {lane / 4 + 8 * (r % 2), lane % 4 + 4 * (r / 2)}; }
// m16n8k8 TF32, B (8 x 8): register r at k quad + 4 r, column group.
MG_LAYOUT_FN Cell tf32_b(int lane, int r) { return {lane % 4 + 4 * r, lane / 4}; }
// The accumulator C and D of both (16 x 8 f32): register r at row group + 8 (r / 2), column 2 quad + r % 2.
MG_LAYOUT_FN Cell accumulator(int lane, int r) { return {lane / 4 + 8 * (r / 2), 2 * (lane % 4) + r % 2}; }

// The TF32 fragments where ldmatrix cannot serve (MN-major tiles), read one f32 a register: the
// element of register r relative to the fragment's corner at the substep's first k, as a Coord. For
// B, registers 0-3 are b0, b1 of the pair's first n8 fragment, then of its second, as ldmatrix
// leaves them from a K-major tile.
MG_LAYOUT_FN Coord tf32_a_element(int lane, int r) {
  const Cell cell = tf32_a(lane, r);
  return {cell.row, cell.column};
}
MG_LAYOUT_FN Coord tf32_b_pair_element(int lane, int r) {
  const Cell cell = tf32_b(lane, r % 2);
  return {cell.column + 8 * (r / 2), cell.row};
}

// ---- the addresses a lane forms in the main loop ----------------------------------------------------

// Registers are this kernel's scarce resource: 128 accumulators and two sets of 32 fragment registers
// leave about 60 of a thread's 255 for everything else. A compiler left to itself computes the
// address of every fragment of every substep before the loop (they do not change from one step to
// the next but for the stage) and keeps them all: 32 registers, and the kernel spills. So the kernel
// forms each address as one of four offsets a lane keeps in registers plus a constant, which the
// load instruction carries as its immediate. Which of the four, and which constant, depends on
// which moves of the element touch the bits the swizzle XORs: for a K-major tile a fragment 16 rows
// further down is 2048 bytes further (whole swizzle periods: a constant), but the next substep's 32
// bytes of k land in other chunks of the same rows (another kept offset); for an MN-major tile it is
// the other way round. The test checks kept + constant against OperandTile::offset for every lane,
// fragment, substep and register.
enum class Operand { A, B };

// The loads of one lane's fragments from one operand's tile: fragment f (A: the warp's m16 rows, 16
// apart; B: its pairs of n8 columns, 16 apart), substep kk, register r (ldmatrix: one address for the
// four registers, r = 0; TF32 from an MN-major tile: one f32 a register, LDS).
template <class Tile, Operand kOperand>
struct FragmentLoads {
  static constexpr bool kLdmatrix = Tile::kKMajor || Tile::kElementBytes == 2;
  static constexpr bool kTranspose = !Tile::kKMajor;  // ldmatrix.trans
  static constexpr int kSubstepK = Tile::kStep / kSubsteps;  // 16 (f16/bf16) or 8 (tf32)
  static constexpr int kKept = 4;

  // The element lane `lane` addresses, relative to the warp's corner and the step's first k.
  MG_LAYOUT_FN static Coord element(int lane, int f, int kk, int r) {
    Coord c{};
    if constexpr (kLdmatrix && kOperand == Operand::A)
      c = Tile::kKMajor ? ldmatrix_a_k_major(lane, Tile::kElementBytes) : ldmatrix_a_mn_major(lane);
    else if constexpr (kLdmatrix)
      c = Tile::kKMajor ? ldmatrix_b_k_major(lane, Tile::kElementBytes) : ldmatrix_b_mn_major(lane);
    else
      c = kOperand == Operand::A ? tf32_a_element(lane, r) : tf32_b_pair_element(lane, r);
    return {c.x + 16 * f, c.k + kSubstepK * kk};
  }
  // The register a TF32 MN-major load's x bit 3 (the 8 rows of A's r % 2, of B's r / 2) comes from.
  MG_LAYOUT_FN static int x_half(int r) { return kOperand == Operand::A ? r % 2 : r / 2; }
  // Which kept offset, and the constant added to it.
  MG_LAYOUT_FN static int kept_index(int f, int kk, int r) {
    if constexpr (Tile::kKMajor) return kk;
    if constexpr (kLdmatrix) return f;
    return (f % 2) * 2 + x_half(r);
  }
  MG_LAYOUT_FN static int constant(int f, int kk, int r) {
    if constexpr (Tile::kKMajor) return f * 16 * kRowBytes;
    if constexpr (kLdmatrix) return kk * kSubstepK * kRowBytes;
    // x moves whole atoms with f / 2; k moves whole rows that keep row % 4, which the swizzle reads.
    const int k_rows = kSubstepK * kk + 4 * (kOperand == Operand::A ? r / 2 : r % 2);
    return (f / 2) * Tile::kAtomBytes + k_rows * kRowBytes;
  }
  // Kept offset `index` of lane `lane` in a warp whose corner is at x = corner (m for A, n for B):
  // the offset of the element whose constant is 0.
  MG_LAYOUT_FN static int kept(int lane, int corner, int index) {
    const int f = Tile::kKMajor ? 0 : (kLdmatrix ? index : index / 2);
    const int kk = Tile::kKMajor ? index : 0;
    const int r = Tile::kKMajor || kLdmatrix ? 0 : (kOperand == Operand::A ? index % 2 : 2 * (index % 2));
    const Coord e = element(lane, f, kk, r);
    return Tile::offset(corner + e.x, e.k);
  }
};

// ---- the epilogue's staging --------------------------------------------------------------------------

// The accumulators leave through shared memory, so that each lane then holds 16 consecutive bytes
// of a row of C (a 16-byte store) and a warp's store covers whole 128-byte runs. A warp stages its
// 64 x 64 f32 sums (or 32 x 64, 16 x 64; 16 KiB for 64 rows, in the pipeline's shared memory once
// the main loop is done): rows of 256 bytes, 16 chunks. The writes (8 bytes a lane: c0 c1 or c2 c3 of a fragment) put 4 rows x 32 bytes
// in a half-warp; the reads (16 bytes a lane) put 8 lanes on one row, at chunks 2c (an f16/bf16 store
// of 8 columns, two reads) or c (an f32 store of 4). Chunk c of row r is kept at chunk
// c ^ ((c / 8) % 2) ^ 2 (r % 4), which serves all three without a conflict (the test counts them).
// kRows: the warp tile's rows (64 for rung 3; 32 or 16 for the FP8 GEMM's warps, gemm_fp8_mma.cu).
template <int kRows_>
struct WarpStaging {
  static constexpr int kRows = kRows_, kColumns = kWarpTile;
  static constexpr int kRowBytes = kColumns * 4;
  static constexpr int kBytes = kRows * kRowBytes;  // a warp's
  MG_LAYOUT_FN static int offset(int row, int column) {
    const int chunk = column / 4;
    const int stored = chunk ^ ((chunk / 8) % 2) ^ (2 * (row % 4));
    return row * kRowBytes + stored * kChunkBytes + (column % 4) * 4;
  }
  // Where lane `lane` writes c[2h], c[2h + 1] of fragment (i, j) (8 bytes).
  MG_LAYOUT_FN static Cell write(int lane, int i, int j, int h) {
    const Cell in_fragment = accumulator(lane, 2 * h);
    return {16 * i + in_fragment.row, 8 * j + in_fragment.column};
  }
  // The kColumnsPerStore consecutive columns (16 bytes of the stored type: 8 of f16/bf16, 4 of f32)
  // that lane `lane` reads, finishes and stores in its item-th store.
  template <int kStoreBytes>
  static constexpr int kColumnsPerStore = kChunkBytes / kStoreBytes;
  template <int kStoreBytes>
  static constexpr int kItems = kRows* kColumns / kColumnsPerStore<kStoreBytes> / 32;
  template <int kStoreBytes>
  MG_LAYOUT_FN static Cell read(int lane, int item) {
    constexpr int kLanesPerRow = kColumns / kColumnsPerStore<kStoreBytes>;
    const int index = item * 32 + lane;
    return {index / kLanesPerRow, (index % kLanesPerRow) * kColumnsPerStore<kStoreBytes>};
  }
};
using Staging = WarpStaging<kWarpTile>;

// ---- a configuration: block tile, warps, stages -------------------------------------------------------

// kTileM x kTileN of C a block, warps of 64 x 64 (kTileM / 64 along m by kTileN / 64 along n), a
// pipeline of kStages k steps; kBlocksPerSm is what the launch bounds promise and split-K fills to.
template <int kTileM_, int kTileN_, int kStages_, int kBlocksPerSm_>
struct Config {
  static constexpr int kTileM = kTileM_, kTileN = kTileN_, kStages = kStages_, kBlocksPerSm = kBlocksPerSm_;
  static constexpr int kWarpsM = kTileM / kWarpTile, kWarpsN = kTileN / kWarpTile;
  static constexpr int kWarps = kWarpsM * kWarpsN;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kStageBytes = (kTileM + kTileN) * kRowBytes;  // A's tile, then B's
  static constexpr int kPipelineBytes = kStages * kStageBytes;
  static constexpr int kSharedBytes = kPipelineBytes > kWarps* Staging::kBytes ? kPipelineBytes
                                                                               : kWarps* Staging::kBytes;
  // Warp w's corner in the block's tile.
  MG_LAYOUT_FN static Cell warp_corner(int warp) {
    return {(warp / kWarpsN) * kWarpTile, (warp % kWarpsN) * kWarpTile};
  }
};

// Rung 3's two configurations (gemm.cu picks one for each GEMM). Shared memory decides how many blocks
// an SM holds: an H100 has 228 KiB an SM (227 a block with the opt-in), an A100 164, an Ada GPU 100.
using LargeTile = Config<128, 256, 4, 1>;  // 192 KiB: one block an SM, and only where a block may have that
using MediumTile = Config<128, 128, 3, 2>;  // 96 KiB: two blocks an SM on an H100, one on an Ada GPU

// ---- the order of the blocks --------------------------------------------------------------------------

// Blocks that run at the same time should share operands in L2. Over C of 64 x 32 tiles (8192^2 in
// 128 x 256 tiles), the 132 blocks of a wave numbered row by row read 5 row panels of A and all 32
// column panels of B (37 panels); walked column by column within groups of 8 tile rows, they read 8
// of A and 17 of B (25). Block `block` of tiles_m x tiles_n takes tile (row, column) of C:
constexpr int kGroupRows = 8;
MG_LAYOUT_FN Cell block_tile(int block, int tiles_m, int tiles_n) {
  const int per_group = kGroupRows * tiles_n;
  const int first_row = (block / per_group) * kGroupRows;
  const int rows = tiles_m - first_row < kGroupRows ? tiles_m - first_row : kGroupRows;
  const int within = block % per_group;
  return {first_row + within % rows, within / rows};
}

}  // namespace mg::kernels::cuda::mma_layout
