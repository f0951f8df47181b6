// The instruction microkernels (kernels/cpu/microkernel.h), one function per instruction set, each
// compiled for its instructions by a target attribute: every build of mixgrad holds all three, and
// kernels/cpu/microkernel.cpp hands out only those this CPU runs. Each is the vector form of a scalar
// model in microkernel_model.cpp (same tile, layout and order), which tests/test_microkernel checks
// bit for bit.
//
// The shape of all three: the tile of C lives in registers for the whole run of k (24 zmm or 12 ymm
// accumulators; the rest hold B's row of the panel and one broadcast element of A). Each step loads
// B's NR values (two vectors), then for each of the MR rows broadcasts A's value and multiplies it
// into both vectors of that row. Loops over i are unrolled by the compiler, so acc[][] never leaves
// the registers.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/microkernel_models.h"

namespace mg::kernels::cpu::x86 {

__attribute__((target("avx2,fma"))) void avx2_fma_6x16(std::int64_t steps, const void* a_panel, const void* b_panel,
                                                       float* acc, std::int64_t ld, bool accumulate) {
  constexpr int MR = 6, NR = 16;
  const auto* a = static_cast<const float*>(a_panel);
  const auto* b = static_cast<const float*>(b_panel);
  __m256 c[MR][2];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    c[i][0] = accumulate ? _mm256_loadu_ps(acc + i * ld) : _mm256_setzero_ps();
    c[i][1] = accumulate ? _mm256_loadu_ps(acc + i * ld + 8) : _mm256_setzero_ps();
  }
  for (std::int64_t s = 0; s < steps; ++s, a += MR, b += NR) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      c[i][0] = _mm256_fmadd_ps(ai, b0, c[i][0]);
      c[i][1] = _mm256_fmadd_ps(ai, b1, c[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) _mm256_storeu_ps(acc + i * ld, c[i][0]), _mm256_storeu_ps(acc + i * ld + 8, c[i][1]);
}

__attribute__((target("avx512f"))) void avx512_fma_12x32(std::int64_t steps, const void* a_panel, const void* b_panel,
                                                         float* acc, std::int64_t ld, bool accumulate) {
  constexpr int MR = 12, NR = 32;
  const auto* a = static_cast<const float*>(a_panel);
  const auto* b = static_cast<const float*>(b_panel);
  __m512 c[MR][2];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    c[i][0] = accumulate ? _mm512_loadu_ps(acc + i * ld) : _mm512_setzero_ps();
    c[i][1] = accumulate ? _mm512_loadu_ps(acc + i * ld + 16) : _mm512_setzero_ps();
  }
  for (std::int64_t s = 0; s < steps; ++s, a += MR, b += NR) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      c[i][0] = _mm512_fmadd_ps(ai, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(ai, b1, c[i][1]);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) _mm512_storeu_ps(acc + i * ld, c[i][0]), _mm512_storeu_ps(acc + i * ld + 16, c[i][1]);
}

// The same tiles with both operands read in place (MicroKernel::run_gathered): A's MR values of a
// step from MR lines of a padded image at the step's offset, B's NR from a row of b; the same
// multiply-adds in the same order as the packed kernels above.
__attribute__((target("avx2,fma"))) void avx2_fma_6x16_gathered(std::int64_t steps, const float* const* a_lines,
                                                                const std::int64_t* offsets, const float* b,
                                                                std::int64_t b_stride, float* acc, std::int64_t ld,
                                                                bool accumulate) {
  constexpr int MR = 6;
  __m256 c[MR][2];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    c[i][0] = accumulate ? _mm256_loadu_ps(acc + i * ld) : _mm256_setzero_ps();
    c[i][1] = accumulate ? _mm256_loadu_ps(acc + i * ld + 8) : _mm256_setzero_ps();
  }
  for (std::int64_t s = 0; s < steps; ++s, b += b_stride) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    const std::int64_t at = offsets[s];
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a_lines[i] + at);
      c[i][0] = _mm256_fmadd_ps(ai, b0, c[i][0]);
      c[i][1] = _mm256_fmadd_ps(ai, b1, c[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) _mm256_storeu_ps(acc + i * ld, c[i][0]), _mm256_storeu_ps(acc + i * ld + 8, c[i][1]);
}

__attribute__((target("avx512f"))) void avx512_fma_12x32_gathered(std::int64_t steps, const float* const* a_lines,
                                                                  const std::int64_t* offsets, const float* b,
                                                                  std::int64_t b_stride, float* acc, std::int64_t ld,
                                                                  bool accumulate) {
  constexpr int MR = 12;
  __m512 c[MR][2];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    c[i][0] = accumulate ? _mm512_loadu_ps(acc + i * ld) : _mm512_setzero_ps();
    c[i][1] = accumulate ? _mm512_loadu_ps(acc + i * ld + 16) : _mm512_setzero_ps();
  }
  for (std::int64_t s = 0; s < steps; ++s, b += b_stride) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    const std::int64_t at = offsets[s];
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(a_lines[i][at]);
      c[i][0] = _mm512_fmadd_ps(ai, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(ai, b1, c[i][1]);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) _mm512_storeu_ps(acc + i * ld, c[i][0]), _mm512_storeu_ps(acc + i * ld + 16, c[i][1]);
}

// The same tile with vdpbf16ps: each step is a pair of k, so one instruction does the work of two
// FMAs. A's pair for row i is one 32-bit word, broadcast to every lane; B's pairs for 16 columns fill
// one zmm register.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void avx512_bf16_dot_12x32(
    std::int64_t steps, const void* a_panel, const void* b_panel, float* acc, std::int64_t ld, bool accumulate) {
  constexpr int MR = 12, NR = 32;
  const auto* a = static_cast<const std::int32_t*>(a_panel);
  const auto* b = static_cast<const std::uint32_t*>(b_panel);
  __m512 c[MR][2];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    c[i][0] = accumulate ? _mm512_loadu_ps(acc + i * ld) : _mm512_setzero_ps();
    c[i][1] = accumulate ? _mm512_loadu_ps(acc + i * ld + 16) : _mm512_setzero_ps();
  }
  for (std::int64_t s = 0; s < steps; ++s, a += MR, b += NR) {
    const auto b0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b));
    const auto b1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + 16));
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      const auto ai = reinterpret_cast<__m512bh>(_mm512_set1_epi32(a[i]));
      c[i][0] = _mm512_dpbf16_ps(c[i][0], ai, b0);
      c[i][1] = _mm512_dpbf16_ps(c[i][1], ai, b1);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) _mm512_storeu_ps(acc + i * ld, c[i][0]), _mm512_storeu_ps(acc + i * ld + 16, c[i][1]);
}

// The dot tile with both operands read in place (MicroKernel::run_gathered): a step is a pair of k, so
// each 32-bit value of the lines and of b's rows is a pair of bf16 (element 2s in its low half), as in
// the packed panels above. A's pair for row i is broadcast straight from its line; the same
// instructions in the same order as avx512_bf16_dot_12x32.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void avx512_bf16_dot_12x32_gathered(
    std::int64_t steps, const float* const* a_lines, const std::int64_t* offsets, const float* b, std::int64_t b_stride,
    float* acc, std::int64_t ld, bool accumulate) {
  constexpr int MR = 12;
  __m512 c[MR][2];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    c[i][0] = accumulate ? _mm512_loadu_ps(acc + i * ld) : _mm512_setzero_ps();
    c[i][1] = accumulate ? _mm512_loadu_ps(acc + i * ld + 16) : _mm512_setzero_ps();
  }
  for (std::int64_t s = 0; s < steps; ++s, b += b_stride) {
    const auto b0 = reinterpret_cast<__m512bh>(_mm512_loadu_ps(b));
    const auto b1 = reinterpret_cast<__m512bh>(_mm512_loadu_ps(b + 16));
    const std::int64_t at = offsets[s];
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      const auto ai = reinterpret_cast<__m512bh>(_mm512_set1_ps(a_lines[i][at]));
      c[i][0] = _mm512_dpbf16_ps(c[i][0], ai, b0);
      c[i][1] = _mm512_dpbf16_ps(c[i][1], ai, b1);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) _mm512_storeu_ps(acc + i * ld, c[i][0]), _mm512_storeu_ps(acc + i * ld + 16, c[i][1]);
}

}  // namespace mg::kernels::cpu::x86
#endif
