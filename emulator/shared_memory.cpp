#include "emulator/shared_memory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "emulator/memory.h"

namespace mg::emu {

namespace {

constexpr std::size_t kArenaBytes = 2 * SharedMemory::kStaticLimit;
constexpr std::size_t kRedzone = 32;  // bytes between two variables
constexpr unsigned char kPoisonByte = 0xFF;  // NaN in f32, f16 and bf16

unsigned char* aligned_bytes(std::size_t alignment, std::size_t bytes) {
  void* memory = nullptr;
  if (posix_memalign(&memory, alignment, bytes == 0 ? 1 : bytes) != 0) throw std::bad_alloc();
  return static_cast<unsigned char*>(memory);
}

}  // namespace

void SharedMemory::Free::operator()(void* p) const { std::free(p); }

void SharedMemory::start_launch(std::size_t dynamic_bytes) {
  if (!arena_) arena_.reset(aligned_bytes(256, kArenaBytes));
  // 1024-byte aligned: its window addresses (emulator.h) start at 0, and host pointers that line up
  // with them keep a kernel's own alignment arithmetic honest either way.
  dynamic_.reset(aligned_bytes(1024, dynamic_bytes));
  dynamic_bytes_ = dynamic_bytes;
}

void SharedMemory::start_block() {
  variables_.clear();
  arena_used_ = 0;
  // Unreadable to AddressSanitizer until a variable is declared there (variable() below).
  memory::unpoison(arena_.get(), kArenaBytes);
  memory::poison(arena_.get(), kArenaBytes);
  std::memset(dynamic_.get(), kPoisonByte, dynamic_bytes_);
}

void* SharedMemory::variable(const void* key, std::size_t bytes, std::size_t alignment) {
  for (const Variable& v : variables_)
    if (v.key == key) return v.address;
  const std::size_t align = std::max<std::size_t>(alignment, 16);
  const std::size_t offset = (arena_used_ + align - 1) / align * align;
  if (offset + bytes > kStaticLimit) return nullptr;
  unsigned char* address = arena_.get() + offset;
  memory::unpoison(address, bytes);
  std::memset(address, kPoisonByte, bytes);
  arena_used_ = offset + bytes + kRedzone;  // the gap stays poisoned
  variables_.push_back({key, address});
  return address;
}

bool SharedMemory::contains(const void* address, std::size_t bytes) const {
  const auto* p = static_cast<const unsigned char*>(address);
  const unsigned char* arena = arena_.get();
  const unsigned char* dynamic = dynamic_.get();
  return (p >= arena && p + bytes <= arena + kStaticLimit) || (p >= dynamic && p + bytes <= dynamic + dynamic_bytes_);
}

}  // namespace mg::emu
