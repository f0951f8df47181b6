// Allocators: where tensor memory comes from.
//
// Every Storage takes its memory from allocator_for(its device). The CPU's allocator caches: a
// freed block goes onto a free list for its size class and the next request of that class reuses
// it. On this project's machines a freshly mapped page costs ~10 us to touch the first time, so a
// training step that mallocs and frees its activations would spend more time faulting pages than
// computing; with the cache, every step after the first reuses warm memory and faults none.
//
// A CUDA device's allocator is the CUDA backend's caching one, set up on the device's first use
// (core/device_ops.h); set_allocator puts a stand-in in its place (tests do).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "core/device.h"

namespace mg {

struct AllocatorStats {
  std::size_t allocated_bytes = 0;  // held by live storages (size-class rounded)
  std::size_t reserved_bytes = 0;  // allocated plus cached, i.e. taken from the system
  std::size_t peak_allocated_bytes = 0;  // the largest allocated_bytes seen
  std::size_t cache_hits = 0;  // requests served from the cache
  std::size_t system_allocations = 0;  // requests that had to ask the system
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns at least `nbytes` bytes, 64-byte aligned; nbytes == 0 returns nullptr.
  virtual void* allocate(std::size_t nbytes) = 0;
  // Gives back a block from allocate() with the same nbytes.
  virtual void deallocate(void* ptr, std::size_t nbytes) = 0;
  virtual Device device() const = 0;
  // What Storage calls: the same, for one device of the allocator's type. One CUDA allocator
  // serves every GPU and needs the index; a CPU allocator ignores it.
  virtual void* allocate_on(Device /*device*/, std::size_t nbytes) { return allocate(nbytes); }
  virtual void deallocate_on(Device /*device*/, void* ptr, std::size_t nbytes) { deallocate(ptr, nbytes); }
  // What it has handed out on one device, and a fresh peak there: how a caller measures the memory
  // of some work on any device through allocator_for(device). An allocator without statistics
  // reports zeros.
  virtual AllocatorStats stats_on(Device /*device*/) const { return {}; }
  virtual void reset_peak_on(Device /*device*/) {}
};

// A thread-safe caching allocator for host memory. Sizes are rounded up to a size class (four
// classes per power of two, so at most 25% is wasted); blocks are never returned to the system
// until empty_cache().
class CachingCpuAllocator final : public Allocator {
 public:
  ~CachingCpuAllocator() override;
  void* allocate(std::size_t nbytes) override;
  void deallocate(void* ptr, std::size_t nbytes) override;
  Device device() const override { return Device::cpu(); }

  AllocatorStats stats() const;
  void reset_peak();
  AllocatorStats stats_on(Device) const override { return stats(); }
  void reset_peak_on(Device) override { reset_peak(); }
  void empty_cache();  // frees every cached (unused) block

  static std::size_t size_class(std::size_t nbytes);

 private:
  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_blocks_;  // size class -> cached blocks
  AllocatorStats stats_;
};

CachingCpuAllocator& cpu_allocator();

// The allocator for a device: the CPU's, or for a CUDA device the one set_allocator put in place,
// else the CUDA backend's; an mg::Error for a CUDA device in a build without the CUDA backend.
Allocator& allocator_for(Device device);
// Puts `allocator` in place of the CUDA backend's for DeviceType::CUDA (nullptr gives the backend's
// back; the CPU's cannot be replaced). It must outlive every storage it hands out.
void set_allocator(DeviceType type, Allocator* allocator);

}  // namespace mg
