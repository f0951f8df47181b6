// GEMM microkernels: the innermost loop of mixgrad's own CPU GEMM (kernels/cpu/gemm_packed.cpp).
//
// A microkernel adds to an MR x NR tile of C, held in registers, the products of a packed micro-panel
// of A (MR rows of op(A)) and one of B (NR columns of op(B)) over a run of k. Packing (gemm_packed.cpp)
// has laid both panels out so that every step of k reads them in order:
//
//   Fma      A: [steps][MR] f32      B: [steps][NR] f32      one step = one k
//            acc[i][j] = fma(a[i], b[j], acc[i][j])   one rounding per product, k ascending
//   Bf16Dot  A: [steps][MR] bf16 pairs   B: [steps][NR] bf16 pairs   one step = two k (2s, 2s + 1)
//            acc[i][j] = dot_step(acc[i][j], a pair, b pair)   see below
//
// So every element of C is one chain of f32 operations in a fixed order of k, whatever the cache
// blocking or the thread count around the microkernel: the same bits on any number of cores.
//
// The instruction behind Bf16Dot is AVX512_BF16's vdpbf16ps (Intel Cooper Lake and Sapphire Rapids
// onwards, AMD Zen 4 onwards), a CPU's "Tensor Core": per f32 lane it multiplies a pair of bf16 values
// by another pair and adds both products into the lane, twice the multiply-adds of an f32 FMA per
// instruction. Its exact semantics (Intel SDM, VDPBF16PS), copied by bf16_dot_step:
//   - two sequential f32 fused multiply-adds, the odd element of the pair (2s + 1) first, then the
//     even one (2s); each product of two bf16 values is exact in f32, so each step rounds once;
//   - round to nearest even, whatever MXCSR says;
//   - subnormal inputs, the accumulator's included, are read as zero (DAZ), and a subnormal result is
//     written as zero of the same sign (FTZ).
// The last rule departs from mixgrad's "subnormals kept" (README.md): a bf16 operand below 2^-126, or a
// partial sum that falls there, counts as zero. bf16 has f32's exponent range, so these are values
// 2^100 times smaller than any a loss scale produces; an f16 GEMM (Fma) keeps every subnormal, and the
// GPU's bf16 Tensor Cores keep them too (docs/cpu-gemm.md compares the paths). tests/test_microkernel
// pins the rule, on the model everywhere and on the instruction where the CPU has it.
//
// Instruction model: every kernel below also exists as portable scalar code with the same tile, the
// same packed layout and the same order of operations (the "model" kernels), compiled on every CPU.
// The packing, the edges and the epilogue are tested through the models on any machine, and each
// instruction kernel is tested bit for bit against its model where the CPU has the instruction.
//
// Tests: build/tests/test_microkernel (instruction against model, bit for bit; the dot step's
// rules) and build/tests/test_gemm_packed (the whole GEMM on every kernel). Benchmark:
// build/bench/matmul, build/bench/instruction_peak.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace mg::kernels::cpu {

// The arithmetic of one step, and so the numerics of a GEMM.
enum class MicroArith : std::uint8_t { Fma, Bf16Dot };

// The kernels mixgrad has. The models run on any CPU; the others need the instructions in their name.
enum class MicroKernelId : std::uint8_t {
  ModelFma,  // scalar std::fma, 12 x 32 tile: the model of Avx512Fma
  ModelBf16Dot,  // scalar bf16_dot_step, 12 x 32 tile: the model of Avx512Bf16Dot
  ModelFma6x16,  // scalar std::fma, 6 x 16 tile: the model of Avx2Fma
  Avx2Fma,  // vfmadd231ps on ymm registers (AVX2 + FMA), 6 x 16
  Avx512Fma,  // vfmadd231ps on zmm registers (AVX-512F), 12 x 32
  Avx512Bf16Dot,  // vdpbf16ps on zmm registers (AVX512_BF16), 12 x 32
};

struct MicroKernel {
  MicroKernelId id;
  std::string_view name;  // "avx512-bf16-dot", "model-fma", ...: what benchmarks and MG_GEMM call it
  MicroArith arith;
  int mr, nr;  // the tile of C: mr rows, nr columns
  // acc: the tile, mr rows of nr f32, ld floats from one row to the next; read first when
  // `accumulate` (else the sums start from +0), written at the end. a, b: the packed micro-panels
  // (layouts above); steps: how many steps of k they hold (pairs for Bf16Dot).
  void (*run)(std::int64_t steps, const void* a, const void* b, float* acc, std::int64_t ld, bool accumulate);
  // The same steps with both operands read in place, nothing packed (nullptr where a kernel has no such
  // entry): step s multiplies row i's value a_lines[i][offsets[s]] into the NR values at b + s * b_stride.
  // On the Bf16Dot kernels each of those 32-bit values is a pair of bf16, element 2s in its low half, as
  // in their packed panels. A stride-1 convolution over zero-padded images (kernels/cpu/conv_shifted.h),
  // where packing copied every value of an image nine times over: in y and dx the rows are output
  // positions, each a line of the padded image from where its window starts, the steps taps (pairs of
  // channels at one tap on the Bf16Dot kernels), b the transposed weight; in dW (the Fma kernels) the rows
  // are taps, the steps positions, b the output gradient as [positions, channels].
  void (*run_gathered)(std::int64_t steps, const float* const* a_lines, const std::int64_t* offsets, const float* b,
                       std::int64_t b_stride, float* acc, std::int64_t ld, bool accumulate) = nullptr;
};

// The kernel with that id, or nullptr when this CPU lacks its instructions (models: never null).
const MicroKernel* microkernel(MicroKernelId id);
std::string_view microkernel_name(MicroKernelId id);  // its name, on any CPU

// Every kernel this CPU runs, models first.
std::vector<const MicroKernel*> runnable_microkernels();

// The model that an instruction kernel must match bit for bit (a model is its own model).
MicroKernelId model_of(MicroKernelId id);

// What this CPU has, read once (__builtin_cpu_supports): the instructions each kernel needs.
struct MicroCpu {
  bool avx2_fma = false;  // AVX2 and FMA (Haswell, Zen 1 onwards)
  bool avx512f = false;  // AVX-512 Foundation
  bool avx512_bf16 = false;  // AVX512_BF16 with AVX512BW/VL (Cooper Lake, Sapphire Rapids, Zen 4 onwards)
  // Whether vdpbf16ps does more multiply-adds a cycle than an f32 FMA, so that bf16 GEMMs gain by it.
  // AMD's do (Zen 4: 2.0x the FMA's, bench/instruction_peak.h); Intel's run it on one port where FMAs
  // have two (0.45-0.48x on a Xeon of family 6, model 207): there the FMA kernel multiplies bf16.
  bool bf16_dot_pays = false;
};
const MicroCpu& micro_cpu();
// Whether a CPU with those features runs that kernel (the models run anywhere).
bool cpu_runs(const MicroCpu& cpu, MicroKernelId id);

// One step of vdpbf16ps on one lane, as the instruction does it (the rules above): acc plus the
// products of the pairs (a_even, a_odd) and (b_even, b_odd), given as bf16 bit patterns.
float bf16_dot_step(float acc, std::uint16_t a_even, std::uint16_t a_odd, std::uint16_t b_even, std::uint16_t b_odd);

}  // namespace mg::kernels::cpu
