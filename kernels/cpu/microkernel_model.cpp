// The instruction models (kernels/cpu/microkernel.h): each microkernel's arithmetic as portable scalar
// code, with the same tile, the same packed layout and the same order of operations as the
// instruction kernel it models (kernels/cpu/microkernel_x86.cpp). Compiled on every CPU.
// Tests: build/tests/test_microkernel.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/microkernel.h"
#include "kernels/cpu/microkernel_models.h"

namespace mg::kernels::cpu {

namespace {

// vdpbf16ps's DAZ and FTZ: a subnormal reads, and is written, as a zero of its sign.
float flush_subnormal(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

float bf16_value(std::uint16_t bits) { return flush_subnormal(std::bit_cast<float>(std::uint32_t{bits} << 16)); }

}  // namespace

float bf16_dot_step(float acc, std::uint16_t a_even, std::uint16_t a_odd, std::uint16_t b_even, std::uint16_t b_odd) {
  // The products are exact in f32 (8 significant bits times 8), so each fused multiply-add rounds
  // once, to nearest even: the odd element first, as the instruction.
  acc = flush_subnormal(std::fma(bf16_value(a_odd), bf16_value(b_odd), flush_subnormal(acc)));
  return flush_subnormal(std::fma(bf16_value(a_even), bf16_value(b_even), acc));
}

namespace models {

// acc[i][j] = fma(a[s][i], b[s][j], acc[i][j]) for s ascending: one rounding per product, as
// vfmadd231ps lane by lane.
template <int MR, int NR>
void fma_tile(std::int64_t steps, const void* a_panel, const void* b_panel, float* acc, std::int64_t ld,
              bool accumulate) {
  const auto* a = static_cast<const float*>(a_panel);
  const auto* b = static_cast<const float*>(b_panel);
  if (!accumulate)
    for (int i = 0; i < MR; ++i) std::fill(acc + i * ld, acc + i * ld + NR, 0.0f);
  for (std::int64_t s = 0; s < steps; ++s, a += MR, b += NR)
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i * ld + j] = std::fma(a[i], b[j], acc[i * ld + j]);
}

// acc[i][j] = bf16_dot_step(acc[i][j], a pair, b pair) for s ascending; a pair is one 32-bit word,
// element 2s in its low half and 2s + 1 in its high half (little-endian memory order).
template <int MR, int NR>
void bf16_dot_tile(std::int64_t steps, const void* a_panel, const void* b_panel, float* acc, std::int64_t ld,
                   bool accumulate) {
  const auto* a = static_cast<const std::uint32_t*>(a_panel);
  const auto* b = static_cast<const std::uint32_t*>(b_panel);
  if (!accumulate)
    for (int i = 0; i < MR; ++i) std::fill(acc + i * ld, acc + i * ld + NR, 0.0f);
  for (std::int64_t s = 0; s < steps; ++s, a += MR, b += NR)
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j)
        acc[i * ld + j] = bf16_dot_step(acc[i * ld + j], static_cast<std::uint16_t>(a[i]),
                                        static_cast<std::uint16_t>(a[i] >> 16), static_cast<std::uint16_t>(b[j]),
                                        static_cast<std::uint16_t>(b[j] >> 16));
}

// The same chain with both operands read in place (MicroKernel::run_gathered): row i's value of step s at a_lines[i][offsets[s]].
template <int MR, int NR>
void fma_tile_gathered(std::int64_t steps, const float* const* a_lines, const std::int64_t* offsets, const float* b,
                       std::int64_t b_stride, float* acc, std::int64_t ld, bool accumulate) {
  if (!accumulate)
    for (int i = 0; i < MR; ++i) std::fill(acc + i * ld, acc + i * ld + NR, 0.0f);
  for (std::int64_t s = 0; s < steps; ++s, b += b_stride)
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i * ld + j] = std::fma(a_lines[i][offsets[s]], b[j], acc[i * ld + j]);
}

// The dot chain with both operands read in place: each 32-bit value of the lines and of b's rows is a
// pair of bf16, as in the packed panels (copied as bits, never as a float value).
template <int MR, int NR>
void bf16_dot_tile_gathered(std::int64_t steps, const float* const* a_lines, const std::int64_t* offsets,
                            const float* b, std::int64_t b_stride, float* acc, std::int64_t ld, bool accumulate) {
  if (!accumulate)
    for (int i = 0; i < MR; ++i) std::fill(acc + i * ld, acc + i * ld + NR, 0.0f);
  for (std::int64_t s = 0; s < steps; ++s, b += b_stride)
    for (int i = 0; i < MR; ++i) {
      std::uint32_t a = 0;
      std::memcpy(&a, a_lines[i] + offsets[s], sizeof a);
      for (int j = 0; j < NR; ++j) {
        std::uint32_t pair = 0;
        std::memcpy(&pair, b + j, sizeof pair);
        acc[i * ld + j] = bf16_dot_step(acc[i * ld + j], static_cast<std::uint16_t>(a),
                                        static_cast<std::uint16_t>(a >> 16), static_cast<std::uint16_t>(pair),
                                        static_cast<std::uint16_t>(pair >> 16));
      }
    }
}

template void fma_tile<12, 32>(std::int64_t, const void*, const void*, float*, std::int64_t, bool);
template void fma_tile_gathered<12, 32>(std::int64_t, const float* const*, const std::int64_t*, const float*,
                                        std::int64_t, float*, std::int64_t, bool);
template void fma_tile_gathered<6, 16>(std::int64_t, const float* const*, const std::int64_t*, const float*,
                                       std::int64_t, float*, std::int64_t, bool);
template void fma_tile<6, 16>(std::int64_t, const void*, const void*, float*, std::int64_t, bool);
template void bf16_dot_tile<12, 32>(std::int64_t, const void*, const void*, float*, std::int64_t, bool);
template void bf16_dot_tile_gathered<12, 32>(std::int64_t, const float* const*, const std::int64_t*, const float*,
                                             std::int64_t, float*, std::int64_t, bool);

}  // namespace models

}  // namespace mg::kernels::cpu
