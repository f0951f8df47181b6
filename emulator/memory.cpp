#include "emulator/memory.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "core/error.h"
#include "emulator/emulator.h"
#include "emulator/sanitizer.h"

namespace mg::emu::memory {

namespace {

constexpr unsigned char kPoisonByte = 0xFF;  // f32 0xFFFFFFFF, f16 and bf16 0xFFFF: NaN

struct Allocation {
  std::size_t size;
  std::size_t used;
};

struct Registry {
  std::mutex mutex;
  std::map<std::uintptr_t, Allocation> allocations;  // by start address
  std::size_t bytes_in_use = 0;  // the sizes of the allocations: what counts against the memory limit

  // The allocation containing `address`, or end().
  std::map<std::uintptr_t, Allocation>::iterator find(std::uintptr_t address) {
    auto it = allocations.upper_bound(address);
    if (it == allocations.begin()) return allocations.end();
    --it;
    return address < it->first + it->second.size ? it : allocations.end();
  }
};

Registry& registry() {
  static auto* instance = new Registry();  // never destroyed: storages are freed after main() returns
  return *instance;
}

}  // namespace

void poison([[maybe_unused]] void* begin, [[maybe_unused]] std::size_t bytes) {
#ifdef MG_EMU_ASAN
  ASAN_POISON_MEMORY_REGION(begin, bytes);
#endif
}

void unpoison([[maybe_unused]] void* begin, [[maybe_unused]] std::size_t bytes) {
#ifdef MG_EMU_ASAN
  ASAN_UNPOISON_MEMORY_REGION(begin, bytes);
#endif
}

void* allocate(std::size_t bytes) {
  Registry& r = registry();
  {
    // The device's memory is a count, not the host's: the limit is reached (and tested) long before
    // the heap would be. The bytes are taken before the heap is asked, so that two threads cannot
    // both fit in the last free bytes.
    std::lock_guard lock(r.mutex);
    const std::size_t limit = settings().memory_limit_bytes;
    if (r.bytes_in_use > limit || bytes > limit - r.bytes_in_use) return nullptr;
    r.bytes_in_use += bytes;
  }
  void* pointer = nullptr;
  if (posix_memalign(&pointer, 256, bytes == 0 ? 1 : bytes) != 0) {
    std::lock_guard lock(r.mutex);
    r.bytes_in_use -= bytes;
    return nullptr;
  }
  std::memset(pointer, kPoisonByte, bytes);
  std::lock_guard lock(r.mutex);
  r.allocations[reinterpret_cast<std::uintptr_t>(pointer)] = {bytes, bytes};
  return pointer;
}

bool release(void* pointer) {
  Registry& r = registry();
  std::size_t size = 0;
  {
    std::lock_guard lock(r.mutex);
    auto it = r.allocations.find(reinterpret_cast<std::uintptr_t>(pointer));
    if (it == r.allocations.end()) return false;
    size = it->second.size;
    r.allocations.erase(it);
    r.bytes_in_use -= size;
  }
  unpoison(pointer, size);
  std::free(pointer);
  return true;
}

std::size_t bytes_in_use() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.bytes_in_use;
}

bool is_device_range(const void* pointer, std::size_t bytes) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  auto it = r.find(address);
  return it != r.allocations.end() && address + bytes <= it->first + it->second.used;
}

std::vector<Region> regions_referenced_by(const void* bytes, std::size_t count) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<Region> regions;
  const auto* words = static_cast<const unsigned char*>(bytes);
  for (std::size_t offset = 0; offset + sizeof(std::uintptr_t) <= count; offset += sizeof(std::uintptr_t)) {
    std::uintptr_t word = 0;
    std::memcpy(&word, words + offset, sizeof word);
    auto it = r.find(word);
    if (it == r.allocations.end() || it->second.used == 0) continue;
    auto* begin = reinterpret_cast<unsigned char*>(it->first);
    bool seen = false;
    for (const Region& region : regions) seen = seen || region.begin == begin;
    if (!seen) regions.push_back({begin, it->second.used});
  }
  return regions;
}

}  // namespace mg::emu::memory

namespace mg::emu {

void mark_in_use(void* block, std::size_t used) {
  memory::Registry& r = memory::registry();
  std::size_t size = 0;
  {
    std::lock_guard lock(r.mutex);
    auto it = r.allocations.find(reinterpret_cast<std::uintptr_t>(block));
    MG_CHECK(it != r.allocations.end() && used <= it->second.size,
             "CUDA emulator: mark_in_use of {} bytes at {}, which is not a device allocation that large", used, block);
    size = it->second.size;
    it->second.used = used;
  }
  // All of it NaN, the spare bytes too: an edge that reads past the tensor reads NaN.
  memory::unpoison(block, size);
  std::memset(block, memory::kPoisonByte, size);
  memory::poison(static_cast<char*>(block) + used, size - used);
}

void mark_cached(void* block) {
  memory::Registry& r = memory::registry();
  std::size_t size = 0;
  {
    std::lock_guard lock(r.mutex);
    auto it = r.allocations.find(reinterpret_cast<std::uintptr_t>(block));
    MG_CHECK(it != r.allocations.end(), "CUDA emulator: mark_cached of {}, which is not a device allocation", block);
    size = it->second.size;
    it->second.used = 0;
  }
  memory::poison(block, size);
}

}  // namespace mg::emu
