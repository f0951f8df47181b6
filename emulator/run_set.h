// The threads of the emulated block that may run next, and the schedule's pick among them: the
// lowest (Order::Forward), the highest (Order::Reverse) or a seeded random one (Order::Random).
// Internal to the emulator's scheduler (machine.h); split_mix also mixes each launch's seed and
// shuffles its blocks (scheduler.cpp).
#pragma once

#include <array>
#include <bit>
#include <cstdint>

#ifdef __BMI2__
#include <immintrin.h>
#endif

#include "emulator/emulator.h"

namespace mg::emu::scheduler {

constexpr int kMaxThreads = 1024;  // in a block

inline std::uint64_t split_mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The position of the n-th (from 0) set bit of `word`, which has more than n.
inline int nth_set_bit(std::uint64_t word, int n) {
#ifdef __BMI2__
  return std::countr_zero(_pdep_u64(std::uint64_t{1} << n, word));
#else
  for (int i = 0; i < n; ++i) word &= word - 1;  // drop the lowest set bits
  return std::countr_zero(word);
#endif
}

// The threads that may run next, as a bit set: the schedule's pick is the lowest, the highest or a
// random one.
class RunSet {
 public:
  // Empty, for a block of `threads` threads.
  void reset(int threads) {
    words_.fill(0);
    used_words_ = (threads + 63) / 64;
    count_ = 0;
  }
  void insert(int t) {
    const std::uint64_t bit = std::uint64_t{1} << (t % 64);
    count_ += (words_[t / 64] & bit) == 0;
    words_[t / 64] |= bit;
  }
  void erase(int t) {
    const std::uint64_t bit = std::uint64_t{1} << (t % 64);
    count_ -= (words_[t / 64] & bit) != 0;
    words_[t / 64] &= ~bit;
  }
  int pick(Order order, std::uint64_t& random_state) const {
    if (count_ == 0) return -1;
    if (order == Order::Forward) {
      for (int w = 0; w < used_words_; ++w)
        if (words_[w]) return w * 64 + std::countr_zero(words_[w]);
    } else if (order == Order::Reverse) {
      for (int w = used_words_ - 1; w >= 0; --w)
        if (words_[w]) return w * 64 + 63 - std::countl_zero(words_[w]);
    } else {
      random_state = split_mix(random_state);
      int chosen = static_cast<int>(random_state % static_cast<std::uint64_t>(count_));
      for (int w = 0; w < used_words_; ++w) {
        const int here = std::popcount(words_[w]);
        if (chosen < here) return w * 64 + nth_set_bit(words_[w], chosen);
        chosen -= here;
      }
    }
    return -1;
  }

 private:
  std::array<std::uint64_t, kMaxThreads / 64> words_{};
  int used_words_ = 0, count_ = 0;
};

}  // namespace mg::emu::scheduler
