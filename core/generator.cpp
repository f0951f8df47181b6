#include "core/generator.h"

#include "core/philox.h"

namespace mg {

std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> counter, std::array<std::uint32_t, 2> key) {
  const philox::Block out = philox::rounds({{counter[0], counter[1], counter[2], counter[3]}}, key[0], key[1]);
  return {out.word[0], out.word[1], out.word[2], out.word[3]};
}

std::uint32_t random_word(std::uint64_t seed, std::uint64_t first_block, std::uint64_t word) {
  return philox::random_word(seed, first_block, word);
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
