// The race check of the CUDA emulator (emulator.h): a launch runs once per schedule, each time
// from the same device memory, and must leave the same bytes every time. Internal to the emulator.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "emulator/memory.h"

namespace mg::emu {

class RaceCheck {
 public:
  // Saves the device memory the kernel's arguments (`params`, as bytes) point into: what it can write.
  RaceCheck(const void* params, std::size_t params_bytes);

  // Puts the saved memory back, for the next schedule's run.
  void restore() const;
  // Keeps what the first run left, to compare the others with.
  void keep_first_result();
  // What differs from the first run's result (the allocation, the first byte that differs and the
  // bytes around it), or nothing.
  std::optional<std::string> difference() const;

 private:
  std::vector<memory::Region> regions_;
  std::vector<std::vector<unsigned char>> before_, first_result_;
};

}  // namespace mg::emu
