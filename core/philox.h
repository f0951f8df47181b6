// Philox 4x32-10 (Salmon et al. 2011), the counter-based generator behind mg::Generator, written
// once for the host and the GPU: a CUDA thread computes random word i on its own, and gets the very
// bits the CPU gets, so dropout masks and random tensors do not depend on the device.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace mg::philox {

struct Block {
  std::uint32_t word[4];
};

// Ten rounds on the 128-bit counter (c0..c3) under the 64-bit key (k0, k1).
MG_HOST_DEVICE inline Block rounds(Block counter, std::uint32_t k0, std::uint32_t k1) {
  // Constants from the Philox paper: two multipliers and the Weyl increments of the key.
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  std::uint32_t c0 = counter.word[0], c1 = counter.word[1], c2 = counter.word[2], c3 = counter.word[3];
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c2;
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

// Word `word` of a draw whose first block is `first_block`, under `seed`: lane word % 4 of block
// first_block + word / 4, with the block number in the counter's low 64 bits and the seed as key.
MG_HOST_DEVICE inline std::uint32_t random_word(std::uint64_t seed, std::uint64_t first_block, std::uint64_t word) {
  const std::uint64_t block = first_block + word / 4;
  const Block counter{{static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32), 0u, 0u}};
  return rounds(counter, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)).word[word % 4];
}

// 24 random bits as a float in [0, 1): every value is exactly representable in f32.
MG_HOST_DEVICE inline float unit_float(std::uint32_t word) { return static_cast<float>(word >> 8) * 0x1p-24f; }

}  // namespace mg::philox
