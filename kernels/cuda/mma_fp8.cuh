// One FP8 instruction: mma.sync.aligned.m16n8k32.row.col.f32.<a>.<b>.f32 (sm_89 and later: Ada's FP8
// Tensor Cores, and on Hopper the compiler's f16 rendering of it), D = A B + C for a 16x32 tile A and
// a 32x8 tile B of E4M3 or E5M2 codes (the two formats may be mixed) and a 16x8 f32 tile C. The one place kernels/cuda/ says it in PTX (as
// cp_async.cuh does for cp.async), so that the CUDA emulator (emulator/) can put its model of the
// instruction here. Used by the FP8 GEMM (gemm_fp8.cu, gemm_fp8_mma.cu).
//
// The instruction is a warp's: the 32 lanes together hold the three tiles, each lane a fixed share in
// registers, and all 32 must execute it together. Which lane holds which element is the PTX ISA's
// section 9.7.14.5, "Matrix Fragments for mma.m16n8k32" (the figures for .s8/.u8/.e4m3/.e5m2, which
// share one layout: Figure 88 and after in PTX ISA 9.2; elements "low to high": a0 in the lowest byte
// of the first register), and CUTLASS's MMA_Traits<SM89_16x8x32_F32E4M3E4M3F32_TN> says the same
// (include/cute/atom/mma_traits_sm89.hpp: ALayout, BLayout, SM80_16x8_Row). With
//   group = lane / 4 (0..7)   and   quad = lane % 4 (0..3):
//
//   A, 16 x 32, row-major ("row"): 4 registers of 4 codes, the lowest k in the lowest byte
//     a[0]: row group,     k = 4 quad + 0..3          a[2]: row group,     k = 16 + 4 quad + 0..3
//     a[1]: row group + 8, k = 4 quad + 0..3          a[3]: row group + 8, k = 16 + 4 quad + 0..3
//   B, 32 x 8, column-major ("col"): 2 registers of 4 codes, down a column
//     b[0]: column group,  k = 4 quad + 0..3          b[1]: column group,  k = 16 + 4 quad + 0..3
//   C and D, 16 x 8 f32: 4 registers
//     c[0]: (group, 2 quad)      c[1]: (group, 2 quad + 1)
//     c[2]: (group + 8, 2 quad)  c[3]: (group + 8, 2 quad + 1)
//
// So lane 5 (group 1, quad 1) holds A's row 1 at k 4..7 and 20..23 and row 9 at the same k, B's
// column 1 at k 4..7 and 20..23, and C's (1, 2), (1, 3), (9, 2), (9, 3). The functions below say the
// same in code, and the GEMM loads its fragments with them; the emulator's model reads the fragments
// with the PTX ISA's formulas instead (element i, byte i % 4 of register i / 4), so that the two are
// checked against each other (tests/planted_bugs.cmake plants a wrong layout).
//
// Arithmetic. Every product of two FP8 values is exact (at most 4 x 4 significant bits); what the
// instruction keeps of their sum depends on the GPU (kernels/fp8.h, mma_sync_fp8_accumulator):
//   sm_89 (Ada): QMMA.16832, FP8 Tensor Cores. Modelled, *assumed* (NVIDIA publishes nothing, and no Ada
//     GPU has run it here), as the accumulator DeepSeek-V3 (arXiv 2412.19437, section 3.3.2) and
//     SageAttention2 (arXiv 2411.10958: FP22, 13 mantissa bits) report for Hopper's FP8 Tensor Cores:
//     the 32 products summed exactly, added to C, the result cut to 13 mantissa bits by truncation.
//   sm_90 (Hopper): nvcc has no FP8 mma.sync there; it compiles the instruction to F2FP conversions of
//     the codes into f16 and two HMMA.16816 with f32 accumulation (the SASS of fp8.cu: scripts/check-sass).
//     An H200 summed in f32 (bench/results/fp8_accumulator-h200-2026-11-28.txt). Modelled as each
//     HMMA's 16 products summed exactly, added to C and rounded to f32 (nearest).
//   sm_100, sm_120 (Blackwell): FP8 Tensor Cores under mma.sync again; modelled as Ada's, unmeasured.
// The emulator computes the model of the compute capability it reports (MG_EMULATOR_COMPUTE_CAPABILITY,
// 90 by default) with kernels::fp8_accumulate, the very function the CPU's Limited model calls, so the
// two agree bit for bit. tests/test_cuda_fp8_gemm.cpp prints what a real GPU gives for the cases that tell
// such models apart (scripts/gpu-check records it).
#pragma once

#include <cstdint>

#include "core/fp8.h"
#include "kernels/cuda/common.cuh"
#ifdef MG_CUDA_EMULATED
#include <array>

#include "kernels/fp8.h"
#endif

namespace mg::kernels::cuda {

// One lane's registers of the three tiles.
struct Fp8FragmentA {
  std::uint32_t x[4];  // 16 codes
};
struct Fp8FragmentB {
  std::uint32_t x[2];  // 8 codes
};
struct Fp8FragmentC {
  float x[4];
};

// Calls f.template operator()<kA, kB>() with the compile-time formats of (fa, fb): a kernel is
// instantiated per pair of formats, because the instruction names them.
template <class F>
void with_fp8_formats(DType fa, DType fb, const F& f) {
  using enum DType;
  if (fa == E4M3 && fb == E4M3) return f.template operator()<E4M3, E4M3>();
  if (fa == E4M3 && fb == E5M2) return f.template operator()<E4M3, E5M2>();
  if (fa == E5M2 && fb == E4M3) return f.template operator()<E5M2, E4M3>();
  f.template operator()<E5M2, E5M2>();
}

// The layout above: the tile coordinates of what lane `lane` holds.
__device__ __forceinline__ int fp8_a_row(int lane, int reg) { return lane / 4 + 8 * (reg % 2); }
__device__ __forceinline__ int fp8_a_k(int lane, int reg, int byte) { return 16 * (reg / 2) + 4 * (lane % 4) + byte; }
__device__ __forceinline__ int fp8_b_column(int lane) { return lane / 4; }
__device__ __forceinline__ int fp8_b_k(int lane, int reg, int byte) { return 16 * reg + 4 * (lane % 4) + byte; }
__device__ __forceinline__ int fp8_c_row(int lane, int reg) { return lane / 4 + 8 * (reg / 2); }
__device__ __forceinline__ int fp8_c_column(int lane, int reg) { return 2 * (lane % 4) + reg % 2; }

#ifdef MG_CUDA_EMULATED

namespace mma_fp8_emulation {

// The instruction as a warp collective (emulator/device.h explains them): every lane hands in
// pointers to its registers, and the last lane to arrive computes the whole 16x8 tile.
struct Lane {
  Fp8FragmentC* d;
  const Fp8FragmentA* a;
  const Fp8FragmentB* b;
  const Fp8FragmentC* c;
};

// Every code's value, in f64, where the products and their sums are exact (see complete()).
inline const std::array<double, 256>& values(DType format) {
  static const auto table = [](DType f) {
    std::array<double, 256> t{};
    for (int code = 0; code < 256; ++code) t[code] = fp8::decode(static_cast<std::uint8_t>(code), f);
    return t;
  };
  static const std::array<double, 256> e4m3 = table(DType::E4M3), e5m2 = table(DType::E5M2);
  return format == DType::E4M3 ? e4m3 : e5m2;
}

template <DType kA, DType kB>
struct Mma {
  static void complete(void* const lanes[32], unsigned) {
    // Gather the tiles from the lanes' registers, in the PTX ISA's own words (element i of a lane's
    // fragment is byte i % 4 of register i / 4), not with the functions above: a kernel whose loads
    // follow a wrong layout then computes a wrong product here, as it would on a GPU.
    double a[16][32], b[32][8];
    float c[16][8];
    for (int l = 0; l < 32; ++l) {
      const auto* lane = static_cast<const Lane*>(lanes[l]);
      const int group_id = l >> 2, thread_id_in_group = l % 4;
      for (int i = 0; i < 16; ++i) {  // a0..a15
        const int row = (i < 4 || (i >= 8 && i < 12)) ? group_id : group_id + 8;
        const int col = thread_id_in_group * 4 + (i & 0x3) + (i >= 8 ? 16 : 0);
        a[row][col] = values(kA)[(lane->a->x[i / 4] >> (8 * (i % 4))) & 0xFFu];
      }
      for (int i = 0; i < 8; ++i) {  // b0..b7
        const int row = thread_id_in_group * 4 + (i & 0x3) + (i >= 4 ? 16 : 0);
        b[row][group_id] = values(kB)[(lane->b->x[i / 4] >> (8 * (i % 4))) & 0xFFu];
      }
      for (int i = 0; i < 4; ++i)  // c0..c3
        c[i < 2 ? group_id : group_id + 8][thread_id_in_group * 2 + (i & 0x1)] = lane->c->x[i];
    }
    // Each output: the products of each group (32 on Ada, 16 on Hopper) summed in f64 in k order, as
    // the CPU's Limited model sums a group (kernels/cpu/gemm_fp8.cpp; exact, but for sums spanning more
    // than 53 bits of exponent range), added to the running sum and cut as the header says.
    const kernels::Fp8Accumulator model = kernels::mma_sync_fp8_accumulator(::mg::emu::settings().compute_capability);
    float d[16][8];
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 8; ++j) {
        d[i][j] = c[i][j];
        for (int g = 0; g < 32; g += model.group) {
          double sum = 0.0;
          for (int k = g; k < g + model.group; ++k) sum += a[i][k] * b[k][j];
          d[i][j] = kernels::fp8_accumulate(d[i][j], sum, model);
        }
      }
    for (int l = 0; l < 32; ++l) {
      auto* lane = static_cast<Lane*>(lanes[l]);
      for (int i = 0; i < 4; ++i) lane->d->x[i] = d[i < 2 ? l >> 2 : (l >> 2) + 8][(l % 4) * 2 + (i & 0x1)];
    }
  }
  static constexpr ::mg::emu::Collective kind{"mma.sync.aligned.m16n8k32.row.col.f32.f8.f8.f32", &complete};
};

}  // namespace mma_fp8_emulation

template <DType kA, DType kB>
__device__ inline void mma_fp8(Fp8FragmentC& d, const Fp8FragmentA& a, const Fp8FragmentB& b, const Fp8FragmentC& c,
                               std::source_location where = std::source_location::current()) {
  using Op = mma_fp8_emulation::Mma<kA, kB>;
  mma_fp8_emulation::Lane lane{&d, &a, &b, &c};
  ::mg::emu::warp_collective(0xFFFFFFFFu, Op::kind, &lane, where);
}

#else

// The PTX instruction for the formats kA x kB; d may be c (the registers are read before written).
#define MG_MMA_FP8(a_type, b_type) \
  asm("mma.sync.aligned.m16n8k32.row.col.f32." a_type "." b_type ".f32 " \
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n" \
      : "=f"(d.x[0]), "=f"(d.x[1]), "=f"(d.x[2]), "=f"(d.x[3]) \
      : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]), "f"(c.x[0]), "f"(c.x[1]), \
        "f"(c.x[2]), "f"(c.x[3]))

template <DType kA, DType kB>
__device__ __forceinline__ void mma_fp8(Fp8FragmentC& d, const Fp8FragmentA& a, const Fp8FragmentB& b,
                                        const Fp8FragmentC& c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (kA == DType::E4M3 && kB == DType::E4M3)
    MG_MMA_FP8("e4m3", "e4m3");
  else if constexpr (kA == DType::E4M3)
    MG_MMA_FP8("e4m3", "e5m2");
  else if constexpr (kB == DType::E4M3)
    MG_MMA_FP8("e5m2", "e4m3");
  else
    MG_MMA_FP8("e5m2", "e5m2");
#elif defined(__CUDA_ARCH__)
  // An architecture without FP8 Tensor Cores (sm_80): compiled so that the library builds for it,
  // never run (kernels::cuda::fp8_gemm refuses such a device first); stop the kernel if it is.
  (void)a, (void)b, (void)c;
  d = Fp8FragmentC{};
  __trap();
#endif
}

#undef MG_MMA_FP8

#endif

}  // namespace mg::kernels::cuda
