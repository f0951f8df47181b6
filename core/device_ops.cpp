#include "core/device_ops.h"

#include <cstring>

#include "core/error.h"

namespace mg {

const CudaBackend& cuda_backend() {
#ifdef MG_WITH_CUDA
  static const CudaBackend backend = kernels::register_cuda_backend();  // on first use of a CUDA device
#else
  static const CudaBackend backend;  // no backend: allocator_for and device_ops say so
#endif
  return backend;
}

const DeviceOps& device_ops(Device device, const char* context) {
  check_device_available(device, context);  // throws in a build without the backend
  return cuda_backend().ops;
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
