// The microkernels' code, for the table in kernels/cpu/microkernel.cpp: the scalar models
// (microkernel_model.cpp) and the instruction kernels (microkernel_x86.cpp, x86 builds only). Every
// function has the signature of MicroKernel::run or, the *_gathered ones, of run_gathered
// (kernels/cpu/microkernel.h).
#pragma once

#include <cstdint>

namespace mg::kernels::cpu {

namespace models {
template <int MR, int NR>
void fma_tile(std::int64_t steps, const void* a_panel, const void* b_panel, float* acc, std::int64_t ld,
              bool accumulate);
template <int MR, int NR>
void fma_tile_gathered(std::int64_t steps, const float* const* a_lines, const std::int64_t* offsets, const float* b,
                       std::int64_t b_stride, float* acc, std::int64_t ld, bool accumulate);
template <int MR, int NR>
void bf16_dot_tile(std::int64_t steps, const void* a_panel, const void* b_panel, float* acc, std::int64_t ld,
                   bool accumulate);
template <int MR, int NR>
void bf16_dot_tile_gathered(std::int64_t steps, const float* const* a_lines, const std::int64_t* offsets,
                            const float* b, std::int64_t b_stride, float* acc, std::int64_t ld, bool accumulate);
}  // namespace models

namespace x86 {
// Each is compiled with its instructions enabled for that function alone (a target attribute), so
// every build holds them; call one only where micro_cpu() says the CPU has its instructions.
void avx2_fma_6x16(std::int64_t steps, const void* a_panel, const void* b_panel, float* acc, std::int64_t ld,
                   bool accumulate);
void avx512_fma_12x32(std::int64_t steps, const void* a_panel, const void* b_panel, float* acc, std::int64_t ld,
                      bool accumulate);
void avx2_fma_6x16_gathered(std::int64_t steps, const float* const* a_lines, const std::int64_t* offsets,
                            const float* b, std::int64_t b_stride, float* acc, std::int64_t ld, bool accumulate);
void avx512_fma_12x32_gathered(std::int64_t steps, const float* const* a_lines, const std::int64_t* offsets,
                               const float* b, std::int64_t b_stride, float* acc, std::int64_t ld, bool accumulate);
void avx512_bf16_dot_12x32(std::int64_t steps, const void* a_panel, const void* b_panel, float* acc, std::int64_t ld,
                           bool accumulate);
void avx512_bf16_dot_12x32_gathered(std::int64_t steps, const float* const* a_lines, const std::int64_t* offsets,
                                    const float* b, std::int64_t b_stride, float* acc, std::int64_t ld,
                                    bool accumulate);
}  // namespace x86

}  // namespace mg::kernels::cpu
