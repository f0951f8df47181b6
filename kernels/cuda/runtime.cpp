#include "kernels/cuda/runtime.h"

#include <atomic>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace mg::cuda {

void fail(cudaError_t error, const char* call, const char* file, int line) {
  cudaGetLastError();  // clear a sticky error so that the next call reports its own
  throw Error(fmt::format("CUDA error: {} failed with {} ({}) at {}:{}", call, cudaGetErrorName(error),
                          cudaGetErrorString(error), file, line));
}

cudaStream_t stream(int device_index) {
  static std::mutex mutex;
  static std::vector<cudaStream_t> streams;
  std::lock_guard<std::mutex> lock(mutex);
  if (streams.size() <= static_cast<std::size_t>(device_index))
    streams.resize(static_cast<std::size_t>(device_index) + 1);
  cudaStream_t& s = streams[static_cast<std::size_t>(device_index)];
  if (s == nullptr) {
    DeviceGuard guard(device_index);
    // Non-blocking: it does not synchronise with the legacy default stream other libraries may use.
    MG_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  return s;
}

namespace {
std::atomic<std::uint64_t> waits{0};
}  // namespace

void synchronize(int device_index) {
  ++waits;
  MG_CUDA_CHECK(cudaStreamSynchronize(stream(device_index)));
}

void wait_for_event(cudaEvent_t event) {
  ++waits;
  MG_CUDA_CHECK(cudaEventSynchronize(event));
}

std::uint64_t host_waits() { return waits.load(); }

DeviceGuard::DeviceGuard(int device_index) {
  MG_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device_index) MG_CUDA_CHECK(cudaSetDevice(device_index));
}

DeviceGuard::~DeviceGuard() {
  int current = previous_;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);  // no throw here
}

}  // namespace mg::cuda
