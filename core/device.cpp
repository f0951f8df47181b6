#include "core/device.h"

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

}  // namespace mg
