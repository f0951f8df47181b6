#include "emulator/race_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace mg::emu {

namespace {

std::vector<std::vector<unsigned char>> copy_of(const std::vector<memory::Region>& regions) {
  std::vector<std::vector<unsigned char>> copy;
  for (const memory::Region& r : regions) copy.emplace_back(r.begin, r.begin + r.bytes);
  return copy;
}

// The 4 bytes at `at` (fewer at the end), as hex and as an f32.
std::string word_at(const unsigned char* bytes, std::size_t size, std::size_t at) {
  std::uint32_t word = 0;
  std::memcpy(&word, bytes + at, std::min<std::size_t>(4, size - at));
  float value = 0;
  std::memcpy(&value, &word, sizeof value);
  return fmt::format("{:#010x} ({:g} as f32)", word, value);
}

}  // namespace

RaceCheck::RaceCheck(const void* params, std::size_t params_bytes)
    : regions_(memory::regions_referenced_by(params, params_bytes)), before_(copy_of(regions_)) {}

void RaceCheck::restore() const {
  for (std::size_t i = 0; i < regions_.size(); ++i)
    std::memcpy(regions_[i].begin, before_[i].data(), regions_[i].bytes);
}

void RaceCheck::keep_first_result() { first_result_ = copy_of(regions_); }

std::optional<std::string> RaceCheck::difference() const {
  for (std::size_t i = 0; i < regions_.size(); ++i) {
    const unsigned char* got = regions_[i].begin;
    const unsigned char* expected = first_result_[i].data();
    const std::size_t size = regions_[i].bytes;
    if (std::memcmp(got, expected, size) == 0) continue;
    std::size_t at = 0;
    while (got[at] == expected[at]) ++at;
    const std::size_t word = at / 4 * 4;
    return fmt::format("the device allocation at {} ({} bytes) differs first at byte {} (element {} of f32, {} of "
                       "f16/bf16): the 4 bytes from {} are {} against {}",
                       static_cast<const void*>(got), size, at, at / 4, at / 2, word, word_at(expected, size, word),
                       word_at(got, size, word));
  }
  return std::nullopt;
}

}  // namespace mg::emu
