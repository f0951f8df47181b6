// The Tensor Core instructions of rung 3 (gemm_mma.cu), one function each, in PTX for nvcc and as
// models for the CUDA emulator (as cp_async.cuh and mma_fp8.cuh do for theirs):
//   ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16   one, two or four 8x8 matrices of
//                                                         16-bit elements from shared memory into
//                                                         every lane's registers (the GEMM uses x4)
//   mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}...   D (16x8 f32) = A (16x16) B (16x8) + C
//   mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32    the same, 8 deep, TF32 operands
//   cvt.rna.tf32.f32                                      an f32 rounded to TF32's 10 mantissa bits
// and the shared-memory accesses the kernel makes outside ldmatrix: a 32-bit load (the TF32 fragments
// of MN-major tiles), a 16-byte store (the copies through registers), and the epilogue's staging (an
// 8-byte store, a 16-byte load), with explicit .shared so the compiler never emits a generic LD or ST
// (scripts/check-sass fails a Tensor Core GEMM that has one).
//
// Which lane holds which element: the PTX ISA's "Matrix Fragments for mma.m16n8k16 / m16n8k8" and
// the ldmatrix description (lane l receives row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 of each
// matrix; .trans transposes it). mma_layout.h says the same as functions, which the kernel uses to
// load its fragments; the models below read the lanes' registers with the ISA's own formulas
// instead, so a kernel that loads a fragment wrongly computes a wrong product here as on a GPU
// (tests/planted_bugs.cmake plants one). tests/test_cuda_mma.cpp checks both the models and a real
// GPU against CuTe's description of the same instructions.
//
// Arithmetic of the models: products exact in f32 (f16 x f16, bf16 x bf16 and TF32 x TF32 all are),
// added to C in f32 in k order, rounding to nearest; TF32 operands are f32 whose low 13 mantissa
// bits the Tensor Core ignores. A GPU adds in its own grouping (kernels/cuda/README.md, what the
// emulator cannot see); the GEMM tests' tolerance allows for both.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace mg::kernels::cuda {

// One lane's share of an A fragment (4 registers) and of an accumulator (4 f32); a B fragment is two
// registers, passed as they are.
struct MmaA {
  std::uint32_t x[4];
};
struct MmaAccumulator {
  float x[4];
};

#ifdef MG_CUDA_EMULATED

namespace mma_emulation {

// 16-bit element `half` (0 low, 1 high) of a register, and the f32 an operand element stands for.
inline std::uint16_t half_of(std::uint32_t r, int half) { return static_cast<std::uint16_t>(r >> (16 * half)); }
template <class In>
float value_of(std::uint16_t bits) {
  return nvcuda::wmma::detail::widen(std::bit_cast<In>(bits));
}
inline float tf32_operand(std::uint32_t bits) { return std::bit_cast<float>(bits & 0xFFFFE000u); }

template <int kMatrices, bool kTranspose>
struct LdMatrix {
  struct Lane {
    const void* row;
    std::uint32_t* registers;
  };
  static void complete(void* const lanes[32], unsigned) {
    std::uint16_t m[kMatrices][8][8];  // matrix, row, element
    for (int i = 0; i < kMatrices; ++i)
      for (int r = 0; r < 8; ++r) {
        const void* row = static_cast<const Lane*>(lanes[8 * i + r])->row;
        ::mg::emu::check_shared(row, 16, "ldmatrix: a row");
        std::memcpy(m[i][r], row, 16);
      }
    for (int l = 0; l < 32; ++l) {
      auto* lane = static_cast<Lane*>(lanes[l]);
      for (int i = 0; i < kMatrices; ++i) {
        const int group = l / 4, pair = 2 * (l % 4);
        const std::uint16_t lo = kTranspose ? m[i][pair][group] : m[i][group][pair];
        const std::uint16_t hi = kTranspose ? m[i][pair + 1][group] : m[i][group][pair + 1];
        lane->registers[i] = lo | static_cast<std::uint32_t>(hi) << 16;
      }
    }
  }
  static constexpr const char* kNames[2][3] = {{"ldmatrix.sync.aligned.m8n8.x1.shared.b16",
                                                "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
                                                "ldmatrix.sync.aligned.m8n8.x4.shared.b16"},
                                               {"ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16",
                                                "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
                                                "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"}};
  static constexpr ::mg::emu::Collective kind{kNames[kTranspose][kMatrices / 2], &complete};
};

// kDepth 16: m16n8k16 with In = __half or bf16; kDepth 8: m16n8k8 TF32 (In = float).
template <class In, int kDepth>
struct Mma {
  struct Lane {
    MmaAccumulator* d;
    const MmaA* a;
    std::uint32_t b0, b1;
    const MmaAccumulator* c;
  };
  // Like the WMMA model's, the hot spot of an emulated GEMM: optimised in every build.
  MG_EMU_HOT static void complete(void* const lanes[32], unsigned) {
    float a[16][kDepth], b[kDepth][8], d[16][8];
    for (int l = 0; l < 32; ++l) {
      const auto* lane = static_cast<const Lane*>(lanes[l]);
      const int group_id = l >> 2, thread_id_in_group = l % 4;
      if constexpr (kDepth == 16) {
        for (int i = 0; i < 8; ++i) {  // a0..a7: (row, col) as the ISA's figure gives them
          const int row = (i < 2 || (i >= 4 && i < 6)) ? group_id : group_id + 8;
          const int col = thread_id_in_group * 2 + (i & 0x1) + (i >= 4 ? 8 : 0);
          a[row][col] = value_of<In>(half_of(lane->a->x[i / 2], i % 2));
        }
        for (int i = 0; i < 4; ++i) {  // b0..b3
          const int row = thread_id_in_group * 2 + (i & 0x1) + (i >= 2 ? 8 : 0);
          b[row][group_id] = value_of<In>(half_of(i < 2 ? lane->b0 : lane->b1, i % 2));
        }
      } else {
        for (int i = 0; i < 4; ++i) {  // a0..a3
          const int row = (i % 2 == 0) ? group_id : group_id + 8;
          const int col = (i < 2) ? thread_id_in_group : thread_id_in_group + 4;
          a[row][col] = tf32_operand(lane->a->x[i]);
        }
        b[thread_id_in_group][group_id] = tf32_operand(lane->b0);  // b0: row threadID_in_group
        b[thread_id_in_group + 4][group_id] = tf32_operand(lane->b1);  // b1: row threadID_in_group + 4
      }
      for (int i = 0; i < 4; ++i)  // c0..c3
        d[i < 2 ? group_id : group_id + 8][thread_id_in_group * 2 + (i & 0x1)] = lane->c->x[i];
    }
    for (int i = 0; i < 16; ++i)
      for (int k = 0; k < kDepth; ++k)
        for (int j = 0; j < 8; ++j) d[i][j] += a[i][k] * b[k][j];  // exact product, one rounding
    for (int l = 0; l < 32; ++l) {
      auto* lane = static_cast<Lane*>(lanes[l]);
      for (int i = 0; i < 4; ++i) lane->d->x[i] = d[i < 2 ? l >> 2 : (l >> 2) + 8][(l % 4) * 2 + (i & 0x1)];
    }
  }
  static constexpr ::mg::emu::Collective kind{kDepth == 8
                                                  ? "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
                                                  : (std::is_same_v<In, __half>
                                                         ? "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
                                                         : "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
                                              &complete};
};

}  // namespace mma_emulation

// ldmatrix.x1, .x2 or .x4 (kMatrices), .trans or not: lane l's `row` is row l % 8 of matrix l / 8
// (shared memory, 16-byte aligned; lanes past the matrices' 8 kMatrices point anywhere), and
// registers[i] receives the lane's share of matrix i.
template <int kMatrices, bool kTranspose>
__device__ inline void ldmatrix(std::uint32_t (&registers)[kMatrices], const void* row,
                                std::source_location where = std::source_location::current()) {
  static_assert(kMatrices == 1 || kMatrices == 2 || kMatrices == 4);
  using Op = mma_emulation::LdMatrix<kMatrices, kTranspose>;
  typename Op::Lane lane{row, registers};
  ::mg::emu::warp_collective(0xFFFFFFFFu, Op::kind, &lane, where);
}

template <class In>
__device__ inline void mma(MmaAccumulator& d, const MmaA& a, std::uint32_t b0, std::uint32_t b1,
                           std::source_location where = std::source_location::current()) {
  using Op = mma_emulation::Mma<In, std::is_same_v<In, float> ? 8 : 16>;
  typename Op::Lane lane{&d, &a, b0, b1, &d};
  ::mg::emu::warp_collective(0xFFFFFFFFu, Op::kind, &lane, where);
}

__device__ inline std::uint32_t to_tf32(std::uint32_t bits) {
  return std::bit_cast<std::uint32_t>(nvcuda::wmma::__float_to_tf32(std::bit_cast<float>(bits)));
}

// The explicit .shared accesses, checked as the hardware would fault: in the block's shared memory,
// aligned to their size.
__device__ inline std::uint32_t load_shared_u32(const void* address) {
  ::mg::emu::check_shared(address, 4, "ld.shared.b32");
  std::uint32_t value;
  std::memcpy(&value, address, sizeof value);
  return value;
}
__device__ inline uint4 load_shared_16(const void* address) {
  ::mg::emu::check_shared(address, 16, "ld.shared.v4.b32");
  uint4 value;
  std::memcpy(&value, address, sizeof value);
  return value;
}
__device__ inline void store_shared_16(void* address, const uint4& value) {
  ::mg::emu::check_shared(address, 16, "st.shared.v4.b32");
  std::memcpy(address, &value, sizeof value);
}
__device__ inline void store_shared_4(void* address, std::uint32_t bits) {
  ::mg::emu::check_shared(address, 4, "st.shared.b32");
  std::memcpy(address, &bits, sizeof bits);
}
__device__ inline void store_shared_8(void* address, float x, float y) {
  ::mg::emu::check_shared(address, 8, "st.shared.v2.f32");
  const float pair[2] = {x, y};
  std::memcpy(address, pair, sizeof pair);
}

#else

__device__ __forceinline__ unsigned shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

template <int kMatrices, bool kTranspose>
__device__ __forceinline__ void ldmatrix(std::uint32_t (&r)[kMatrices], const void* row) {
  static_assert(kMatrices == 1 || kMatrices == 2 || kMatrices == 4);
#define MG_LDMATRIX(shape, operands, ...) \
  asm volatile("ldmatrix.sync.aligned.m8n8." shape ".shared.b16 " operands ";\n" \
               : __VA_ARGS__ \
               : "r"(shared_address(row)))
  if constexpr (kMatrices == 1 && kTranspose)
    MG_LDMATRIX("x1.trans", "{%0}, [%1]", "=r"(r[0]));
  else if constexpr (kMatrices == 1)
    MG_LDMATRIX("x1", "{%0}, [%1]", "=r"(r[0]));
  else if constexpr (kMatrices == 2 && kTranspose)
    MG_LDMATRIX("x2.trans", "{%0, %1}, [%2]", "=r"(r[0]), "=r"(r[1]));
  else if constexpr (kMatrices == 2)
    MG_LDMATRIX("x2", "{%0, %1}, [%2]", "=r"(r[0]), "=r"(r[1]));
  else if constexpr (kTranspose)
    MG_LDMATRIX("x4.trans", "{%0, %1, %2, %3}, [%4]", "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]));
  else
    MG_LDMATRIX("x4", "{%0, %1, %2, %3}, [%4]", "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]));
#undef MG_LDMATRIX
}

// D = A B + D for one lane's registers (the accumulator is read and written in place).
template <class In>
__device__ __forceinline__ void mma(MmaAccumulator& d, const MmaA& a, std::uint32_t b0, std::uint32_t b1) {
#define MG_MMA(shape_and_types) \
  asm volatile("mma.sync.aligned." shape_and_types " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, " \
               "{%0, %1, %2, %3};\n" \
               : "+f"(d.x[0]), "+f"(d.x[1]), "+f"(d.x[2]), "+f"(d.x[3]) \
               : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b0), "r"(b1))
  if constexpr (std::is_same_v<In, __half>)
    MG_MMA("m16n8k16.row.col.f32.f16.f16.f32");
  else if constexpr (std::is_same_v<In, bf16>)
    MG_MMA("m16n8k16.row.col.f32.bf16.bf16.f32");
  else
    MG_MMA("m16n8k8.row.col.f32.tf32.tf32.f32");
#undef MG_MMA
}

__device__ __forceinline__ std::uint32_t to_tf32(std::uint32_t bits) {
  std::uint32_t rounded;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(rounded) : "f"(__uint_as_float(bits)));
  return rounded;
}

__device__ __forceinline__ std::uint32_t load_shared_u32(const void* address) {
  std::uint32_t value;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(value) : "r"(shared_address(address)));
  return value;
}
__device__ __forceinline__ uint4 load_shared_16(const void* address) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(shared_address(address)));
  return v;
}
__device__ __forceinline__ void store_shared_16(void* address, const uint4& v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(shared_address(address)), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void store_shared_4(void* address, std::uint32_t bits) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(shared_address(address)), "r"(bits) : "memory");
}
__device__ __forceinline__ void store_shared_8(void* address, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(shared_address(address)), "f"(x), "f"(y) : "memory");
}

#endif

}  // namespace mg::kernels::cuda
