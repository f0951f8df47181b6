// The layouts of rung 3 of the GPU GEMM ladder (kernels/cuda/mma_layout.h), on the host: no GPU, no
// CUDA, every build. What the kernel's layout functions say is checked against an independent
// description of the same hardware, and every shared-memory and global access of a block is counted.
//
// 1. The fragment tables. CuTe (NVIDIA CUTLASS, include/cute/atom/mma_traits_sm80.hpp and
//    copy_traits_sm75.hpp) writes each Tensor Core fragment as a layout from (thread, value) to an
//    index of the tile: SM80_16x8x16_F32F16F16F32_TN's ALayout is ((4,8),(2,2,2)):((32,1),(16,8,128))
//    on the 16x16 tile of A numbered column-major, and so on. The layouts are transcribed below, as
//    numbers, and evaluated by a ten-line CuTe-layout evaluator; mma_layout.h's functions must give
//    the same element for every lane and register. The same for ldmatrix (SM75_U32x4_LDSM_N and
//    SM75_U16x8_LDSM_T): what each lane receives, composed with the rows the kernel's lanes point
//    at, must be the MMA fragment. The tables print beside each other (run the suite with -s).
// 2. The addresses the kernel forms in its main loop (a kept offset plus a constant, the copies' first
//    offset plus a stride) equal OperandTile::offset for every lane, fragment, substep and copy; the
//    tiles, the staging and the block order are bijections.
// 3. Bank conflicts. Every warp's shared-memory accesses of a block, enumerated from the functions the
//    kernel calls: cp.async writes and the register copies' 16-byte stores, ldmatrix and LDS reads of
//    every substep, the epilogue's staging writes and reads; counted as the hardware serves them (a
//    16-byte access a quarter-warp at a time, 8 bytes a half-warp, 4 bytes the whole warp; a bank
//    serves one 4-byte word a wavefront). Each must take one wavefront per 128 bytes: no conflict.
//    Global side: every warp's cp.async reads and epilogue stores touch whole 32-byte sectors.
#include "tests/testing.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/mma_layout.h"
#include "tests/bank_conflicts.h"
#include "tests/cute_layouts.h"

using namespace mg;
namespace layout = mg::kernels::cuda::mma_layout;
using layout::Cell;
using layout::Coord;
using namespace mg::testing::cute;
using namespace mg::testing::banks;

namespace {

std::string cell_text(Cell c) { return fmt::format("({:2},{:2})", c.row, c.column); }

// ---- the tiles of each configuration and element size -------------------------------------------------

// Runs fn.template operator()<Cfg, kElementBytes, kKMajorA, kKMajorB>() for every tile combination
// the kernel instantiates: both configurations, f16/bf16 (2 bytes) and f32 (TF32, 4 bytes), every
// majorness of each operand.
template <class Fn>
void for_each_combination(Fn&& fn) {
  const auto majorness = [&]<class Cfg, int kBytes>() {
    fn.template operator()<Cfg, kBytes, true, true>();
    fn.template operator()<Cfg, kBytes, true, false>();
    fn.template operator()<Cfg, kBytes, false, true>();
    fn.template operator()<Cfg, kBytes, false, false>();
  };
  majorness.template operator()<layout::LargeTile, 2>();
  majorness.template operator()<layout::LargeTile, 4>();
  majorness.template operator()<layout::MediumTile, 2>();
  majorness.template operator()<layout::MediumTile, 4>();
}

template <class Tile>
std::string tile_name() {
  return fmt::format("{}-byte {} tile of {} rows", Tile::kElementBytes, Tile::kKMajor ? "K-major" : "MN-major",
                     Tile::kExtent);
}

}  // namespace

// ---- 1. the fragment tables against CuTe ---------------------------------------------------------------

TEST_CASE("mma layout: mma.sync's fragments are CuTe's SM80 MMA atoms, lane by lane") {
  std::string table = "m16n8k16 A, (row, k) of each lane's 8 elements: mma_layout.h | CuTe's ALayout\n";
  for (int lane = 0; lane < 32; ++lane) {
    std::string ours, cute;
    for (int e = 0; e < 8; ++e) {
      const Cell mine = layout::f16_a(lane, e);
      const int index = kCuteA16816(lane, e);
      const Cell theirs{index % 16, index / 16};
      CHECK_MESSAGE((mine.row == theirs.row && mine.column == theirs.column), "A lane " << lane << " element " << e);
      ours += cell_text(mine), cute += cell_text(theirs);
    }
    table += fmt::format("  lane {:2}: {} | {}\n", lane, ours, cute);
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 4; ++e) {
      const Cell mine = layout::f16_b(lane, e);  // (k, n)
      const int index = kCuteB16816(lane, e);  // n + 8 k
      CHECK_MESSAGE((mine.row == index / 8 && mine.column == index % 8), "B lane " << lane << " element " << e);
    }
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r) {
      const Cell c = layout::accumulator(lane, r);
      const int index = kCuteC16x8(lane, r);
      CHECK_MESSAGE((c.row == index % 16 && c.column == index / 16), "C lane " << lane << " register " << r);
      const Cell a = layout::tf32_a(lane, r);
      const int a_index = kCuteA1688Tf32(lane, r);
      CHECK_MESSAGE((a.row == a_index % 16 && a.column == a_index / 16), "TF32 A lane " << lane << " register " << r);
    }
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 2; ++r) {
      const Cell b = layout::tf32_b(lane, r);
      const int index = kCuteB1688Tf32(lane, r);
      CHECK_MESSAGE((b.row == index / 8 && b.column == index % 8), "TF32 B lane " << lane << " register " << r);
    }
  fmt::print("{}", table);
}

TEST_CASE("mma layout: the rows each lane hands to ldmatrix make the MMA fragments (CuTe's ldmatrix atoms)") {
  // Register reg, half h of lane l holds, by CuTe's copy atom, element e of the row lane s pointed at;
  // lane s's row starts at the element mma_layout.h's ldmatrix_* function gives: so l holds that
  // element + (0, e) (K-major rows run along k; MN-major rows along x, and .trans swaps them back).
  // By CuTe's MMA atom it must hold element 2 reg + h of its A fragment (or of B's pair).
  std::string table = "ldmatrix of a K-major f16 A fragment, lane 5: register.half -> (row, k)\n";
  for (const bool k_major : {true, false})
    for (int lane = 0; lane < 32; ++lane)
      for (int reg = 0; reg < 4; ++reg)
        for (int half = 0; half < 2; ++half) {
          const auto [source, element] = cute_ldmatrix(4, !k_major, lane, reg, half);
          // A (m16 x k16): the row of `source`, then along it.
          const Coord a_row = k_major ? layout::ldmatrix_a_k_major(source, 2) : layout::ldmatrix_a_mn_major(source);
          const Cell a_got = k_major ? Cell{a_row.x, a_row.k + element} : Cell{a_row.x + element, a_row.k};
          const Cell a_want = layout::f16_a(lane, 2 * reg + half);
          CHECK_MESSAGE((a_got.row == a_want.row && a_got.column == a_want.column),
                        (k_major ? "K-major" : "MN-major")
                            << " A, lane " << lane << " register " << reg << "." << half);
          if (k_major && lane == 5) table += fmt::format("  {}.{} -> {}\n", reg, half, cell_text(a_got));
          // B (pair of n8 x k16): registers 0, 1 are the first fragment's, 2, 3 the second's (8 columns on).
          const Coord b_row = k_major ? layout::ldmatrix_b_k_major(source, 2) : layout::ldmatrix_b_mn_major(source);
          const Cell b_got = k_major ? Cell{b_row.k + element, b_row.x} : Cell{b_row.k, b_row.x + element};  // (k, n)
          const Cell in_fragment = layout::f16_b(lane, 2 * (reg % 2) + half);
          CHECK_MESSAGE((b_got.row == in_fragment.row && b_got.column == in_fragment.column + 8 * (reg / 2)),
                        (k_major ? "K-major" : "MN-major")
                            << " B, lane " << lane << " register " << reg << "." << half);
        }
  // TF32 from K-major tiles: a "16-bit pair" of ldmatrix is one f32, so register reg of lane l is the
  // f32 of the row (half 0) at 4-byte element `element / 2`.
  for (int lane = 0; lane < 32; ++lane)
    for (int reg = 0; reg < 4; ++reg) {
      const auto [source, element] = cute_ldmatrix(4, false, lane, reg, 0);
      const Coord a_row = layout::ldmatrix_a_k_major(source, 4);
      const Cell a_want = layout::tf32_a(lane, reg);
      CHECK((a_row.x == a_want.row && a_row.k + element / 2 == a_want.column));
      const Coord b_row = layout::ldmatrix_b_k_major(source, 4);
      const Coord b_want = layout::tf32_b_pair_element(lane, reg);
      CHECK((b_row.x == b_want.x && b_row.k + element / 2 == b_want.k));
    }
  fmt::print("{}", table);
}

TEST_CASE("mma layout: the swizzles are chunk c of row r at c ^ (r % 8), and c ^ 2 (r % 4) for TF32's MN-major tiles") {
  for (int offset = 0; offset < 4096; ++offset) {
    const int row = offset / 128, chunk = (offset % 128) / 16, byte = offset % 16;
    CHECK(layout::Swizzle128B::apply(offset) == row * 128 + 16 * (chunk ^ (row % 8)) + byte);
    CHECK(layout::SwizzleTf32MnMajor::apply(offset) == row * 128 + 16 * (chunk ^ (2 * (row % 4))) + byte);
  }
}

// ---- 2. the addresses the kernel forms -----------------------------------------------------------------

namespace {

template <class Tile, layout::Operand kOperand, class Cfg>
void check_fragment_addresses() {
  using Loads = layout::FragmentLoads<Tile, kOperand>;
  const int registers = Loads::kLdmatrix ? 1 : 4;
  for (int warp = 0; warp < Cfg::kWarps; ++warp) {
    const Cell corner = Cfg::warp_corner(warp);
    const int x_corner = kOperand == layout::Operand::A ? corner.row : corner.column;
    for (int lane = 0; lane < 32; ++lane)
      for (int f = 0; f < 4; ++f)
        for (int kk = 0; kk < layout::kSubsteps; ++kk)
          for (int r = 0; r < registers; ++r) {
            const Coord e = Loads::element(lane, f, kk, r);
            const int formed = Loads::kept(lane, x_corner, Loads::kept_index(f, kk, r)) + Loads::constant(f, kk, r);
            if (formed != Tile::offset(x_corner + e.x, e.k))
              FAIL_CHECK(tile_name<Tile>()
                         << ": lane " << lane << " fragment " << f << " substep " << kk << " register " << r
                         << " forms " << formed << ", not " << Tile::offset(x_corner + e.x, e.k));
          }
  }
}

template <class Tile, int kThreads>
void check_copies() {
  // Every byte of the tile is one chunk's, once: the swizzled offsets are a permutation.
  std::vector<int> owner(Tile::kBytes, -1);
  for (int c = 0; c < Tile::kCopies; ++c) {
    const Coord at = Tile::copy_start(c);
    const int offset = Tile::offset(at.x, at.k);
    REQUIRE(offset % 16 == 0);
    REQUIRE((offset >= 0 && offset + 16 <= Tile::kBytes));
    for (int b = 0; b < 16; ++b) {
      CHECK(owner[static_cast<std::size_t>(offset + b)] == -1);
      owner[static_cast<std::size_t>(offset + b)] = c;
    }
  }
  // A thread's copies are its first plus multiples of one step, in the tile and in shared memory.
  for (int t = 0; t < kThreads; ++t) {
    const Coord first = Tile::copy_start(t);
    for (int i = 0; i < Tile::kCopies / kThreads; ++i) {
      const Coord at = Tile::copy_start(i * kThreads + t);
      CHECK((at.x == first.x + i * Tile::template kCopyApartX<kThreads> &&
             at.k == first.k + i * Tile::template kCopyApartK<kThreads>));
      CHECK(Tile::offset(at.x, at.k) == Tile::offset(first.x, first.k) + i * Tile::template kCopyStep<kThreads>);
    }
  }
}

}  // namespace

TEST_CASE("mma layout: the kernel's kept offsets plus constants are the tiles' offsets; copies cover each tile once") {
  for_each_combination([]<class Cfg, int kBytes, bool kKMajorA, bool kKMajorB>() {
    using TileA = layout::OperandTile<kBytes, Cfg::kTileM, kKMajorA>;
    using TileB = layout::OperandTile<kBytes, Cfg::kTileN, kKMajorB>;
    check_fragment_addresses<TileA, layout::Operand::A, Cfg>();
    check_fragment_addresses<TileB, layout::Operand::B, Cfg>();
    check_copies<TileA, Cfg::kThreads>();
    check_copies<TileB, Cfg::kThreads>();
  });
}

TEST_CASE("mma layout: the staging is a permutation of a warp's sums, and the blocks cover C once") {
  // Rung 3's 64 x 64 warps, and the FP8 GEMM's 32 x 64 and 16 x 64 (gemm_fp8_mma.cu).
  const auto check_staging = [&]<int kRows>() {
    using Staging = layout::WarpStaging<kRows>;
    INFO(kRows << " rows");
    std::set<int> offsets;
    for (int row = 0; row < Staging::kRows; ++row)
      for (int column = 0; column < Staging::kColumns; ++column) {
        const int offset = Staging::offset(row, column);
        CHECK((offset >= 0 && offset < Staging::kBytes && offset % 4 == 0));
        offsets.insert(offset);
      }
    CHECK(offsets.size() == static_cast<std::size_t>(Staging::kRows * Staging::kColumns));
    // Reads cover the kRows x 64 tile once, for either width of store.
    for (const int store_bytes : {2, 4}) {
      std::set<std::pair<int, int>> covered;
      const int items = store_bytes == 2 ? Staging::template kItems<2> : Staging::template kItems<4>;
      const int columns = 16 / store_bytes;
      for (int lane = 0; lane < 32; ++lane)
        for (int item = 0; item < items; ++item) {
          const Cell at = store_bytes == 2 ? Staging::template read<2>(lane, item)
                                           : Staging::template read<4>(lane, item);
          CHECK((at.row >= 0 && at.row < kRows));
          for (int e = 0; e < columns; ++e) CHECK(covered.insert({at.row, at.column + e}).second);
        }
      CHECK(covered.size() == static_cast<std::size_t>(kRows) * 64u);
    }
  };
  check_staging.template operator()<64>();
  check_staging.template operator()<32>();
  check_staging.template operator()<16>();
  for (const auto& [tiles_m, tiles_n] :
       std::vector<std::pair<int, int>>{{1, 1}, {3, 5}, {8, 8}, {9, 2}, {64, 32}, {20, 7}}) {
    std::set<std::pair<int, int>> seen;
    for (int block = 0; block < tiles_m * tiles_n; ++block) {
      const Cell t = layout::block_tile(block, tiles_m, tiles_n);
      CHECK((t.row >= 0 && t.row < tiles_m && t.column >= 0 && t.column < tiles_n));
      seen.insert({t.row, t.column});
    }
    CHECK(seen.size() == static_cast<std::size_t>(tiles_m * tiles_n));
  }
  // The grouped order's point: a wave of 132 blocks over 8192^2 in 128 x 256 tiles reads 25 panels.
  std::set<int> rows, columns;
  for (int block = 0; block < 132; ++block) {
    const Cell t = layout::block_tile(block, 64, 32);
    rows.insert(t.row), columns.insert(t.column);
  }
  CHECK(rows.size() + columns.size() == 25u);
}

// ---- 3. bank conflicts and sectors ---------------------------------------------------------------------

TEST_CASE("mma layout: no bank conflict in any warp's shared-memory access, whole sectors in global memory") {
  for_each_combination([]<class Cfg, int kBytes, bool kKMajorA, bool kKMajorB>() {
    using TileA = layout::OperandTile<kBytes, Cfg::kTileM, kKMajorA>;
    using TileB = layout::OperandTile<kBytes, Cfg::kTileN, kKMajorB>;
    const std::string name = fmt::format("{}x{} tiles, {}-byte elements, A {}, B {}", Cfg::kTileM, Cfg::kTileN, kBytes,
                                         kKMajorA ? "K-major" : "MN-major", kKMajorB ? "K-major" : "MN-major");
    INFO(name);
    ConflictCount copies{"cp.async writes and register-copy stores"}, loads{"fragment loads (ldmatrix, LDS)"};
    bool sectors = true;
    // The copies: warp w's i-th copy instruction. Global addresses in an operand whose rows are 4096
    // elements long (aligned, a multiple of every tile), the tile at its corner.
    const auto copy_accesses = [&]<class Tile>(Tile, long tile_base) {
      for (int warp = 0; warp < Cfg::kWarps; ++warp)
        for (int i = 0; i < Tile::kCopies / Cfg::kThreads; ++i) {
          Access shared{std::vector<long>(32), 16}, global{std::vector<long>(32), 16};
          for (int lane = 0; lane < 32; ++lane) {
            const Coord at = Tile::copy_start(i * Cfg::kThreads + 32 * warp + lane);
            shared.address[static_cast<std::size_t>(lane)] = tile_base + Tile::offset(at.x, at.k);
            global.address[static_cast<std::size_t>(lane)] = (Tile::kKMajor ? static_cast<long>(at.x) * 4096 + at.k
                                                                            : static_cast<long>(at.k) * 4096 + at.x) *
                                                             Tile::kElementBytes;
          }
          copies.add(shared, fmt::format("{} warp {} copy {}", tile_name<Tile>(), warp, i));
          sectors = sectors && whole_sectors(global);
        }
    };
    copy_accesses(TileA{}, 0);
    copy_accesses(TileB{}, TileA::kBytes);
    // The fragment loads: each warp, fragment, substep (and register for LDS).
    const auto load_accesses =
        [&]<class Tile, layout::Operand kOperand>(Tile, std::integral_constant<layout::Operand, kOperand>) {
          using Loads = layout::FragmentLoads<Tile, kOperand>;
          for (int warp = 0; warp < Cfg::kWarps; ++warp) {
            const Cell corner = Cfg::warp_corner(warp);
            const int x_corner = kOperand == layout::Operand::A ? corner.row : corner.column;
            for (int f = 0; f < 4; ++f)
              for (int kk = 0; kk < layout::kSubsteps; ++kk)
                for (int r = 0; r < (Loads::kLdmatrix ? 1 : 4); ++r) {
                  Access access{std::vector<long>(32), Loads::kLdmatrix ? 16 : 4};
                  for (int lane = 0; lane < 32; ++lane)
                    access.address[static_cast<std::size_t>(lane)] = Loads::kept(lane, x_corner,
                                                                                 Loads::kept_index(f, kk, r)) +
                                                                     Loads::constant(f, kk, r);
                  loads.add(access, fmt::format("{} warp {} fragment {} substep {} register {}", tile_name<Tile>(),
                                                warp, f, kk, r));
                }
          }
        };
    load_accesses(TileA{}, std::integral_constant<layout::Operand, layout::Operand::A>{});
    load_accesses(TileB{}, std::integral_constant<layout::Operand, layout::Operand::B>{});
    copies.check();
    loads.check();
    CHECK_MESSAGE(sectors, "a warp's cp.async reads part of a 32-byte sector");
  });
}

TEST_CASE("mma layout: the epilogue's staging writes and reads are conflict-free, its stores whole sectors") {
  // Rung 3's 64 x 64 warps, and the FP8 GEMM's 32 x 64 and 16 x 64 (gemm_fp8_mma.cu).
  const auto check_staging = [&]<int kRows>() {
    using Staging = layout::WarpStaging<kRows>;
    ConflictCount writes{fmt::format("staging writes (8 bytes a lane), {} rows", kRows)},
        reads{fmt::format("staging reads (16 bytes a lane), {} rows", kRows)};
    bool sectors = true;
    for (int i = 0; i < kRows / 16; ++i)
      for (int j = 0; j < layout::kFragsN; ++j)
        for (int h = 0; h < 2; ++h) {
          Access access{std::vector<long>(32), 8};
          for (int lane = 0; lane < 32; ++lane) {
            const Cell at = Staging::write(lane, i, j, h);
            access.address[static_cast<std::size_t>(lane)] = Staging::offset(at.row, at.column);
          }
          writes.add(access, fmt::format("fragment ({}, {}) half {}", i, j, h));
        }
    const auto read_accesses = [&]<int kStoreBytes>() {
      constexpr int kColumns = Staging::template kColumnsPerStore<kStoreBytes>;
      for (int item = 0; item < Staging::template kItems<kStoreBytes>; ++item) {
        for (int q = 0; q < kColumns / 4; ++q) {
          Access access{std::vector<long>(32), 16};
          for (int lane = 0; lane < 32; ++lane) {
            const Cell at = Staging::template read<kStoreBytes>(lane, item);
            access.address[static_cast<std::size_t>(lane)] = Staging::offset(at.row, at.column + 4 * q);
          }
          reads.add(access, fmt::format("{}-byte stores, item {}, chunk {}", kStoreBytes, item, q));
        }
        // The global store: C with rows of 4096 elements (aligned), the warp's tile at its corner.
        Access global{std::vector<long>(32), 16};
        for (int lane = 0; lane < 32; ++lane) {
          const Cell at = Staging::template read<kStoreBytes>(lane, item);
          global.address[static_cast<std::size_t>(lane)] = (static_cast<long>(at.row) * 4096 + at.column) * kStoreBytes;
        }
        sectors = sectors && whole_sectors(global);
      }
    };
    read_accesses.template operator()<2>();
    read_accesses.template operator()<4>();
    writes.check();
    reads.check();
    CHECK_MESSAGE(sectors, "a warp's store of C covers part of a " << kRows << "-row tile's 32-byte sector");
  };
  check_staging.template operator()<64>();
  check_staging.template operator()<32>();
  check_staging.template operator()<16>();
}

TEST_CASE("mma layout: the counter sees a conflict where there is one") {
  // Rows of 128 bytes without the swizzle: the 8 rows of an ldmatrix matrix on the same 4 banks.
  Access unswizzled{std::vector<long>(32), 16};
  for (int lane = 0; lane < 32; ++lane) unswizzled.address[static_cast<std::size_t>(lane)] = 128L * lane;
  CHECK(wavefronts(unswizzled) == 4 * 8);
  Access swizzled{std::vector<long>(32), 16};
  for (int lane = 0; lane < 32; ++lane)
    swizzled.address[static_cast<std::size_t>(lane)] = layout::Swizzle128B::apply(128 * lane);
  CHECK(wavefronts(swizzled) == 4);
  // Two lanes reading the same word is a broadcast, not a conflict; half a sector is not a whole one.
  Access broadcast{std::vector<long>(32, 0), 4};
  CHECK(wavefronts(broadcast) == 1);
  Access strided{std::vector<long>(32), 16};
  for (int lane = 0; lane < 32; ++lane) strided.address[static_cast<std::size_t>(lane)] = 32L * lane;
  CHECK_FALSE(whole_sectors(strided));
}
