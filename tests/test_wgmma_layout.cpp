// The layouts of rung 4 of the GPU GEMM ladder (kernels/cuda/wgmma_layout.h), on the host: no GPU, no
// CUDA, every build. wgmma reads its operands from shared memory through 64-bit matrix descriptors and
// leaves its sums in the warpgroup's registers; what wgmma_layout.h says about both is checked here
// against an independent description of the same hardware: NVIDIA CUTLASS's CuTe
// (include/cute/atom/mma_traits_sm90_gmma.hpp, include/cute/arch/mma_sm90_desc.hpp and
// include/cute/swizzle.hpp), transcribed as numbers in tests/cute_layouts.h and evaluated by the same
// ten-line layout evaluator as rung 3's tables (tests/test_mma_layout.cpp).
//
// a. swizzle(address, s) is CuTe's Swizzle<b,4,3> on byte addresses (b = 0, 1, 2, 3: none, 32, 64,
//    128 bytes) for every address of 8 KiB, and mma_layout.h's Swizzle<3,4,3> for 128 bytes.
// b. encode puts each field where GmmaDescriptor's bit fields say, bit by bit, with the swizzle in
//    CuTe's LayoutType numbering (128B = 1, 64B = 2, 32B = 3); decode inverts it.
// c. canonical_offset and element_address are make_gmma_desc's canonical layouts (K-major for 2- and
//    1-byte elements, MN-major for 2-byte; every swizzle; several starts, LBOs and SBOs; mn < 256 and
//    every k of one instruction), then CuTe's swizzle of the byte address.
// d. The tiles rung 4's TMA writes (128-byte rows, 128-byte swizzle): tile_descriptor's k steps read
//    element (mn, k) where TMA put it, and the four steps read the tile once.
// e. accumulator_cell is CuTe's CLayout_64xN for N = 8 to 256, and the warpgroup's registers hold D once.
// f. Each comparison above, fed a plausible wrong layout, counts mismatches: the checks can fail.
// g. The one shared-memory access rung 4's lanes make themselves (operands are TMA's and wgmma's): the
//    epilogue's staging stores, counted for bank conflicts as rung 3's are (tests/bank_conflicts.h).
// The tables print as the suite runs, once each.
//
// The suite needs nothing of the library (the header is host C++), so it includes doctest itself and
// compiles alone: g++ -std=c++20 -I. -DDOCTEST_CONFIG_IMPLEMENT_WITH_MAIN tests/test_wgmma_layout.cpp -lfmt.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/wgmma_layout.h"
#include "tests/bank_conflicts.h"
#include "tests/cute_layouts.h"

namespace wg = mg::kernels::cuda::wgmma_layout;
namespace mma = mg::kernels::cuda::mma_layout;
using namespace mg::testing::cute;

namespace {

// The header's functions are constexpr: the kernel may build its descriptors at compile time.
static_assert(wg::swizzle(0x80, wg::Swizzle::B128) == 0x90);
static_assert(wg::encode({0x400, 16, 1024, wg::Swizzle::B128}) == 0x4000004000010040ull);

constexpr wg::Swizzle kSwizzles[] = {wg::Swizzle::None, wg::Swizzle::B32, wg::Swizzle::B64, wg::Swizzle::B128};
int bits_of(wg::Swizzle s) { return static_cast<int>(s); }  // CuTe's b of Swizzle<b,4,3>
const char* name_of(wg::Swizzle s) {
  constexpr const char* kNames[] = {"none", "32B", "64B", "128B"};
  return kNames[bits_of(s)];
}
std::string text(const wg::Descriptor& d) {
  return fmt::format("{{start {}, LBO {}, SBO {}, swizzle {}}}", d.start, d.leading, d.stride, name_of(d.swizzle));
}

// Counts where the header and CuTe disagree; describe() names a point, called for the first mismatch only
// (the sweeps compare millions of points).
struct Mismatches {
  explicit Mismatches(std::string what_, std::string reference_ = "CuTe")
      : what(std::move(what_)), reference(std::move(reference_)) {}
  std::string what, reference;  // what is compared, and the name of the independent side
  long compared = 0, count = 0;
  std::string first;
  template <class Describe>
  void compare(long got, long want, Describe&& describe) {
    ++compared;
    if (got == want) return;
    if (count++ == 0) first = fmt::format("{}: wgmma_layout.h gives {}, {} {}", describe(), got, reference, want);
  }
  void check() const {
    CHECK_MESSAGE(compared > 0, what << ": nothing compared");
    CHECK_MESSAGE(count == 0, what << ": " << count << " of " << compared << " mismatched; first: " << first);
  }
};

// ---- the sweeps, each over the function under test (the header's, or a wrong one in case f) -------------

// a. swizzle(address, s) against Swizzle<b,4,3> for every address below 8 KiB (8 periods of the largest).
template <class Fn>
Mismatches sweep_swizzle(Fn&& swizzle_fn) {
  Mismatches m{"swizzle against CuTe's Swizzle<b,4,3>"};
  for (const wg::Swizzle s : kSwizzles)
    for (long address = 0; address < 8192; ++address)
      m.compare(swizzle_fn(static_cast<std::uint32_t>(address), s), cute_gmma_swizzle(bits_of(s))(address),
                [&] { return fmt::format("{} swizzle of address {}", name_of(s), address); });
  return m;
}

// GmmaDescriptor built by hand, a bit at a time, from mma_sm90_desc.hpp's fields.
std::uint64_t hand_built(std::uint32_t start, std::uint32_t lbo, std::uint32_t sbo, int base_offset, int layout_type) {
  std::uint64_t bits = 0;
  const auto put = [&](const DescriptorField& field, std::uint64_t value) {
    REQUIRE_MESSAGE(value < (std::uint64_t{1} << field.width), field.name << " = " << value << " does not fit");
    for (int i = 0; i < field.width; ++i)
      if ((value >> i) & 1) bits |= std::uint64_t{1} << (field.first + i);
  };
  put(kCuteStartAddress, start >> 4);
  put(kCuteLeadingByteOffset, lbo >> 4);
  put(kCuteStrideByteOffset, sbo >> 4);
  put(kCuteBaseOffset, static_cast<std::uint64_t>(base_offset));
  put(kCuteLayoutType, static_cast<std::uint64_t>(layout_type));
  return bits;
}

// The field a bit belongs to, for the messages.
const char* field_of(int bit) {
  for (const DescriptorField* f :
       {&kCuteStartAddress, &kCuteLeadingByteOffset, &kCuteStrideByteOffset, &kCuteBaseOffset, &kCuteLayoutType})
    if (bit >= f->first && bit < f->first + f->width) return f->name;
  return "an unused bit";
}

// Descriptors to encode: the extremes of each field, rung 4's, and pseudo-random ones (a fixed LCG).
std::vector<wg::Descriptor> some_descriptors() {
  std::vector<wg::Descriptor> all;
  constexpr std::uint32_t kMax = 0x3FFFu << 4;  // the largest 14-bit field, in bytes
  for (const wg::Swizzle s : kSwizzles) {
    all.push_back({0, 0, 0, s});
    all.push_back({kMax, kMax, kMax, s});
    all.push_back({kMax, 0, 0, s});
    all.push_back({0, kMax, 0, s});
    all.push_back({0, 0, kMax, s});
  }
  for (int step = 0; step < 4; ++step) {
    all.push_back(wg::tile_descriptor(96 * 1024, true, step, 0));
    all.push_back(wg::tile_descriptor(128 * 1024, false, step, 8192));
  }
  std::uint64_t state = 0x9E3779B97F4A7C15ull;
  const auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(state >> 33);
  };
  for (int i = 0; i < 4000; ++i) {
    const std::uint32_t start = (next() & 0x3FFFu) << 4, lbo = (next() & 0x3FFFu) << 4, sbo = (next() & 0x3FFFu) << 4;
    all.push_back({start, lbo, sbo, kSwizzles[next() % 4]});
  }
  return all;
}

// b. encode against the hand-built descriptor, every bit of each.
template <class Fn>
Mismatches sweep_encode(Fn&& encode_fn) {
  Mismatches m{"encode against GmmaDescriptor's bit fields"};
  for (const wg::Descriptor& d : some_descriptors()) {
    const std::uint64_t got = encode_fn(d);
    const std::uint64_t want = hand_built(d.start, d.leading, d.stride, 0, cute_layout_type(bits_of(d.swizzle)));
    for (int bit = 0; bit < 64; ++bit)
      m.compare(static_cast<long>((got >> bit) & 1), static_cast<long>((want >> bit) & 1),
                [&] { return fmt::format("bit {} ({}) of {} (0x{:016x})", bit, field_of(bit), text(d), want); });
  }
  return m;
}

// The LBO and SBO the canonical sweep tries (bytes). K-major swizzled layouts ignore LBO; the others
// take every pair, dense or not: the two descriptions must agree wherever they are evaluated.
constexpr std::uint32_t kLbos[] = {16, 128, 256, 2048, 8192};
constexpr std::uint32_t kSbos[] = {128, 256, 1024, 4096};
// Starts: a swizzle period's start, the k steps inside one (the kernel's K-major descriptors advance
// 32 bytes at a time, so the swizzle sees the start's bits too), and far into shared memory.
constexpr std::uint32_t kStarts[] = {0, 32, 96, 5 * 1024 + 64, 200 * 1024};

// c. fn(descriptor, k_major, element bytes, mn, k) against Swizzle<b,4,3>(start + bytes x layout(mn, k)),
// and offset_fn against bytes x layout(mn, k). mn < 256 (A's 64 rows, B's up to 256), k of one
// instruction: 32 bytes of it.
template <class AddressFn, class OffsetFn>
std::pair<Mismatches, Mismatches> sweep_canonical(AddressFn&& address_fn, OffsetFn&& offset_fn) {
  Mismatches addresses{"element_address against CuTe's swizzled canonical layouts"},
      offsets{"canonical_offset against CuTe's canonical layouts"};
  for (const bool k_major : {true, false})
    for (const int bytes : {2, 1}) {
      if (!k_major && bytes == 1) continue;  // MN-major is for 16-bit types only
      for (const wg::Swizzle s : kSwizzles)
        for (const std::uint32_t lbo : kLbos)
          for (const std::uint32_t sbo : kSbos) {
            const CuteLayout cute = cute_gmma_canonical(k_major, bits_of(s), bytes, static_cast<int>(lbo),
                                                        static_cast<int>(sbo));
            const CuteSwizzle cute_swizzle = cute_gmma_swizzle(bits_of(s));
            for (const std::uint32_t start : kStarts) {
              const wg::Descriptor d{start, lbo, sbo, s};
              for (int mn = 0; mn < 256; ++mn)
                for (int k = 0; k < wg::kInstructionK / bytes; ++k) {
                  const auto where = [&] {
                    return fmt::format("{}, {}-byte elements, {}, (mn, k) = ({}, {})", k_major ? "K-major" : "MN-major",
                                       bytes, text(d), mn, k);
                  };
                  const long offset = static_cast<long>(bytes) * cute(mn, k);
                  addresses.compare(address_fn(d, k_major, bytes, mn, k), cute_swizzle(start + offset), where);
                  if (start == 0) offsets.compare(offset_fn(d, k_major, bytes, mn, k), offset, where);
                }
            }
          }
    }
  return {addresses, offsets};
}

// d. Rung 4's tiles: TMA with CU_TENSOR_MAP_SWIZZLE_128B writes dense 128-byte rows, the byte at
// unswizzled address a landing at Swizzle<3,4,3>(a). K-major: a row per mn, 64 two-byte k. MN-major:
// a row per k, 64 two-byte mn, each 64-wide block of mn (64 rows of k) kMnBlock bytes after the last.
constexpr std::uint32_t kMnBlock = 64 * wg::kRowBytes;  // 8192
template <class Fn>
Mismatches sweep_tile(bool k_major, Fn&& address_fn) {
  Mismatches m{fmt::format("{} tile_descriptor against TMA's 128-byte swizzled rows", k_major ? "K-major" : "MN-major"),
               "TMA's row"};
  const CuteSwizzle tma = cute_gmma_swizzle(3);
  for (const std::uint32_t tile : {0u, 1024u, 33u * 1024u, 160u * 1024u})
    for (int step = 0; step < 4; ++step)
      for (int mn = 0; mn < 256; ++mn)
        for (int k = 0; k < 16; ++k) {
          const int k_in_tile = 16 * step + k;
          const long row_major = k_major ? tile + mn * 128L + k_in_tile * 2L
                                         : tile + (mn / 64) * static_cast<long>(kMnBlock) + k_in_tile * 128L +
                                               (mn % 64) * 2L;
          m.compare(address_fn(tile, step, mn, k), tma(row_major),
                    [&] { return fmt::format("tile {}, k step {}, (mn, k) = ({}, {})", tile, step, mn, k); });
        }
  return m;
}
long tile_address(bool k_major, std::uint32_t tile, int step, int mn, int k) {
  return wg::element_address(wg::tile_descriptor(tile, k_major, step, kMnBlock), k_major, 2, mn, k);
}

// e. accumulator_cell(warp, lane, v) against CLayout_64xN (thread 32 warp + lane), as indices row + 64 column.
template <class Fn>
Mismatches sweep_accumulator(Fn&& cell_fn) {
  Mismatches m{"accumulator_cell against CuTe's CLayout_64xN"};
  for (const int n : {8, 16, 64, 128, 256}) {
    const CuteLayout cute = cute_clayout_64xn(n);
    for (int warp = 0; warp < 4; ++warp)
      for (int lane = 0; lane < 32; ++lane)
        for (int v = 0; v < n / 2; ++v) {
          const mma::Cell c = cell_fn(warp, lane, v);
          const int want = cute(32 * warp + lane, v);
          m.compare(c.row + 64L * c.column, want, [&] {
            return fmt::format("N = {}, warp {} lane {} value {}: ({}, {}) against CuTe's ({}, {})", n, warp, lane, v,
                               c.row, c.column, want % 64, want / 64);
          });
        }
  }
  return m;
}

}  // namespace

// ---- a. the swizzle ------------------------------------------------------------------------------------

TEST_CASE("wgmma layout: swizzle is CuTe's Swizzle<b,4,3> on byte addresses, and rung 3's for 128 bytes") {
  sweep_swizzle([](std::uint32_t address, wg::Swizzle s) {
    return static_cast<long>(wg::swizzle(address, s));
  }).check();
  Mismatches rung3{"swizzle(., B128) against mma_layout::Swizzle<3,4,3>", "mma_layout.h"};
  for (int address = 0; address < 8192; ++address)
    rung3.compare(wg::swizzle(static_cast<std::uint32_t>(address), wg::Swizzle::B128),
                  mma::Swizzle<3, 4, 3>::apply(address), [&] { return fmt::format("address {}", address); });
  rung3.check();
  // Each swizzle permutes the 16-byte chunks within its span and leaves the byte within a chunk.
  for (const wg::Swizzle s : kSwizzles) {
    std::set<std::uint32_t> seen;
    for (std::uint32_t address = 0; address < 8192; ++address) {
      const std::uint32_t to = wg::swizzle(address, s);
      seen.insert(to);
      CHECK(to % 16 == address % 16);
      CHECK(to / static_cast<std::uint32_t>(wg::span_bytes(s)) ==
            address / static_cast<std::uint32_t>(wg::span_bytes(s)));
    }
    CHECK(seen.size() == 8192u);
  }
  std::string table = "the 16-byte chunk where chunk c of 128-byte row r lands (c = 0..7), for each swizzle:\n";
  for (const wg::Swizzle s : kSwizzles) {
    table += fmt::format("  {}:\n", name_of(s));
    for (std::uint32_t row = 0; row < 8; ++row) {
      table += fmt::format("    row {}:", row);
      for (std::uint32_t chunk = 0; chunk < 8; ++chunk)
        table += fmt::format(" {}", (wg::swizzle(row * 128 + chunk * 16, s) % 128) / 16);
      table += "\n";
    }
  }
  fmt::print("{}", table);
}

// ---- b. the descriptor ------------------------------------------------------------------------------------

TEST_CASE("wgmma layout: encode puts each field where GmmaDescriptor's bit fields are, and decode inverts it") {
  // The swizzle field is CuTe's LayoutType, not the b of Swizzle<b,4,3>.
  for (const wg::Swizzle s : kSwizzles)
    CHECK_MESSAGE(wg::swizzle_field(s) == static_cast<std::uint64_t>(cute_layout_type(bits_of(s))), name_of(s));
  sweep_encode([](const wg::Descriptor& d) { return wg::encode(d); }).check();
  Mismatches round_trip{"decode(encode(d)) == d"};
  for (const wg::Descriptor& d : some_descriptors()) {
    const std::uint64_t bits = wg::encode(d);
    const wg::Descriptor back = wg::decode(bits);
    const auto where = [&] { return text(d); };
    round_trip.compare(back.start, d.start, where);
    round_trip.compare(back.leading, d.leading, where);
    round_trip.compare(back.stride, d.stride, where);
    round_trip.compare(bits_of(back.swizzle), bits_of(d.swizzle), where);
    round_trip.compare(wg::base_offset(bits), 0, where);
  }
  round_trip.check();
  // decode reads a descriptor built by hand, base offset and all.
  for (const wg::Swizzle s : kSwizzles)
    for (int base = 0; base < 8; ++base) {
      const std::uint64_t bits = hand_built(0x1230, 0x450, 0x780, base, cute_layout_type(bits_of(s)));
      const wg::Descriptor d = wg::decode(bits);
      CHECK((d.start == 0x1230 && d.leading == 0x450 && d.stride == 0x780 && d.swizzle == s));
      CHECK(wg::base_offset(bits) == base);
    }
  // Rung 4's descriptors, printed as CuTe's print(GmmaDescriptor) would (fields in 16-byte units).
  std::string table = "rung 4's descriptors (tile at 96 KiB; MN-major blocks of 64 mn every 8 KiB):\n";
  for (const bool k_major : {true, false})
    for (int step = 0; step < 4; ++step) {
      const std::uint64_t bits = wg::encode(wg::tile_descriptor(96 * 1024, k_major, step, kMnBlock));
      table += fmt::format("  {:8} step {}: 0x{:016x}  start_address_ 0x{:04x}  leading_byte_offset_ {:4}"
                           "  stride_byte_offset_ {:3}  base_offset_ {}  layout_type_ {}\n",
                           k_major ? "K-major" : "MN-major", step, bits, bits & 0x3FFF, (bits >> 16) & 0x3FFF,
                           (bits >> 32) & 0x3FFF, (bits >> 49) & 7, bits >> 62);
    }
  fmt::print("{}", table);
}

// ---- c. the canonical layouts ---------------------------------------------------------------------------

TEST_CASE("wgmma layout: canonical_offset and element_address are make_gmma_desc's canonical layouts, swizzled") {
  auto [addresses, offsets] =
      sweep_canonical([](const wg::Descriptor& d, bool k_major, int bytes, int mn,
                         int k) { return static_cast<long>(wg::element_address(d, k_major, bytes, mn, k)); },
                      [](const wg::Descriptor& d, bool k_major, int bytes, int mn, int k) {
                        return static_cast<long>(wg::canonical_offset(d, k_major, bytes, mn, k));
                      });
  addresses.check();
  offsets.check();
  // Where one instruction's 16-bit operand lies: the 16-byte chunk of each 8-element group, from the start
  // (0), with the densest SBO (8 rows of the swizzle's span) and LBO (K-major none: after the 8 x 16-byte
  // core matrices of 8 rows; MN-major: after 8 rows of k, then after the span's mn).
  std::string table = "K-major f16 (SBO = 8 spans, LBO 128): chunk of (mn, k = 0..7) | (mn, k = 8..15), per swizzle\n";
  for (int mn = 0; mn < 16; ++mn) {
    table += fmt::format("  mn {:2}:", mn);
    for (const wg::Swizzle s : kSwizzles) {
      const wg::Descriptor d{0, 128, static_cast<std::uint32_t>(8 * wg::span_bytes(s)), s};
      table += fmt::format("  {:>4} {:3} {:3}", name_of(s), wg::element_address(d, true, 2, mn, 0) / 16,
                           wg::element_address(d, true, 2, mn, 8) / 16);
    }
    table += "\n";
  }
  table += "MN-major f16 (none: SBO 128, LBO 256; swizzled: SBO = 8 spans, LBO 8192): chunk of (mn = 0..7, k)"
           " | (mn = 8..15, k), per swizzle\n";
  for (int k = 0; k < 16; ++k) {
    table += fmt::format("  k {:2}:", k);
    for (const wg::Swizzle s : kSwizzles) {
      const wg::Descriptor d = s == wg::Swizzle::None
                                   ? wg::Descriptor{0, 256, 128, s}
                                   : wg::Descriptor{0, 8192, static_cast<std::uint32_t>(8 * wg::span_bytes(s)), s};
      table += fmt::format("  {:>4} {:3} {:3}", name_of(s), wg::element_address(d, false, 2, 0, k) / 16,
                           wg::element_address(d, false, 2, 8, k) / 16);
    }
    table += "\n";
  }
  fmt::print("{}", table);
}

// ---- d. rung 4's tiles -------------------------------------------------------------------------------------

TEST_CASE("wgmma layout: tile_descriptor's k steps read each element where TMA's 128-byte swizzle wrote it") {
  for (const bool k_major : {true, false}) {
    sweep_tile(k_major, [&](std::uint32_t tile, int step, int mn, int k) {
      return tile_address(k_major, tile, step, mn, k);
    }).check();
    // The four k steps of 256 rows of mn read the 32 KiB tile once, every 2-byte element.
    std::set<long> read;
    for (int step = 0; step < 4; ++step)
      for (int mn = 0; mn < 256; ++mn)
        for (int k = 0; k < 16; ++k) {
          const long address = tile_address(k_major, 64 * 1024, step, mn, k);
          CHECK((address >= 64 * 1024 && address < 96 * 1024 && address % 2 == 0));
          read.insert(address);
        }
    CHECK_MESSAGE(read.size() == 16384u, (k_major ? "K-major" : "MN-major") << " tile: some element read twice");
  }
  // The fields: K-major LBO 1 (unused by the swizzled layouts, "assumed to be 1"), SBO 1024 bytes (64);
  // MN-major LBO = the next block of mn, SBO 1024 bytes; both the 128-byte swizzle (LayoutType B128 = 1).
  const std::uint64_t k_bits = wg::encode(wg::tile_descriptor(0, true, 0, 0));
  CHECK(k_bits == hand_built(0, 16, 1024, 0, cute_layout_type(3)));
  const std::uint64_t mn_bits = wg::encode(wg::tile_descriptor(0, false, 0, kMnBlock));
  CHECK(mn_bits == hand_built(0, kMnBlock, 1024, 0, cute_layout_type(3)));
}

// ---- e. the accumulator --------------------------------------------------------------------------------------

TEST_CASE("wgmma layout: accumulator_cell is CuTe's CLayout_64xN, and the warpgroup holds D once") {
  sweep_accumulator([](int warp, int lane, int v) { return wg::accumulator_cell(warp, lane, v); }).check();
  for (const int n : {8, 16, 64, 128, 256}) {
    std::set<std::pair<int, int>> held;
    for (int warp = 0; warp < 4; ++warp)
      for (int lane = 0; lane < 32; ++lane)
        for (int v = 0; v < n / 2; ++v) {
          const mma::Cell c = wg::accumulator_cell(warp, lane, v);
          CHECK((c.row >= 0 && c.row < 64 && c.column >= 0 && c.column < n));
          held.insert({c.row, c.column});
        }
    CHECK_MESSAGE(held.size() == static_cast<std::size_t>(64 * n), "N = " << n);
  }
  std::string table =
      "wgmma.m64n16 D, (row, column) of warp 0's lanes' 8 values: wgmma_layout.h | CuTe's CLayout_64x16 (warp w: "
      "16 w rows on)\n";
  const CuteLayout cute = cute_clayout_64xn(16);
  for (int lane = 0; lane < 32; ++lane) {
    std::string ours, theirs;
    for (int v = 0; v < 8; ++v) {
      const mma::Cell c = wg::accumulator_cell(0, lane, v);
      const int index = cute(lane, v);
      ours += fmt::format("({:2},{:2})", c.row, c.column);
      theirs += fmt::format("({:2},{:2})", index % 64, index / 64);
    }
    table += fmt::format("  lane {:2}: {} | {}\n", lane, ours, theirs);
  }
  fmt::print("{}", table);
}

// ---- f. the checks can fail ------------------------------------------------------------------------------------

TEST_CASE("wgmma layout: each comparison counts the mismatches of a wrong layout") {
  // The swizzle's XOR taken from bits 8.. instead of 7.. (Swizzle<b,4,4>).
  const Mismatches swizzle = sweep_swizzle([](std::uint32_t address, wg::Swizzle s) {
    return static_cast<long>(address ^ (((address >> 8) & ((1u << bits_of(s)) - 1)) << 4));
  });
  CHECK(swizzle.count > 0);
  // The ISA's swizzle numbering mistaken for CuTe's b (128B as 3).
  const Mismatches encode = sweep_encode([](const wg::Descriptor& d) {
    return (wg::encode(d) & ~(std::uint64_t{3} << 62)) | std::uint64_t(bits_of(d.swizzle)) << 62;
  });
  CHECK(encode.count > 0);
  // A swizzled MN-major layout read with the interleaved one's roles of LBO and SBO.
  const auto swapped = [](const wg::Descriptor& d, bool k_major, int bytes, int mn, int k) {
    wg::Descriptor e = d;
    if (!k_major && d.swizzle != wg::Swizzle::None) std::swap(e.leading, e.stride);
    return static_cast<long>(wg::element_address(e, k_major, bytes, mn, k));
  };
  // The offset taken with the span of the next smaller swizzle (W halved: 64B read as 32B, and so on).
  const auto half_span = [](const wg::Descriptor& d, bool k_major, int bytes, int mn, int k) {
    wg::Descriptor e = d;
    if (d.swizzle != wg::Swizzle::None) e.swizzle = static_cast<wg::Swizzle>(bits_of(d.swizzle) - 1);
    return static_cast<long>(wg::canonical_offset(e, k_major, bytes, mn, k));
  };
  const auto [addresses, offsets] = sweep_canonical(swapped, half_span);
  CHECK(addresses.count > 0);
  CHECK(offsets.count > 0);
  // A K-major descriptor advanced 16 bytes a k step instead of 32; an MN-major block of mn 4 KiB on.
  CHECK(sweep_tile(true, [](std::uint32_t tile, int step, int mn, int k) {
          return static_cast<long>(
              wg::element_address(wg::tile_descriptor(tile - 16 * step, true, step, 0), true, 2, mn, k));
        }).count > 0);
  CHECK(sweep_tile(false, [](std::uint32_t tile, int step, int mn, int k) {
          return static_cast<long>(
              wg::element_address(wg::tile_descriptor(tile, false, step, kMnBlock / 2), false, 2, mn, k));
        }).count > 0);
  // The accumulator's rows of 8 swapped with its column pairs (mma.sync's register order read wrongly).
  CHECK(sweep_accumulator([](int warp, int lane, int v) {
          return wg::accumulator_cell(warp, lane, (v & ~3) | ((v & 1) << 1) | ((v >> 1) & 1));
        }).count > 0);
}

TEST_CASE("wgmma layout: the epilogue's staging stores: no bank conflict for 16-bit C, two ways for f32") {
  using mg::testing::banks::Access;
  using mg::testing::banks::ConflictCount;
  using mg::testing::banks::ideal_wavefronts;
  using mg::testing::banks::wavefronts;
  // Each store is a lane's pair of adjacent columns, at the swizzled address of a staging 1024-byte
  // aligned (as the kernel's). 16-bit C (256 columns a warp): a pair is 4 bytes, the whole warp one
  // phase, 8 rows of 16 bytes in 8 different chunks: no conflict. f32 C (128 columns): a pair is 8
  // bytes, a half-warp a phase, 4 rows of 32 bytes; the swizzle XORs the chunk with the row, so rows
  // r and r ^ 1 put their two chunks on the same two chunk positions: two ways. TMA's box must be the
  // swizzle's dense rows, so no padding can part them; the f32 epilogue pays one wavefront more per
  // store (a GEMM with f32 C is off the mixed-precision path: autocast's matmuls give f16 or bf16).
  for (const auto& [element_bytes, columns] : {std::pair{2, 256}, std::pair{4, 128}}) {
    ConflictCount stores{fmt::format("staging stores of {}-byte C ({} columns)", element_bytes, columns)};
    const std::uint32_t staging = 3 * 1024;
    std::set<std::uint32_t> bytes_written;
    int extra = 0, count = 0;
    for (int v = 0; v < columns / 2; v += 2) {  // the lane's values v and v + 1: one pair
      Access access{std::vector<long>(32), 2 * element_bytes};
      for (int lane = 0; lane < 32; ++lane) {
        const mma::Cell cell = wg::accumulator_cell(0, lane, v);
        const std::uint32_t at = wg::swizzle(staging + wg::staging_offset(cell.row, cell.column, element_bytes),
                                             wg::Swizzle::B128);
        access.address[static_cast<std::size_t>(lane)] = at;
        for (int b = 0; b < 2 * element_bytes; ++b) bytes_written.insert(at + static_cast<std::uint32_t>(b));
      }
      if (element_bytes == 2) stores.add(access, fmt::format("values {} and {}", v, v + 1));
      extra += wavefronts(access) - ideal_wavefronts(access), ++count;
    }
    if (element_bytes == 2)
      stores.check();
    else
      CHECK(extra == 2 * count);  // two ways: every store 4 wavefronts where 2 would do, no worse
    // Every byte of the warp's 16 rows written once, within its chunks.
    CHECK(bytes_written.size() == static_cast<std::size_t>(16 * columns * element_bytes));
    CHECK(*bytes_written.rbegin() < staging + static_cast<std::uint32_t>(16 * columns * element_bytes));
  }
  // The 16-bit stores without the swizzle: the 8 rows of the phase on the same banks.
  Access plain{std::vector<long>(32), 4};
  for (int lane = 0; lane < 32; ++lane) {
    const mma::Cell cell = wg::accumulator_cell(0, lane, 0);
    plain.address[static_cast<std::size_t>(lane)] = wg::staging_offset(cell.row, cell.column, 2);
  }
  CHECK(wavefronts(plain) == 8);
}
