// The instructions of rung 4 (gemm_wgmma.cu), Hopper's warpgroup-wide Tensor Core operations, in PTX
// for nvcc and as models for the CUDA emulator (as mma.cuh does for rung 3's):
//   wgmma.fence.sync.aligned                     orders this warpgroup's register accesses before
//                                                wgmma reads or writes the accumulators (and
//                                                fence_operands keeps the compiler's accesses out of
//                                                the asynchronous window)
//   wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16}
//                                                D (64 x N f32, the warpgroup's registers) = A B + D
//                                                (or A B), A (64 x 16) and B (16 x N) read from
//                                                shared memory through their descriptors, K-major or
//                                                MN-major (the transpose immediates)
//   wgmma.mma_async.sync.aligned.m64n128k32.f32.{e4m3,e5m2}.{e4m3,e5m2}
//                                                the FP8 form (QGMMA: Hopper's FP8 Tensor Cores), 32
//                                                codes of k, both operands K-major; what its
//                                                accumulator keeps is kernels/fp8.h's
//                                                kHopperWgmmaFp8Accumulator (assumed until measured)
//   wgmma.commit_group, wgmma.wait_group N       the operations issued so far form a group; wait
//                                                until at most N groups are still running
// A warpgroup is 4 consecutive warps (128 threads, the first a multiple of 4): every thread runs each
// instruction. Warp w of the warpgroup receives rows 16 w to 16 w + 15 of D (wgmma_layout.h's
// accumulator_cell). Operands are read by the async proxy (hopper.cuh): what TMA wrote, or ordinary
// stores after fence.proxy.async.
//
// The models: each warp's share of an instruction is a warp collective that issues one operation
// (emulator.h): run at once or at the wait that covers its group, by the schedule, reading shared
// memory through the async proxy's view with the descriptors decoded by wgmma_layout.h, so a wrong
// stride, swizzle or major reads the wrong elements here as on a GPU. Arithmetic as rung 3's model:
// products exact in f32, added in k order with one rounding each. What the model does not check:
// that all four warps of the warpgroup issue the same instruction (each warp computes its own rows).
#pragma once

#include <cstdint>

#include "core/fp8.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/wgmma_layout.h"
#ifdef MG_CUDA_EMULATED
#include "kernels/fp8.h"
#endif

namespace mg::kernels::cuda::wgmma {

#ifdef MG_CUDA_EMULATED

namespace emulation {

inline int warp_in_warpgroup() {
  const unsigned linear = ::mg::emu::thread_index.x +
                          ::mg::emu::block_dim.x *
                              (::mg::emu::thread_index.y + ::mg::emu::block_dim.y * ::mg::emu::thread_index.z);
  return static_cast<int>(linear / 32 % 4);
}

// One 16-bit operand element through the async proxy.
template <class In>
float operand(const wgmma_layout::Descriptor& d, bool k_major, int mn, int k, const char* what) {
  const std::uint32_t address = wgmma_layout::element_address(d, k_major, 2, mn, k);
  std::uint16_t bits;
  std::memcpy(&bits, ::mg::emu::async_view(address, 2, what), 2);
  return nvcuda::wmma::detail::widen(std::bit_cast<In>(bits));
}

// What a wgmma collective's complete() does for every form: the lanes' accumulators gathered, the
// descriptors and scale-d checked to be the warp's own (every thread passes the same), and one
// operation of the warp issued that runs `run` on them (at once, or at its wait).
struct WgmmaLane {
  float* d;
  std::uint64_t a, b;
  bool accumulate;
};
using WarpRun = void (*)(int warp, const std::array<float*, 32>& d, std::uint64_t a, std::uint64_t b, bool accumulate);
inline void issue_warp(void* const lanes[32], const char* name, WarpRun run) {
  const auto* first = static_cast<const WgmmaLane*>(lanes[0]);
  std::array<float*, 32> d{};
  for (int l = 0; l < 32; ++l) {
    const auto* lane = static_cast<const WgmmaLane*>(lanes[l]);
    if (lane->a != first->a || lane->b != first->b || lane->accumulate != first->accumulate)
      ::mg::emu::fail(fmt::format("{}: lane {} passes descriptors {:#x}, {:#x} and scale-d {} where lane 0 passes "
                                  "{:#x}, {:#x} and {} (they must be the same in every thread of the warpgroup)",
                                  name, l, lane->a, lane->b, lane->accumulate, first->a, first->b, first->accumulate));
    d[static_cast<std::size_t>(l)] = lane->d;
  }
  for (std::uint64_t desc : {first->a, first->b})
    if (wgmma_layout::base_offset(desc) != 0)
      ::mg::emu::fail(
          fmt::format("{}: descriptor {:#x} has a base offset, which the emulator does not model", name, desc));
  const int warp = warp_in_warpgroup();
  const std::uint64_t a = first->a, b = first->b;
  const bool accumulate = first->accumulate;
  ::mg::emu::wgmma_issue([run, warp, d, a, b, accumulate] { run(warp, d, a, b, accumulate); });
}

template <class In, int kN, bool kTransA, bool kTransB>
struct Mma {
  using Lane = WgmmaLane;
  // The warp's 16 rows of D, when the operation runs.
  MG_EMU_HOT static void run(int warp, const std::array<float*, 32>& d, std::uint64_t desc_a, std::uint64_t desc_b,
                             bool accumulate) {
    const wgmma_layout::Descriptor da = wgmma_layout::decode(desc_a), db = wgmma_layout::decode(desc_b);
    float a[16][16], b[kN][16];
    for (int r = 0; r < 16; ++r)
      for (int k = 0; k < 16; ++k) a[r][k] = operand<In>(da, !kTransA, 16 * warp + r, k, "wgmma's A operand");
    for (int n = 0; n < kN; ++n)
      for (int k = 0; k < 16; ++k) b[n][k] = operand<In>(db, !kTransB, n, k, "wgmma's B operand");
    for (int l = 0; l < 32; ++l)
      for (int v = 0; v < kN / 2; ++v) {
        const mma_layout::Cell cell = wgmma_layout::accumulator_cell(0, l, v);
        float sum = accumulate ? d[static_cast<std::size_t>(l)][v] : 0.0f;
        for (int k = 0; k < 16; ++k) sum += a[cell.row][k] * b[cell.column][k];  // exact product, one rounding
        d[static_cast<std::size_t>(l)][v] = sum;
      }
  }
  static void complete(void* const lanes[32], unsigned) { issue_warp(lanes, kind.name, &run); }
  static constexpr const char* kName = std::is_same_v<In, __half>
                                           ? "wgmma.mma_async.sync.aligned.m64nNk16.f32.f16.f16"
                                           : "wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16";
  static constexpr ::mg::emu::Collective kind{kName, &complete};
};

// The FP8 form: both operands K-major codes; each output's 32 products summed exactly (in f64, as the
// CPU's Limited model sums a group) and added to D by kernels::fp8_accumulate with the QGMMA model.
template <DType kA, DType kB, int kN>
struct Fp8Mma {
  using Lane = WgmmaLane;
  static double code(const wgmma_layout::Descriptor& d, DType format, int mn, int k, const char* what) {
    const std::uint32_t address = wgmma_layout::element_address(d, true, 1, mn, k);
    return fp8::decode(*::mg::emu::async_view(address, 1, what), format);
  }
  MG_EMU_HOT static void run(int warp, const std::array<float*, 32>& d, std::uint64_t desc_a, std::uint64_t desc_b,
                             bool accumulate) {
    const wgmma_layout::Descriptor da = wgmma_layout::decode(desc_a), db = wgmma_layout::decode(desc_b);
    double a[16][32], b[kN][32];
    for (int r = 0; r < 16; ++r)
      for (int k = 0; k < 32; ++k) a[r][k] = code(da, kA, 16 * warp + r, k, "wgmma's A operand");
    for (int n = 0; n < kN; ++n)
      for (int k = 0; k < 32; ++k) b[n][k] = code(db, kB, n, k, "wgmma's B operand");
    for (int l = 0; l < 32; ++l)
      for (int v = 0; v < kN / 2; ++v) {
        const mma_layout::Cell cell = wgmma_layout::accumulator_cell(0, l, v);
        double sum = 0.0;
        for (int k = 0; k < 32; ++k) sum += a[cell.row][k] * b[cell.column][k];
        float& out = d[static_cast<std::size_t>(l)][v];
        out = kernels::fp8_accumulate(accumulate ? out : 0.0f, sum, kernels::kHopperWgmmaFp8Accumulator);
      }
  }
  static void complete(void* const lanes[32], unsigned) { issue_warp(lanes, kind.name, &run); }
  static constexpr ::mg::emu::Collective kind{"wgmma.mma_async.sync.aligned.m64nNk32.f32.f8.f8", &complete};
};

struct Commit {
  static void complete(void* const[32], unsigned) { ::mg::emu::wgmma_commit(); }
  static constexpr ::mg::emu::Collective kind{"wgmma.commit_group.sync.aligned", &complete};
};
template <int kPending>
struct Wait {
  static void complete(void* const[32], unsigned) { ::mg::emu::wgmma_wait(kPending); }
  static constexpr ::mg::emu::Collective kind{"wgmma.wait_group.sync.aligned", &complete};
};

}  // namespace emulation

__device__ inline void fence(std::source_location where = std::source_location::current()) {
  __syncwarp(0xFFFFFFFFu, where);
}
template <int kCount>
__device__ inline void fence_operands(float (&)[kCount]) {}

// D = A B (+ D when `accumulate`), kN columns; kTransA / kTransB: A / B MN-major.
template <class In, int kN, bool kTransA, bool kTransB>
__device__ inline void mma(float (&d)[kN / 2], std::uint64_t desc_a, std::uint64_t desc_b, bool accumulate,
                           std::source_location where = std::source_location::current()) {
  using Op = emulation::Mma<In, kN, kTransA, kTransB>;
  typename Op::Lane lane{d, desc_a, desc_b, accumulate};
  ::mg::emu::warp_collective(0xFFFFFFFFu, Op::kind, &lane, where);
}

// D = A B (+ D), FP8 codes kA x kB, both K-major, kN columns.
template <DType kA, DType kB, int kN>
__device__ inline void mma_fp8(float (&d)[kN / 2], std::uint64_t desc_a, std::uint64_t desc_b, bool accumulate,
                               std::source_location where = std::source_location::current()) {
  using Op = emulation::Fp8Mma<kA, kB, kN>;
  typename Op::Lane lane{d, desc_a, desc_b, accumulate};
  ::mg::emu::warp_collective(0xFFFFFFFFu, Op::kind, &lane, where);
}

__device__ inline void commit(std::source_location where = std::source_location::current()) {
  int nothing = 0;
  ::mg::emu::warp_collective(0xFFFFFFFFu, emulation::Commit::kind, &nothing, where);
}
template <int kPending>
__device__ inline void wait(std::source_location where = std::source_location::current()) {
  int nothing = 0;
  ::mg::emu::warp_collective(0xFFFFFFFFu, emulation::Wait<kPending>::kind, &nothing, where);
}

#else

// Operand lists of the 64 and 128 accumulator registers a thread holds for n = 128 and n = 256.
#define MG_WGMMA_REGS64 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MG_WGMMA_TAIL64 "%64, %65, p, 1, 1, %67, %68"
#define MG_WGMMA_PREDICATE64 "%66"
#define MG_WGMMA_REGS128 \
  MG_WGMMA_REGS64 \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define MG_WGMMA_TAIL128 "%128, %129, p, 1, 1, %131, %132"
#define MG_WGMMA_PREDICATE128 "%130"
// The matching output operands: 8 accumulators from d[o], then 64 and 128.
#define MG_WGMMA_D8(d, o) \
  "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), \
      "+f"(d[o + 7])
#define MG_WGMMA_D32(d, o) MG_WGMMA_D8(d, o), MG_WGMMA_D8(d, o + 8), MG_WGMMA_D8(d, o + 16), MG_WGMMA_D8(d, o + 24)
#define MG_WGMMA_D64(d) MG_WGMMA_D32(d, 0), MG_WGMMA_D32(d, 32)
#define MG_WGMMA_D128(d) MG_WGMMA_D32(d, 0), MG_WGMMA_D32(d, 32), MG_WGMMA_D32(d, 64), MG_WGMMA_D32(d, 96)

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

// Pins the accumulators in place for the compiler: no read or write of them moves into the window
// between the wgmma that uses them and its wait (CUTLASS's warpgroup_fence_operand). Without it
// nvcc may touch them there, and ptxas then serialises the wgmma ("wgmma.mma_async instructions are
// serialized"): correct, and slow.
template <int kCount>
__device__ __forceinline__ void fence_operands(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <class In, int kN, bool kTransA, bool kTransB>
__device__ __forceinline__ void mma(float (&d)[kN / 2], std::uint64_t desc_a, std::uint64_t desc_b, bool accumulate) {
  static_assert(kN == 128 || kN == 256, "rung 4 issues m64n128k16 and m64n256k16");
#define MG_WGMMA(shape_and_types, R) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " MG_WGMMA_PREDICATE##R \
               ", 0;\nwgmma.mma_async.sync.aligned." shape_and_types " {" MG_WGMMA_REGS##R "}, " MG_WGMMA_TAIL##R \
               ";\n}\n" \
               : MG_WGMMA_D##R(d) \
               : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(kTransA ? 1 : 0), \
                 "n"(kTransB ? 1 : 0))
  if constexpr (kN == 128 && std::is_same_v<In, __half>)
    MG_WGMMA("m64n128k16.f32.f16.f16", 64);
  else if constexpr (kN == 128)
    MG_WGMMA("m64n128k16.f32.bf16.bf16", 64);
  else if constexpr (std::is_same_v<In, __half>)
    MG_WGMMA("m64n256k16.f32.f16.f16", 128);
  else
    MG_WGMMA("m64n256k16.f32.bf16.bf16", 128);
#undef MG_WGMMA
}

// The FP8 form: no transpose immediates (FP8 operands are K-major).
#define MG_WGMMA_FP8_TAIL64 "%64, %65, p, 1, 1"
template <DType kA, DType kB, int kN>
__device__ __forceinline__ void mma_fp8(float (&d)[kN / 2], std::uint64_t desc_a, std::uint64_t desc_b,
                                        bool accumulate) {
  static_assert(kN == 128, "the FP8 probe issues m64n128k32");
#define MG_WGMMA_FP8(types) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " MG_WGMMA_PREDICATE64 \
               ", 0;\nwgmma.mma_async.sync.aligned.m64n128k32.f32." types " {" MG_WGMMA_REGS64 \
               "}, " MG_WGMMA_FP8_TAIL64 ";\n}\n" \
               : MG_WGMMA_D64(d) \
               : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)))
  if constexpr (kA == DType::E4M3 && kB == DType::E4M3)
    MG_WGMMA_FP8("e4m3.e4m3");
  else if constexpr (kA == DType::E4M3)
    MG_WGMMA_FP8("e4m3.e5m2");
  else if constexpr (kB == DType::E4M3)
    MG_WGMMA_FP8("e5m2.e4m3");
  else
    MG_WGMMA_FP8("e5m2.e5m2");
#undef MG_WGMMA_FP8
}

__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

#endif

}  // namespace mg::kernels::cuda::wgmma
