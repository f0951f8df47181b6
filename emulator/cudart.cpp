// The CUDA runtime API as the emulator provides it: the functions mixgrad's CUDA backend calls
// (kernels/cuda/runtime.cpp, allocator.cpp, transfer.cpp and the kernels' host code), declared by the
// toolkit's own cuda_runtime_api.h and defined here instead of in libcudart.
//
// One device, shaped like an H100 SXM where a kernel asks (compute capability 9.0, 132 multiprocessors
// unless MG_EMULATOR_COMPUTE_CAPABILITY or MG_EMULATOR_MULTIPROCESSORS say otherwise, 48 KiB of
// dynamic shared memory without the opt-in, 227 KiB with it, 228 KiB a multiprocessor; the shared
// memory follows the compute capability: 99 KiB with the opt-in on an emulated Ada GPU).
// Everything runs at once, in the order it is called: a kernel is done when its launch returns, so
// streams and events only need to exist. Memory is the host's (memory.cpp), counted against the
// device's memory limit (MG_EMULATOR_MEMORY_LIMIT, 80 GiB by default): cudaMalloc past it fails with
// cudaErrorMemoryAllocation, and cudaMemGetInfo reports the limit as the total. Copies check that the
// device side of each is device memory in use, and fail as CUDA would (cudaErrorInvalidValue) when it
// is not.
// Functions the backend does not call are not here: a new call is a link error that says which.
#include <chrono>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "emulator/memory.h"
#include "emulator/runtime_state.h"
#include "emulator/tensor_map.h"

namespace mg::emu::runtime {

namespace {

constexpr int kDefaultDynamicShared = 48 << 10;
// Shared memory, by the compute capability the device reports (NVIDIA's tables): the opt-in limit of
// a block and a multiprocessor's whole, 227 and 228 KiB on an H100 (and sm_100), 163 and 164 KiB on an
// A100 (sm_80, sm_87), 99 and 100 KiB on Ampere's and Ada's other GPUs (sm_86, sm_89) and sm_120.
int max_dynamic_shared() {
  switch (settings().compute_capability) {
    case 80:
    case 87:
      return 163 << 10;
    case 86:
    case 89:
    case 120:
      return 99 << 10;
    default:
      return 227 << 10;
  }
}
int shared_per_multiprocessor() { return max_dynamic_shared() + (1 << 10); }
constexpr int kMaxThreadsPerMultiprocessor = 2048;
constexpr int kMaxBlocksPerMultiprocessor = 32;

thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device = 0;

cudaError_t failed(cudaError_t error) {
  last_error = error;
  return error;
}

// cudaFuncAttributeMaxDynamicSharedMemorySize per kernel function.
struct Attributes {
  std::mutex mutex;
  std::unordered_map<const void*, int> max_dynamic_shared;
};
Attributes& attributes() {
  static auto* instance = new Attributes();
  return *instance;
}

struct Stream {};  // work runs when it is queued: a stream is only a handle, one for all
// When it was recorded: every launch and copy before it is done by then, so the host's clock is
// the device's (an emulated kernel's time, not a GPU's).
struct Event {
  std::chrono::steady_clock::time_point recorded{};
};

bool valid_device(int device) { return device == 0; }

// Whether the device side of a copy is device memory in use, for its direction.
bool copy_ends_valid(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  if (kind == cudaMemcpyHostToHost || kind == cudaMemcpyDefault) return true;
  return (!src_device || memory::is_device_range(src, bytes)) && (!dst_device || memory::is_device_range(dst, bytes));
}

}  // namespace

cudaError_t check_launch(const KernelSite& site, dim3 grid, dim3 block, std::size_t dynamic_shared_bytes) {
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
      threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 ||
      grid.z > 65535)
    return failed(cudaErrorInvalidConfiguration);
  if (dynamic_shared_bytes > static_cast<std::size_t>(kDefaultDynamicShared)) {
    int allowed = kDefaultDynamicShared;
    {
      Attributes& a = attributes();
      std::lock_guard lock(a.mutex);
      auto it = a.max_dynamic_shared.find(site.address);
      if (site.address != nullptr && it != a.max_dynamic_shared.end()) allowed = it->second;
    }
    if (dynamic_shared_bytes > static_cast<std::size_t>(allowed)) return failed(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

}  // namespace mg::emu::runtime

using namespace mg::emu;
using mg::emu::runtime::failed;

extern "C" {

cudaError_t cudaGetLastError() { return std::exchange(runtime::last_error, cudaSuccess); }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument (in the emulator: a copy's device side is not device memory in use, or a value is out "
             "of range)";
    case cudaErrorMemoryAllocation:
      return "out of memory (in the emulator: past the device's memory limit, MG_EMULATOR_MEMORY_LIMIT)";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    default:
      return "unknown error";
  }
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = runtime::current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (!runtime::valid_device(device)) return failed(cudaErrorInvalidDevice);
  runtime::current_device = device;
  return cudaSuccess;
}

// The device's name and what cudaDeviceGetAttribute reports; every other field 0 (error messages
// read the name).
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  if (!runtime::valid_device(device)) return failed(cudaErrorInvalidDevice);
  *properties = cudaDeviceProp{};
  const std::string name = fmt::format("CUDA emulator (H100-shaped, sm_{})", settings().compute_capability);
  std::memcpy(properties->name, name.c_str(), std::min(name.size() + 1, sizeof properties->name));
  properties->major = settings().compute_capability / 10;
  properties->minor = settings().compute_capability % 10;
  properties->multiProcessorCount = settings().multiprocessors;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (!runtime::valid_device(device)) return failed(cudaErrorInvalidDevice);
  switch (attribute) {
    case cudaDevAttrMultiProcessorCount:  // 132 unless MG_EMULATOR_MULTIPROCESSORS says otherwise
      *value = settings().multiprocessors;
      return cudaSuccess;
    case cudaDevAttrMaxPitch:
      *value = 2147483647;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = runtime::max_dynamic_shared();
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = runtime::shared_per_multiprocessor();
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:  // 9.0 unless MG_EMULATOR_COMPUTE_CAPABILITY says otherwise
      *value = settings().compute_capability / 10;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = settings().compute_capability % 10;
      return cudaSuccess;
    default:
      return failed(cudaErrorInvalidValue);
  }
}

cudaError_t cudaFuncSetAttribute(const void* function, cudaFuncAttribute attribute, int value) {
  if (attribute == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;  // a hint
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > runtime::max_dynamic_shared())
    return failed(cudaErrorInvalidValue);
  runtime::Attributes& a = runtime::attributes();
  std::lock_guard lock(a.mutex);
  a.max_dynamic_shared[function] = value;
  return cudaSuccess;
}

// Every kernel has an image for the emulated device (the run-time pick of the sm_90a rung asks).
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, const void* function) {
  if (attributes == nullptr || function == nullptr) return failed(cudaErrorInvalidValue);
  *attributes = cudaFuncAttributes{};
  attributes->maxThreadsPerBlock = 1024;
  attributes->ptxVersion = attributes->binaryVersion = settings().compute_capability;
  return cudaSuccess;
}

// The driver's functions a kernel's host code fetches instead of linking libcuda: cuTensorMapEncodeTiled
// only (tensor_map.h), at any version from 12.0 on.
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function, unsigned version, unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  if (symbol == nullptr || function == nullptr) return failed(cudaErrorInvalidValue);
  const bool known = std::strcmp(symbol, "cuTensorMapEncodeTiled") == 0 && version >= 12000;
  *function = known ? reinterpret_cast<void*>(&encode_tensor_map_tiled) : nullptr;
  if (status != nullptr) *status = known ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void*, int block_size,
                                                                   size_t dynamic_shared_bytes, unsigned) {
  if (block_size <= 0) return failed(cudaErrorInvalidValue);
  int fit = std::min(runtime::kMaxThreadsPerMultiprocessor / block_size, runtime::kMaxBlocksPerMultiprocessor);
  if (dynamic_shared_bytes > 0)
    fit = std::min(fit, static_cast<int>(static_cast<std::size_t>(runtime::shared_per_multiprocessor()) /
                                         dynamic_shared_bytes));
  *blocks = fit;
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  static runtime::Stream the_stream;  // every stream is the same: work runs when it is queued
  *stream = reinterpret_cast<cudaStream_t>(&the_stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = reinterpret_cast<cudaEvent_t>(new runtime::Event());
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<runtime::Event*>(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  reinterpret_cast<runtime::Event*>(event)->recorded = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  const auto elapsed = reinterpret_cast<runtime::Event*>(end)->recorded -
                       reinterpret_cast<runtime::Event*>(start)->recorded;
  *ms = std::chrono::duration<float, std::milli>(elapsed).count();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }  // every launch and copy is done when it returns

cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  *pointer = memory::allocate(bytes);
  return *pointer == nullptr ? failed(cudaErrorMemoryAllocation) : cudaSuccess;
}

// The limit as the total and what cudaMalloc has handed out subtracted from it. A real device
// counts its context and the driver's own memory as taken; here free starts at the total.
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  const std::size_t limit = settings().memory_limit_bytes, in_use = memory::bytes_in_use();
  *total = limit;
  *free = in_use < limit ? limit - in_use : 0;  // a test may lower the limit below what is allocated
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  return memory::release(pointer) ? cudaSuccess : failed(cudaErrorInvalidValue);
}

cudaError_t cudaMallocHost(void** pointer, size_t bytes) {
  *pointer = std::malloc(bytes == 0 ? 1 : bytes);
  return *pointer == nullptr ? failed(cudaErrorMemoryAllocation) : cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  if (bytes == 0) return cudaSuccess;
  if (!runtime::copy_ends_valid(dst, src, bytes, kind)) return failed(cudaErrorInvalidValue);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t) {
  if (!runtime::valid_device(dst_device) || !runtime::valid_device(src_device)) return failed(cudaErrorInvalidDevice);
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr);
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                              size_t height, cudaMemcpyKind kind, cudaStream_t) {
  if (width > dst_pitch || width > src_pitch) return failed(cudaErrorInvalidValue);
  if (height == 0 || width == 0) return cudaSuccess;
  // The first byte to the last of each side.
  const size_t dst_span = dst_pitch * (height - 1) + width, src_span = src_pitch * (height - 1) + width;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  if ((src_device && !memory::is_device_range(src, src_span)) ||
      (dst_device && !memory::is_device_range(dst, dst_span)))
    return failed(cudaErrorInvalidValue);
  for (size_t row = 0; row < height; ++row)
    std::memmove(static_cast<char*>(dst) + row * dst_pitch, static_cast<const char*>(src) + row * src_pitch, width);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* pointer, int value, size_t bytes, cudaStream_t) {
  if (bytes == 0) return cudaSuccess;
  if (!memory::is_device_range(pointer, bytes)) return failed(cudaErrorInvalidValue);
  std::memset(pointer, value, bytes);
  return cudaSuccess;
}

}  // extern "C"
