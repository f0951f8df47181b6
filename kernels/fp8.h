// FP8 kernels: scales per block, quantisation into codes, and the FP8 GEMM with its accumulator.
//
// An FP8 operand is codes and scales (Fp8Tensor). The scale of a block multiplies its values before
// they are rounded into codes, so that the block's largest magnitude lands near the format's max:
//
//   codes = encode(x * scale, saturate)            scale = fp8_max / amax (per tensor or per block)
//   x    ~= decode(codes) * scale_inv               scale_inv = 1 / scale, kept in f32
//
// Which blocks share a scale is Fp8Blocks, rows x cols of the 2-D tensor (0: the whole extent):
//   {0, 0}      one scale for the tensor (per-tensor current or delayed scaling, Transformer Engine)
//   {1, 128}    1 x 128 tiles: activations and gradients along their reduction dimension (DeepSeek-V3)
//   {128, 128}  128 x 128 blocks: weights (DeepSeek-V3)
//   {1, 32}     MX blocks of 32 along the reduction dimension, power-of-two scales (OCP MX v1.0)
//   {128, 1}, {32, 1}  the same blocks down the columns: the operands of a weight gradient, whose
//                      reduction runs over the batch (the rows)
// How a scale is chosen from the amax (current, delayed, power of two, MX's rule) is kernels/fp8_scale.h's
// rule (fp8_scale), which the recipes apply (autograd/fp8.h's fp8_scale_for, fp8_quantize_fitted below);
// the quantisation and the GEMM take the scales as given.
//
// The GEMM (kernels/gemm.h's shapes and transposes) multiplies codes: every product of two FP8 values
// is exact in f32. It walks k in chunks over which both operands' scales are constant (the blocks'
// extent along k, or all of k for per-tensor scales), sums each chunk's products, and adds the chunk
// to an f32 accumulator times the two scales: acc = fma(chunk_sum, scale_inv_a * scale_inv_b, acc).
// How a chunk is summed is Fp8Accumulator: in f32 (the contract, as for f16), or in a model of the
// accumulator Hopper's FP8 Tensor Cores really have (below). Then the epilogue (bias, activation) and
// one rounding into C's dtype, as for every GEMM.
#pragma once

#include <cstdint>
#include <string>

#include "core/fp8.h"
#include "core/tensor.h"
#include "kernels/backends.h"
#include "kernels/fp8_scale.h"
#include "kernels/gemm.h"

namespace mg::kernels {

struct Fp8Blocks {
  std::int64_t rows = 0, cols = 0;  // 0: the whole extent of that dimension
  bool operator==(const Fp8Blocks&) const = default;
};

// Codes and the dequantisation factor of each block: value = decode(code) * scale_inv[block].
struct Fp8Tensor {
  Tensor codes;  // E4M3 or E5M2, 2-D
  Tensor scale_inv;  // f32 [ceil(rows / block rows), ceil(cols / block cols)]
  Fp8Blocks blocks;
};

// The shape of the scale grid of a [rows, cols] tensor cut into `blocks`.
std::int64_t fp8_block_count(std::int64_t extent, std::int64_t block);  // ceil(extent / block), 1 for block 0
Shape fp8_scale_shape(const Shape& shape, Fp8Blocks blocks);

// The largest |x| of every block, f32, fp8_scale_shape(x.shape(), blocks); NaN where a block holds one.
// x: a 2-D f32, f16 or bf16 tensor.
MG_KERNELS(Tensor fp8_block_amax(const Tensor& x, Fp8Blocks blocks);)

// Rounds x * scale[block] into `format` codes (saturating: core/fp8.h) and keeps scale_inv = 1 / scale
// (rounded to f32; exact for power-of-two scales). scale: f32, fp8_scale_shape(x.shape(), blocks), every
// element finite and positive.
Fp8Tensor fp8_quantize(const Tensor& x, const Tensor& scale, Fp8Blocks blocks, DType format);

// decode(code) * scale_inv[block] as f32: what the codes stand for.
Tensor fp8_dequantize(const Fp8Tensor& x);

// The recipes' quantisation (autograd/fp8.cpp): the scales made where the amax is measured, and the
// copies the GEMMs read.
//
// An FP8 GEMM reads its operands K-major (the reduction dimension contiguous): an FP8 Tensor Core
// fragment holds 4 consecutive k of a row, ldmatrix has no byte transpose before sm_100, and Hopper's
// wgmma takes no transpose for e4m3/e5m2. So a tensor that a GEMM reduces along its rows (x and dy in
// the weight gradient, W in the input gradient) is quantised into its column-wise copy: the codes of
// x^T, [cols, rows], written by the same kernel (Transformer Engine's "columnwise" data).
enum class Fp8Copies : std::uint8_t { RowWise = 1, ColumnWise = 2, Both = 3 };
struct Fp8Quantized {
  Fp8Tensor rowwise;  // codes [rows, cols]; undefined tensors unless asked for
  Fp8Tensor columnwise;  // codes of x^T [cols, rows], blocks and scale_inv transposed; likewise
  Tensor amax;  // f32, fp8_scale_shape(x.shape(), blocks): what the scales came from
};

// The amax of each block, its scale by `rule` (kernels/fp8_scale.h; the previous scale of an unusable
// per-tensor amax is 1) and the codes, all on x's device: on a GPU nothing waits for the host.
Fp8Quantized fp8_quantize_fitted(const Tensor& x, Fp8Blocks blocks, const Fp8ScaleRule& rule, Fp8Copies copies);

// Delayed scaling, one scale for x: the codes made with scale[role] (the scale the history chose
// last step), then x's amax recorded in row `role` of amax_history and scale[role] updated
// (fp8_record_amax), all on x's device, where the history must be: f32 amax_history [roles, len >= 1]
// and scale [roles]. `rule.kind` must be PerTensor.
Fp8Quantized fp8_quantize_delayed(const Tensor& x, Tensor& amax_history, Tensor& scale, int role,
                                  const Fp8ScaleRule& rule, bool most_recent, Fp8Copies copies);

// The accumulator of an FP8 GEMM chunk.
//
// F32: products summed in f32, the contract; on the CPU the bf16 dot-product microkernel (every FP8
// value is a bf16 value). On a GPU it was written for Tensor Cores that accumulate in fewer bits than
// f32 (below): promotion after every instruction, each mma.sync (32 products) starting from 0 and
// its result added to the f32 sum, which is the Limited model below with the device's accumulator
// (mma_sync_fp8_accumulator) and promote_every = 32 (kernels/cuda/gemm_fp8.cu).
//
// Limited: a model of the Hopper FP8 Tensor Core's accumulator, which keeps fewer bits than f32.
//   - DeepSeek-V3 technical report (arXiv 2412.19437, section 3.3.2, measured on an H800): "the
//     accumulation precision of FP8 GEMM on NVIDIA H800 GPUs is limited to retaining around 14 bits",
//     with a maximum relative error of nearly 2% at K = 4096 for random inputs.
//   - SageAttention2 (Zhang et al., arXiv 2411.10958, section 4.3): the accumulator of
//     mma.f32.f8.f8.f32 is FP22, 1 sign, 8 exponent and 13 mantissa bits.
//   So mantissa_bits = 13 (14 significant bits). How it rounds is not published: `rounding` is an
//   assumption (Truncate by default: Fasi et al., PeerJ CS 2021, measured truncation when the f16
//   Tensor Cores of the V100, T4 and A100 align their summands).
//   Measured on an H200 (scripts/gpu-check, 2026-11-28, bench/results/fp8_accumulator-h200-2026-11-28.txt):
//   mixgrad's kernel, mma.sync.m16n8k32 chained with no promotion, summed 256 and 255 products of
//   2^-12 exactly, which takes 21 significant bits: the mma.sync of sm_90 does not cut its sum to 14
//   bits. Its SASS says why: for sm_90 the instruction becomes f16 conversions and HMMA with f32
//   accumulation. DeepSeek-V3's limit is of Hopper's wgmma (QGMMA), which mixgrad does not use yet. So
//   this model is the CPU's (E10 of mixgrad repro) and the CUDA emulator's when it reports an Ada GPU
//   (mma_sync_fp8_accumulator below).
//   The model: the products of one instruction's k (32 for m16n8k32) are summed exactly (assumed:
//   the hardware may truncate there too), and that group's sum is added to the running sum, which is
//   then cut to `mantissa_bits`.
//   Promotion (DeepSeek-V3's remedy): every `promote_every` products (N_C = 128 in the report) the
//   running sum is added to an f32 accumulator and restarts from 0; 0 never promotes inside a chunk.
//   Block scales vary along k, so a chunk ends at least at every block boundary and promote_every must
//   divide the chunk's length.
enum class Fp8Rounding : std::uint8_t { Truncate, Nearest };
struct Fp8Accumulator {
  bool limited = false;
  int mantissa_bits = 13;  // SageAttention2's FP22 (1-8-13); DeepSeek-V3's "around 14 bits"
  Fp8Rounding rounding = Fp8Rounding::Truncate;  // assumed, see above
  int group = 32;  // products summed exactly before each rounded addition: m16n8k32's k
  int promote_every = 128;  // DeepSeek-V3's N_C; 0: never
};

// One step of the Limited accumulator: sum + group_sum, cut to `mantissa_bits` as the model says.
float fp8_accumulate(float sum, double group_sum, const Fp8Accumulator& accumulator);
// The accumulator of one FP8 mma.sync.m16n8k32 as a GPU runs it, by compute capability: what the CUDA
// emulator computes (kernels/cuda/mma_fp8.cuh) and the only Limited accumulator a GPU's fp8_gemm takes
// (only promote_every is the kernel's choice).
//   sm_89 (Ada): QMMA.16832, FP8 Tensor Cores. kAdaFp8Accumulator: the Limited model with its
//     defaults (13 mantissa bits, truncation, 32 products), the width DeepSeek-V3 and SageAttention2
//     report for Hopper's FP8 Tensor Cores. Assumed: no Ada GPU has measured it here.
//   sm_90 (Hopper): nvcc compiles the instruction to F2FP conversions of the codes into f16
//     and two HMMA.16816 with f32 accumulation (their SASS: scripts/check-sass), and an H200 summed in
//     f32 (bench/results/fp8_accumulator-h200-2026-11-28.txt). kHopperMmaSyncFp8Accumulator: the 16
//     products of each HMMA summed exactly, added to the running sum and rounded to f32 (nearest; the
//     hardware's rounding inside an HMMA is its own, as for every f16 GEMM). On Hopper only wgmma
//     (QGMMA) is FP8 hardware, and it is there that the 14-bit accumulator was measured.
inline constexpr Fp8Accumulator kAdaFp8Accumulator{.limited = true, .promote_every = 0};
inline constexpr Fp8Accumulator kHopperMmaSyncFp8Accumulator{
    .limited = true, .mantissa_bits = 23, .rounding = Fp8Rounding::Nearest, .group = 16, .promote_every = 0};
// Hopper's FP8 Tensor Cores proper, wgmma's QGMMA (kernels/cuda/wgmma.cuh's model; rung 4): the width
// DeepSeek-V3 measured on an H800 and SageAttention2 reports, 13 mantissa bits, truncation assumed,
// each instruction's 32 products summed exactly. Assumed until tests/test_cuda_wgmma.cpp's FP8 case
// runs on an H100 or H200 (it prints what the hardware keeps, and fails where the model is wrong).
// A GPU's fp8_gemm asked for this accumulator on compute capability 9.0 runs on rung 4
// (kernels/cuda/gemm_fp8_wgmma.cu: DeepSeek-V3's promotion every 128 products, or never), the only
// rung that has it; its bits are Ada's, so on sm_89 the same request runs on mma.sync.
inline constexpr Fp8Accumulator kHopperWgmmaFp8Accumulator{.limited = true, .promote_every = 0};
// Blackwell (sm_100, sm_120) has an FP8 mma.sync on its Tensor Cores again: modelled as Ada's, unmeasured.
constexpr Fp8Accumulator mma_sync_fp8_accumulator(int compute_capability) {
  return compute_capability / 10 == 9 ? kHopperMmaSyncFp8Accumulator : kAdaFp8Accumulator;
}

// C = act(op(A) op(B) * scales + bias), A and B in FP8 (E4M3 and E5M2 may be mixed), C in f32, f16
// or bf16; op(A): [m, k] from a's codes [m, k] (or [k, m] with transpose_a), op(B) likewise; batch 1.
MG_KERNELS(void fp8_gemm(const Fp8Tensor& a, const Fp8Tensor& b, Tensor& c, const GemmShape& shape,
                         const Fp8Accumulator& accumulator = {}, const GemmEpilogue& epilogue = {});)

// The backends' quantisation writes into given tensors (the entry points above make them).
MG_BACKENDS(
    // codes and codes_t (x^T's codes) are each written when defined; scale: one per block, read from
    // where it starts (a slice of a history's scales may be passed).
    void fp8_quantize(const Tensor& x, const Tensor& scale, Fp8Blocks blocks, Tensor& codes, Tensor& codes_t,
                      Tensor& scale_inv);
    void fp8_scales(const Tensor& amax, const Fp8ScaleRule& rule, Tensor& scale);
    void fp8_record_amax(Tensor& amax_history, Tensor& scale, int role, const Tensor& amax, const Fp8ScaleRule& rule,
                         bool most_recent);
    void fp8_dequantize(const Fp8Tensor& x, Tensor& out);)

namespace cpu {
// An f32 sum cut to the accumulator's bits (kernels/cpu/gemm_fp8.cpp): the FP8 GEMM's model of one promotion.
float cut_to_bits(double value, const Fp8Accumulator& accumulator);
// The microkernel the F32 accumulator runs on ("avx512-bf16-dot", ...), for the benchmark.
std::string fp8_gemm_kernel_name();
}  // namespace cpu

// The same on a GPU (kernels/cuda/fp8.cu, gemm_fp8.cu): bit-identical to the CPU's quantisation; the GEMM on FP8
// mma.sync (sm_89 and later), equal bit for bit on the emulator to the CPU's Limited model with the
// device's accumulator (fp8_mma_accumulator; F32: promoted every 32 products). Two kernels give the
// same bits: rung 3 (gemm_fp8_mma.cu: cp.async, ldmatrix) for K-major operands (every recipe's
// scales), rung 1 (fragments from global memory) for the rest; fp8_gemm_kernel_name says which. On
// compute capability 9.0, wgmma's accumulator (kHopperWgmmaFp8Accumulator) runs on rung 4
// (gemm_fp8_wgmma.cu, QGMMA), equal bit for bit on the emulator to the CPU's Limited model with it.
namespace cuda {
// mma_sync_fp8_accumulator of the device's compute capability.
Fp8Accumulator fp8_mma_accumulator(const Device& device);
// The kernel a GEMM of these operands runs on (C of dtype `out`): for wgmma's accumulator
// (kHopperWgmmaFp8Accumulator) on compute capability 9.0, rung 4 ("fp8 wgmma 128x128x128, 6 stages,
// promoted every 128", "..., scales every 128": kernels/cuda/gemm_fp8_wgmma.h says what it takes; a
// name starting "none:" where it does not, and fp8_gemm refuses); otherwise rung 3 ("fp8 mma
// 128x128x128, 3 stages" per tensor with the F32 accumulator; "fp8 mma 64x128x128, 3 stages, scales
// every 128" etc.: gemm_fp8_mma.h) for K-major operands (transpose_b, not transpose_a), k a multiple of
// 16, scales per tensor or changing every 32 or 128 along k, and promotions after every instruction or
// only at the chunks' ends; rung 1 ("... (rung 1)") for the rest.
std::string fp8_gemm_kernel_name(const Fp8Tensor& a, const Fp8Tensor& b, const GemmShape& shape,
                                 const Fp8Accumulator& accumulator, DType out = DType::F32);
}  // namespace cuda

}  // namespace mg::kernels
