#include "core/device_ops.h"

#include <cstring>

#include "core/error.h"

namespace mg {

namespace {

DeviceOps cuda_ops;

}  // namespace

void set_device_ops(DeviceType type, DeviceOps ops) {
  MG_CHECK(type == DeviceType::CUDA, "set_device_ops: the CPU needs no registered operations");
  cuda_ops = ops;
}

const DeviceOps& device_ops(Device device, const char* context) {
  check_device_available(device, context);
  MG_CHECK(cuda_ops.copy != nullptr && cuda_ops.fill != nullptr,
           "{}: no backend registered operations for {}", context, device);
  return cuda_ops;
}

void copy_bytes(const void* src, Device src_device, void* dst, Device dst_device, std::size_t nbytes,
                const char* context) {
  if (nbytes == 0) return;
  if (src_device.is_cpu() && dst_device.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  const DeviceOps& ops = device_ops(src_device.is_cuda() ? src_device : dst_device, context);
  if (src_device.is_cuda() && dst_device.is_cuda()) check_device_available(dst_device, context);
  ops.copy(src, src_device, dst, dst_device, nbytes);
}

}  // namespace mg
