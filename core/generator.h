// Generator: seeded, counter-based random numbers (Philox 4x32-10, Salmon et al. 2011).
//
// Element i of a draw is a pure function of (seed, offset + i): no sequential state is carried
// from one number to the next. So the same seed gives the same numbers on any device and with any
// number of threads, and a GPU kernel can compute element i on its own. Each draw advances the
// offset past the blocks it used; (seed, offset) is the whole state, saved in checkpoints.
#pragma once

#include <array>
#include <cstdint>

namespace mg {

// Ten rounds of Philox on a 128-bit counter with a 64-bit key: four 32-bit random words
// (bit-identical to Random123's philox4x32_10, whose published answers the tests check).
std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> counter, std::array<std::uint32_t, 2> key);

// Word `word` of a draw whose first block is `first_block`, under `seed`: lane word % 4 of block
// first_block + word / 4, with the block number in the counter's low 64 bits and the seed as key.
std::uint32_t random_word(std::uint64_t seed, std::uint64_t first_block, std::uint64_t word);

class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) : seed_(seed) {}

  std::uint64_t seed() const { return seed_; }
  std::uint64_t offset() const { return offset_; }  // Philox blocks (4 words each) used so far
  void manual_seed(std::uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  void set_state(std::uint64_t seed, std::uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }

  // Reserves enough blocks for `words` 32-bit words; returns the first block's counter.
  // Word w of the draw is then random_word(seed(), first, w).
  std::uint64_t reserve(std::uint64_t words);

 private:
  std::uint64_t seed_;
  std::uint64_t offset_ = 0;
};

// The process-wide generator that factories use when none is passed (seed 0 until manual_seed).
Generator& default_generator();
void manual_seed(std::uint64_t seed);

}  // namespace mg
