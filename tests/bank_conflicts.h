// Shared-memory bank conflicts and global sectors of one warp instruction, counted as the hardware
// serves them, for the layout suites of the GEMM's rungs (tests/test_mma_layout.cpp,
// tests/test_wgmma_layout.cpp): lanes in phases of 128 bytes (16-byte accesses a quarter-warp at a time,
// 8-byte a half-warp, 4-byte the whole warp); within a phase a bank (4 bytes wide, 32 of them) serves
// one word a wavefront, the same word to several lanes at once.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace mg::testing::banks {

// One warp instruction: each lane's byte address and width (every lane the same width).
struct Access {
  std::vector<long> address;  // 32, or 0 for a lane that does not take part
  int bytes;
};

// Wavefronts the shared-memory unit needs for it: lanes are served in phases of 128 bytes (16-byte
// accesses a quarter-warp at a time, 8-byte a half-warp, 4-byte the whole warp); within a phase a
// bank (4 bytes wide, 32 of them) serves one word a wavefront, the same word to several lanes at
// once.
inline int wavefronts(const Access& access) {
  const int lanes_per_phase = 128 / access.bytes;
  int total = 0;
  for (int first = 0; first < 32; first += lanes_per_phase) {
    std::map<int, std::set<long>> words;  // bank -> words
    for (int lane = first; lane < first + lanes_per_phase; ++lane)
      for (int byte = 0; byte < access.bytes; byte += 4) {
        const long word = (access.address[static_cast<std::size_t>(lane)] + byte) / 4;
        words[static_cast<int>(word % 32)].insert(word);
      }
    std::size_t most = 1;
    for (const auto& [bank, in_bank] : words) most = std::max(most, in_bank.size());
    total += static_cast<int>(most);
  }
  return total;
}

// The ideal: one wavefront per 128 bytes moved.
inline int ideal_wavefronts(const Access& access) { return 32 * access.bytes / 128; }

// 32-byte sectors of global memory an instruction touches, and whether it uses each wholly.
inline bool whole_sectors(const Access& access) {
  std::map<long, int> bytes_in;  // sector -> bytes used
  for (long a : access.address)
    for (int byte = 0; byte < access.bytes; ++byte) ++bytes_in[(a + byte) / 32];
  return std::all_of(bytes_in.begin(), bytes_in.end(), [](const auto& s) { return s.second == 32; });
}

// Counts conflicts over many accesses: reports the first conflicted one.
struct ConflictCount {
  explicit ConflictCount(std::string what_) : what(std::move(what_)) {}
  std::string what;
  int accesses = 0, excess = 0;
  std::string first_bad;
  void add(const Access& access, const std::string& where) {
    ++accesses;
    const int extra = wavefronts(access) - ideal_wavefronts(access);
    if (extra > 0 && first_bad.empty()) first_bad = where;
    excess += extra;
  }
  void check() const {
    INFO(what << ": " << accesses << " warp accesses, " << excess
              << " extra wavefronts; first conflicted: " << first_bad);
    CHECK(accesses > 0);
    CHECK(excess == 0);
  }
};

}  // namespace mg::testing::banks
