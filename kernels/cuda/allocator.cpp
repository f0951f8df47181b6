#include "kernels/cuda/allocator.h"

#include "core/error.h"
#include "kernels/cuda/runtime.h"
#ifdef MG_CUDA_EMULATED
#include "emulator/emulator.h"
#endif

namespace mg::cuda {

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
    if (error == cudaErrorMemoryAllocation) {
      // Out of memory: give the cached blocks of every class back and try once more, as PyTorch does.
      cudaGetLastError();
      for (auto& [cached_size, blocks] : p.free_blocks) {
        for (void* cached : blocks) cudaFree(cached);
        p.stats.reserved_bytes -= cached_size * blocks.size();
        blocks.clear();
      }
      error = cudaMalloc(&block, size);
    }
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw Error(fmt::format("CUDA allocator: out of memory on {} allocating {} bytes ({} allocated by mixgrad, "
                              "{} reserved); use a smaller batch or model",
                              device, size, p.stats.allocated_bytes, p.stats.reserved_bytes));
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
