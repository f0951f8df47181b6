// The CUDA runtime as the backend uses it: checked calls, one stream per device, a device guard.
//
// Every CUDA call goes through MG_CUDA_CHECK, which turns a failure into an mg::Error naming the
// call, the file and line, and CUDA's own message. Work is queued on one stream per device, so the
// caching allocator can hand a freed block to the next request without events: later work on the
// same stream runs after the work that used the block. The host waits only where a value reaches
// it (a copy to the CPU; item(), the GradScaler's decision), and every such wait goes through
// synchronize() or wait_for_event(), which count it: host_waits() is how a test or a benchmark sees
// how often a training step stops the host.
// Host code: compiled by the C++ compiler against the CUDA runtime API (no kernels here).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/device.h"

namespace mg::cuda {

[[noreturn]] void fail(cudaError_t error, const char* call, const char* file, int line);

#define MG_CUDA_CHECK(call) \
  do { \
    const cudaError_t mg_cuda_error_ = (call); \
    if (mg_cuda_error_ != cudaSuccess) ::mg::cuda::fail(mg_cuda_error_, #call, __FILE__, __LINE__); \
  } while (0)

// The stream all of mixgrad's work on this device is queued on, created on first use.
cudaStream_t stream(int device_index);

// Waits for everything queued on the device's stream (one host wait).
void synchronize(int device_index);
// Waits until `event` has happened on its stream (one host wait).
void wait_for_event(cudaEvent_t event);
// Host waits since the process started, on every device: synchronize() and wait_for_event() calls,
// which include every copy to the CPU (item(), to_vector()). Thread-safe.
std::uint64_t host_waits();

// Makes `device_index` current for its scope and restores the previous device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device_index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace mg::cuda
