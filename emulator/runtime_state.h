// What the CUDA emulator's scheduler asks of its runtime (cudart.cpp): whether the hardware would
// accept a launch. Internal to the emulator.
#pragma once

#include <cuda_runtime_api.h>

#include "emulator/emulator.h"

namespace mg::emu::runtime {

// cudaSuccess, or the error an H100 would refuse the launch with, which becomes the calling host
// thread's last error (cudaGetLastError): block and grid sizes, dynamic shared memory above 48 KiB
// without the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize opt-in, or above 227 KiB.
cudaError_t check_launch(const KernelSite& site, dim3 grid, dim3 block, std::size_t dynamic_shared_bytes);

}  // namespace mg::emu::runtime
