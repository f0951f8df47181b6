// What the GPU suites ask of the device they run on (a GPU, or the CUDA emulator, which reports 9.0
// unless MG_EMULATOR_COMPUTE_CAPABILITY says otherwise).
#pragma once

#include <cuda_runtime_api.h>

#include "tests/testing.h"

namespace mg::testing {

// Whether the current device is an H100 or H200 (compute capability exactly 9.0), where rung 4 of the
// GEMMs (wgmma, sm_90a) runs.
inline bool hopper() {
  int device = 0, major = 0, minor = 0;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess);
  return major == 9 && minor == 0;
}

}  // namespace mg::testing
