// What core needs from a device backend: memory, moving bytes and filling a buffer. With them a
// tensor on a GPU is made by the factories (mg::zeros, mg::randn, ... with .device = Device::cuda())
// and read by item() and to_vector() like a tensor on the CPU.
//
// Where the CUDA backend comes from: the first time a CUDA device needs memory or these operations
// (allocator_for, device_ops), core calls kernels::register_cuda_backend() (defined beside the
// dispatch of every kernel, kernels/dispatch.cpp) and keeps what it returns for the rest of the
// process. A program that never touches a GPU never sets the backend up. This is one of core's two
// calls into a folder above it, both resolved by the linker (the other: core/tensor.h's op methods).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"

namespace mg {

struct DeviceOps {
  // Copies nbytes from src on src_device to dst on dst_device; returns once dst may be read on the
  // host when dst_device is the CPU (the one place the host waits for a GPU).
  void (*copy)(const void* src, Device src_device, void* dst, Device dst_device, std::size_t nbytes) = nullptr;
  // Sets `count` elements of `dtype` at dst (on `device`) to the bit pattern `pattern` of one element
  // (2 or 4 bytes, in the low bits), queued without waiting.
  void (*fill)(void* dst, Device device, DType dtype, std::uint32_t pattern, std::int64_t count) = nullptr;
};

// What core takes from the CUDA backend.
struct CudaBackend {
  Allocator* allocator = nullptr;  // the caching device allocator (kernels/cuda/allocator.h)
  DeviceOps ops;  // copy_bytes (kernels/cuda/transfer.cpp), fill (kernels/cuda/copy.cu)
};
// The CUDA backend, set up by the first call (thread-safe) and the same object after; every member
// null in a build without the backend.
const CudaBackend& cuda_backend();

namespace kernels {
// Sets the CUDA backend up and returns its parts; core's cuda_backend() calls it once. Defined in
// kernels/dispatch.cpp, in builds with the CUDA backend (MG_WITH_CUDA) only.
CudaBackend register_cuda_backend();
}  // namespace kernels

// The operations for `device` (a CUDA device); an mg::Error starting with `context` when this build
// or process cannot use it (check_device_available).
const DeviceOps& device_ops(Device device, const char* context);

// nbytes from (src, src_device) to (dst, dst_device): memcpy on the CPU, the backend's copy otherwise.
void copy_bytes(const void* src, Device src_device, void* dst, Device dst_device, std::size_t nbytes,
                const char* context);

}  // namespace mg
