#include "core/generator.h"

namespace mg {

std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> counter, std::array<std::uint32_t, 2> key) {
  // Constants from the Philox paper: two multipliers and the Weyl increments of the key.
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  auto [c0, c1, c2, c3] = counter;
  auto [k0, k1] = key;
  for (int round = 0; round < 10; ++round) {
    std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c0;
    std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c2;
    std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

std::uint32_t random_word(std::uint64_t seed, std::uint64_t first_block, std::uint64_t word) {
  const std::uint64_t block = first_block + word / 4;
  auto low = [](std::uint64_t v) { return static_cast<std::uint32_t>(v); };
  auto high = [](std::uint64_t v) { return static_cast<std::uint32_t>(v >> 32); };
  return philox4x32({low(block), high(block), 0, 0}, {low(seed), high(seed)})[word % 4];
}

std::uint64_t Generator::reserve(std::uint64_t words) {
  std::uint64_t first = offset_;
  offset_ += (words + 3) / 4;
  return first;
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(std::uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace mg
