#include "core/device.h"

#include "core/error.h"

#ifdef MG_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace mg {

int cuda_device_count() {
#ifdef MG_WITH_CUDA
  // Asked once: the answer cannot change during a run, and a failure (no driver, no device) means 0.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error so later CUDA calls start clean
      return 0;
    }
    return n;
  }();
  return count;
#else
  return 0;
#endif
}

bool built_with_cuda() {
#ifdef MG_WITH_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_emulated() {
#ifdef MG_CUDA_EMULATED
  return true;
#else
  return false;
#endif
}

void check_device_available(Device device, std::string_view context) {
  if (device.is_cpu()) return;
  MG_CHECK(built_with_cuda(),
           "{}: {} is not available: this build has no CUDA backend (configure with -DMG_CUDA=ON "
           "where nvcc is installed)",
           context, device);
  const int count = cuda_device_count();
  MG_CHECK(device.index >= 0 && device.index < count, "{}: {} is not available: this process sees {} CUDA device(s){}",
           context, device, count,
           count == 0 ? " (no GPU or no driver); keep the tensors on the CPU" : "; use an index below that count");
}

}  // namespace mg
