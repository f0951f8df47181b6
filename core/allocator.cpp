#include "core/allocator.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <new>

#include "core/device_ops.h"
#include "core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define MG_POISON(ptr, size) ASAN_POISON_MEMORY_REGION(ptr, size)
#define MG_UNPOISON(ptr, size) ASAN_UNPOISON_MEMORY_REGION(ptr, size)
#else
#define MG_POISON(ptr, size) ((void)(ptr), (void)(size))
#define MG_UNPOISON(ptr, size) ((void)(ptr), (void)(size))
#endif

namespace mg {

namespace {
constexpr std::size_t kAlignment = 64;  // a cache line, and a full AVX-512 vector
constexpr std::size_t kSmallestClass = 256;
constexpr std::size_t kLargestRequest = std::size_t{1} << 62;
}  // namespace

// Under AddressSanitizer a cached block is poisoned while it waits on a free list, and only the
// requested bytes of a block are unpoisoned: reading a freed tensor, or past a tensor's end into
// its size-class slack, is reported as it would be without the cache.

std::size_t CachingCpuAllocator::size_class(std::size_t nbytes) {
  MG_CHECK(nbytes <= kLargestRequest, "CPU allocator: a request for {} bytes is beyond any machine", nbytes);
  if (nbytes <= kSmallestClass) return kSmallestClass;
  // Four classes per power of two: 1024, 1280, 1536, 1792, 2048, ...
  std::size_t power = std::bit_floor(nbytes);
  std::size_t step = power / 4;
  return (nbytes + step - 1) / step * step;
}

CachingCpuAllocator::~CachingCpuAllocator() { empty_cache(); }

void* CachingCpuAllocator::allocate(std::size_t nbytes) {
  if (nbytes == 0) return nullptr;
  std::size_t size = size_class(nbytes);
  {
    std::lock_guard lock(mutex_);
    stats_.allocated_bytes += size;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    auto it = free_blocks_.find(size);
    if (it != free_blocks_.end() && !it->second.empty()) {
      void* ptr = it->second.back();
      it->second.pop_back();
      ++stats_.cache_hits;
      MG_UNPOISON(ptr, nbytes);
      return ptr;
    }
    ++stats_.system_allocations;
    stats_.reserved_bytes += size;
  }
  void* ptr = std::aligned_alloc(kAlignment, size);  // size is a multiple of 64 by construction
  std::size_t cache_freed = 0;
  if (ptr == nullptr) {
    // Free what the cache holds and try once more before giving up.
    {
      std::lock_guard lock(mutex_);
      cache_freed = stats_.reserved_bytes - stats_.allocated_bytes;  // both count this request already
    }
    empty_cache();
    ptr = std::aligned_alloc(kAlignment, size);
  }
  if (ptr == nullptr) {
    std::lock_guard lock(mutex_);
    stats_.allocated_bytes -= size;
    stats_.reserved_bytes -= size;
    throw Error(fmt::format("CPU allocator: out of memory allocating {} bytes, even after freeing its cache ({} "
                            "bytes) and retrying; tensors hold {} bytes; use a smaller --batch, or a --precision "
                            "that needs less memory (mixed_bfloat16 or float16_master keep activations in 16 bits)",
                            size, cache_freed, stats_.allocated_bytes));
  }
  MG_POISON(static_cast<char*>(ptr) + nbytes, size - nbytes);
  return ptr;
}

void CachingCpuAllocator::deallocate(void* ptr, std::size_t nbytes) {
  if (ptr == nullptr) return;
  std::size_t size = size_class(nbytes);
  MG_POISON(ptr, size);
  std::lock_guard lock(mutex_);
  stats_.allocated_bytes -= size;
  free_blocks_[size].push_back(ptr);
}

AllocatorStats CachingCpuAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingCpuAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
}

void CachingCpuAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  for (auto& [size, blocks] : free_blocks_) {
    for (void* ptr : blocks) {
      MG_UNPOISON(ptr, size);
      std::free(ptr);
    }
    stats_.reserved_bytes -= size * blocks.size();
  }
  free_blocks_.clear();
}

CachingCpuAllocator& cpu_allocator() {
  // Never destroyed: tensors held in static objects may be freed after main() returns.
  static auto* allocator = new CachingCpuAllocator();
  return *allocator;
}

namespace {
Allocator* cuda_allocator_override = nullptr;  // set_allocator's; null: the backend's own
}  // namespace

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  if (cuda_allocator_override != nullptr) return *cuda_allocator_override;
  Allocator* backend = cuda_backend().allocator;  // the first use of a CUDA device sets the backend up
  MG_CHECK(backend != nullptr,
           "allocate on {}: no CUDA allocator: this build has no CUDA backend; create "
           "tensors on the CPU, or build with -DMG_CUDA=ON on a machine with a GPU",
           device);
  return *backend;
}

void set_allocator(DeviceType type, Allocator* allocator) {
  MG_CHECK(type == DeviceType::CUDA, "set_allocator: the CPU allocator cannot be replaced");
  cuda_allocator_override = allocator;
}

}  // namespace mg
