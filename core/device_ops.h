// What core needs from a device backend besides memory: moving bytes and filling a buffer. The CUDA
// backend registers its functions for DeviceType::CUDA before main() (kernels/dispatch.cpp), as it
// registers its allocator; core stays below the kernels. With them a tensor on a GPU is made by the
// factories (mg::zeros, mg::randn, ... with .device = Device::cuda()) and read by item() and
// to_vector() like a tensor on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>

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

void set_device_ops(DeviceType type, DeviceOps ops);
// The registered operations for `device`'s type; an mg::Error starting with `context` when the
// build has no backend for it.
const DeviceOps& device_ops(Device device, const char* context);

// nbytes from (src, src_device) to (dst, dst_device): memcpy on the CPU, the backend's copy otherwise.
void copy_bytes(const void* src, Device src_device, void* dst, Device dst_device, std::size_t nbytes,
                const char* context);

}  // namespace mg
