// The peak rate of the instructions behind the CPU GEMM microkernels (kernels/cpu/microkernel.h), on
// one core: a loop of independent multiply-adds on registers only (24 accumulators, more than the
// latency times the throughput), no memory traffic. bench/matmul reports every GEMM as a share of
// the peak of the instruction it runs on, so "2x the f32 GEMM" is read against what the core can do.
//
//   f32 FMA     vfmadd231ps zmm (AVX-512F), or ymm (AVX2): 2 flops per lane
//   bf16 dot    vdpbf16ps zmm (AVX512_BF16): 4 flops per f32 lane (two products, two additions)
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "kernels/cpu/microkernel.h"

namespace bench {

#if defined(__x86_64__)
namespace peak_detail {

constexpr int kAccumulators = 24;
constexpr std::int64_t kIterations = 4'000'000;

__attribute__((target("avx512f"))) inline float fma_loop() {
  __m512 acc[kAccumulators];
  __m512 a = _mm512_set1_ps(0.999f);
  const __m512 b = _mm512_set1_ps(1.0001f);
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  for (std::int64_t it = 0; it < kIterations; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
    asm volatile("" : "+v"(a));  // the compiler may not fold the loop away
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc[0]);
  for (int i = 1; i < kAccumulators; ++i) _mm512_store_ps(lanes, _mm512_add_ps(_mm512_load_ps(lanes), acc[i]));
  return lanes[0];
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) inline float dot_loop() {
  __m512 acc[kAccumulators];
  __m512i a = _mm512_set1_epi32(0x3F803F80);  // the pair (1, 1)
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3F813F81));
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  for (std::int64_t it = 0; it < kIterations; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], reinterpret_cast<__m512bh>(a), b);
    asm volatile("" : "+v"(a));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc[0]);
  for (int i = 1; i < kAccumulators; ++i) _mm512_store_ps(lanes, _mm512_add_ps(_mm512_load_ps(lanes), acc[i]));
  return lanes[0];
}

template <class Loop>
double gflops(Loop loop, double flops_per_instruction) {
  volatile float sink = loop();  // warm-up: clocks up
  const auto start = std::chrono::steady_clock::now();
  sink = loop();
  (void)sink;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return flops_per_instruction * kAccumulators * static_cast<double>(kIterations) / seconds / 1e9;
}

}  // namespace peak_detail
#endif

// GFLOP/s of one core, best of three; 0 where the CPU lacks the instruction.
struct InstructionPeak {
  double fma = 0.0;  // f32 FMA on zmm
  double bf16_dot = 0.0;  // vdpbf16ps on zmm
};

inline InstructionPeak measure_instruction_peak() {
  InstructionPeak peak;
#if defined(__x86_64__)
  const mg::kernels::cpu::MicroCpu& cpu = mg::kernels::cpu::micro_cpu();
  for (int trial = 0; trial < 3; ++trial) {
    if (cpu.avx512f) peak.fma = std::max(peak.fma, peak_detail::gflops(peak_detail::fma_loop, 2.0 * 16));
    if (cpu.avx512_bf16) peak.bf16_dot = std::max(peak.bf16_dot, peak_detail::gflops(peak_detail::dot_loop, 4.0 * 16));
  }
#endif
  return peak;
}

}  // namespace bench
