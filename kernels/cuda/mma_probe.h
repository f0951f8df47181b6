// One warp running one Tensor Core instruction of mma.cuh, for tests/test_cuda_mma.cpp: what each
// lane holds afterwards, so that a test can print it as a table and check it against CuTe's
// description of the instruction. On a GPU that checks the hardware; on the CUDA emulator, the
// emulator's models. Host C++ (no CUDA header); defined in mma_probe.cu. Each call runs on the
// current device and waits for it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace mg::kernels::cuda {

// ldmatrix.sync.aligned.m8n8.x{matrices}[.trans].shared.b16 (matrices 1, 2 or 4) over 32 rows of 8
// 16-bit elements whose values are their own numbers (element e of row r holds 8 r + e), lane l
// pointing at row l: returns lane l's register i at [matrices l + i] (its lower 16 bits the first
// element).
std::vector<std::uint32_t> probe_ldmatrix(int matrices, bool transpose);

// One mma.sync D = A B with C = 0: m16n8k16 for f16 and bf16 (A 16 x 16, B 16 x 8), m16n8k8 for f32
// (TF32: A 16 x 8, B 8 x 8), both row-major, values exact in the dtype. Each lane loads its fragments
// with mma_layout.h's functions (f16_a, f16_b, tf32_a, tf32_b) and stores D's registers where
// mma_layout.h's accumulator() says: returns D, 16 x 8 row-major.
std::vector<float> probe_mma(DType dtype, const std::vector<float>& a, const std::vector<float>& b);

}  // namespace mg::kernels::cuda
