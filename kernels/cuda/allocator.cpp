#include "kernels/cuda/allocator.h"

#include <string>

#include "core/error.h"
#include "kernels/cuda/runtime.h"
#ifdef MG_CUDA_EMULATED
#include "emulator/emulator.h"
#endif

namespace mg::cuda {

namespace {

// A size for people: 512 bytes, 4.0 KiB, 12.5 MiB, 80.0 GiB.
std::string readable(std::size_t bytes) {
  const double value = static_cast<double>(bytes);
  if (bytes < (1u << 10)) return fmt::format("{} bytes", bytes);
  if (bytes < (1u << 20)) return fmt::format("{:.1f} KiB", value / (1u << 10));
  if (bytes < (1u << 30)) return fmt::format("{:.1f} MiB", value / (1u << 20));
  return fmt::format("{:.1f} GiB", value / (1u << 30));
}

// What the device says it has left, for the message of an allocation that failed.
std::string device_memory(Device device) {
  std::size_t free = 0, total = 0;
  const cudaError_t error = cudaMemGetInfo(&free, &total);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("the free memory of {} is unknown (cudaMemGetInfo: {})", device, cudaGetErrorString(error));
  }
  return fmt::format("{} has {} free of {} total", device, readable(free), readable(total));
}

}  // namespace

CachingCudaAllocator::Pool& CachingCudaAllocator::pool(int device_index) {
  if (pools_.size() <= static_cast<std::size_t>(device_index))
    pools_.resize(static_cast<std::size_t>(device_index) + 1);
  return pools_[static_cast<std::size_t>(device_index)];
}

void* CachingCudaAllocator::allocate_on(Device device, std::size_t nbytes) {
  if (nbytes == 0) return nullptr;
  check_device_available(device, "CUDA allocator");
  const std::size_t size = CachingCpuAllocator::size_class(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  Pool& p = pool(device.index);
  void* block = nullptr;
  auto it = p.free_blocks.find(size);
  if (it != p.free_blocks.end() && !it->second.empty()) {
    block = it->second.back();
    it->second.pop_back();
    ++p.stats.cache_hits;
  } else {
    DeviceGuard guard(device.index);
    cudaError_t error = cudaMalloc(&block, size);
    std::size_t cache_given_back = 0;
    if (error == cudaErrorMemoryAllocation) {
      // Out of memory: give the cached blocks of every class back and try once more, as PyTorch does.
      cudaGetLastError();
      for (auto& [cached_size, blocks] : p.free_blocks) {
        for (void* cached : blocks) cudaFree(cached);
        cache_given_back += cached_size * blocks.size();
        blocks.clear();
      }
      p.stats.reserved_bytes -= cache_given_back;
      error = cudaMalloc(&block, size);
    }
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      // Activations grow with the batch, and the 16-bit recipes store them in half the bytes.
      const std::string asked = size < 1024 ? readable(size) : fmt::format("{} bytes ({})", size, readable(size));
      throw Error(fmt::format("CUDA allocator: out of memory allocating {}: {}, and mixgrad's tensors hold {} ({} "
                              "reserved) after its cache of {} was given back and the allocation retried; use a "
                              "smaller --batch, or a --precision that needs less memory (mixed_bfloat16 or "
                              "float16_master keep activations in 16 bits)",
                              asked, device_memory(device), readable(p.stats.allocated_bytes),
                              readable(p.stats.reserved_bytes), readable(cache_given_back)));
    }
    MG_CUDA_CHECK(error);
    p.stats.reserved_bytes += size;
    ++p.stats.system_allocations;
  }
  p.stats.allocated_bytes += size;
  p.stats.peak_allocated_bytes = std::max(p.stats.peak_allocated_bytes, p.stats.allocated_bytes);
#ifdef MG_CUDA_EMULATED
  mg::emu::mark_in_use(block, nbytes);  // the size class's spare bytes: out of bounds to AddressSanitizer
#endif
  return block;
}

void CachingCudaAllocator::deallocate_on(Device device, void* ptr, std::size_t nbytes) {
  if (ptr == nullptr) return;
  const std::size_t size = CachingCpuAllocator::size_class(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  Pool& p = pool(device.index);
  p.free_blocks[size].push_back(ptr);
  p.stats.allocated_bytes -= size;
#ifdef MG_CUDA_EMULATED
  mg::emu::mark_cached(ptr);  // a kernel that still reads the freed tensor is reported
#endif
}

void* CachingCudaAllocator::allocate(std::size_t nbytes) {
  int current = 0;
  MG_CUDA_CHECK(cudaGetDevice(&current));
  return allocate_on(Device::cuda(current), nbytes);
}

void CachingCudaAllocator::deallocate(void* ptr, std::size_t nbytes) {
  int current = 0;
  MG_CUDA_CHECK(cudaGetDevice(&current));
  deallocate_on(Device::cuda(current), ptr, nbytes);
}

AllocatorStats CachingCudaAllocator::stats(int device_index) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<std::size_t>(device_index) < pools_.size() ? pools_[static_cast<std::size_t>(device_index)].stats
                                                                : AllocatorStats{};
}

void CachingCudaAllocator::reset_peak(int device_index) {
  std::lock_guard<std::mutex> lock(mutex_);
  Pool& p = pool(device_index);
  p.stats.peak_allocated_bytes = p.stats.allocated_bytes;
}

void CachingCudaAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t index = 0; index < pools_.size(); ++index) {
    DeviceGuard guard(static_cast<int>(index));
    for (auto& [size, blocks] : pools_[index].free_blocks) {
      for (void* block : blocks) MG_CUDA_CHECK(cudaFree(block));
      pools_[index].stats.reserved_bytes -= size * blocks.size();
      blocks.clear();
    }
  }
}

CachingCudaAllocator& allocator() {
  static auto* instance = new CachingCudaAllocator();
  return *instance;
}

}  // namespace mg::cuda
