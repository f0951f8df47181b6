// Device memory of the CUDA emulator: what cudaMalloc hands out, and what the race check and the
// runtime's checks ask of it. Internal to the emulator (emulator.h has the public part).
//
// Every allocation is its own heap block of exactly the bytes asked for (so AddressSanitizer reports
// a kernel that reads or writes past it), 256-byte aligned as cudaMalloc's are, and filled with 0xFF
// bytes (NaN in every floating dtype): memory nobody wrote reads as NaN. The registry knows each
// allocation's size and how much of it is in use (mark_in_use), which is what copies may touch and
// what the race check compares. The sizes together count against the device's memory limit
// (Settings::memory_limit_bytes): past it, allocate() fails as cudaMalloc does on a full GPU.
#pragma once

#include <cstddef>
#include <vector>

namespace mg::emu::memory {

// Null when the allocation would take the device past its memory limit, or the host has no memory.
void* allocate(std::size_t bytes);
// Frees an allocation; false when `pointer` is not one.
bool release(void* pointer);

// The bytes of every allocation together (cudaMemGetInfo's total minus its free).
std::size_t bytes_in_use();

// Whether [pointer, pointer + bytes) lies inside the in-use part of one allocation.
bool is_device_range(const void* pointer, std::size_t bytes);

// The in-use parts of the allocations that the 8-byte words of `bytes` point into: what a kernel
// whose arguments these are can reach. A word that only looks like a pointer adds a region, which
// costs a copy and hides nothing.
struct Region {
  unsigned char* begin;
  std::size_t bytes;
};
std::vector<Region> regions_referenced_by(const void* bytes, std::size_t count);

// AddressSanitizer: makes bytes unreadable or readable again (no-ops in builds without it).
void poison(void* begin, std::size_t bytes);
void unpoison(void* begin, std::size_t bytes);

}  // namespace mg::emu::memory
