// The caching CUDA allocator: cudaMalloc only when a size class has no free block.
//
// Like the CPU's (core/allocator.h): sizes round up to the same size classes (four per power of
// two), a freed block goes onto its class's free list, and the next request of that class reuses
// it, so a training step in steady state never calls cudaMalloc or cudaFree (both synchronise the
// device). Blocks are reused without events because all of mixgrad's work on a device runs on one
// stream (kernels/cuda/runtime.h): work queued after the free runs after the work that used it.
// Statistics are per device; empty_cache() gives the cached blocks back to the driver.
// Out of memory: when cudaMalloc fails, the device's cached blocks (of every size class) are given
// back and cudaMalloc is tried once more, as PyTorch does; when that fails too, an mg::Error names
// the size asked for, mixgrad's allocated and reserved bytes, the device's free and total memory
// (cudaMemGetInfo) and what to do (a smaller batch, a precision that needs less memory). Nothing
// is allocated then, and a train::Trainer step that runs into it leaves the process usable.
// Handed to core by register_cuda_backend (kernels/dispatch.cpp) on a CUDA device's first use.
// Tests: build/tests/test_cuda_runtime (skips without a GPU).
#pragma once

#include <map>
#include <mutex>
#include <vector>

#include "core/allocator.h"

namespace mg::cuda {

class CachingCudaAllocator final : public Allocator {
 public:
  void* allocate(std::size_t nbytes) override;  // on the current device
  void deallocate(void* ptr, std::size_t nbytes) override;
  void* allocate_on(Device device, std::size_t nbytes) override;
  void deallocate_on(Device device, void* ptr, std::size_t nbytes) override;
  Device device() const override { return Device::cuda(); }

  AllocatorStats stats(int device_index) const;
  void reset_peak(int device_index);
  AllocatorStats stats_on(Device device) const override { return stats(device.index); }
  void reset_peak_on(Device device) override { reset_peak(device.index); }
  void empty_cache();  // cudaFree of every cached (unused) block, on every device

 private:
  struct Pool {
    std::map<std::size_t, std::vector<void*>> free_blocks;  // size class -> cached blocks
    AllocatorStats stats;
  };
  Pool& pool(int device_index);

  mutable std::mutex mutex_;
  std::vector<Pool> pools_;  // by device index
};

// The process's CUDA allocator (never destroyed: storages may be freed after main() returns).
CachingCudaAllocator& allocator();

}  // namespace mg::cuda
