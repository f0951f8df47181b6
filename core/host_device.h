// MG_HOST_DEVICE marks a function that both the C++ compiler and nvcc's device pass compile: the
// scalar math written once for the CPU loops and the CUDA kernels (kernels/pointwise.h, core/philox.h).
#pragma once

#ifdef __CUDACC__
#define MG_HOST_DEVICE __host__ __device__
#else
#define MG_HOST_DEVICE
#endif
