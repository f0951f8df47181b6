// FP4 kernels: a 2-D tensor quantised into NVFP4 or MXFP4 (kernels/fp4_scale.h says how) and decoded
// for a GEMM.
//
// An FP4 operand (Fp4Tensor) is E2M1 codes, two a byte; one scale code a block (E4M3 for NVFP4, E8M0 for
// MXFP4); and one f32 factor for the tensor, which the GEMM applies after summing:
//
//   x[r, c] ~= decode(codes[r, c]) * decode(scales[block of (r, c)]) * tensor_factor
//
// Blocks are kernels/fp8.h's Fp8Blocks: {1, 16} (NVFP4's 16 consecutive values), {16, 16} (NVFP4's 2-D
// weight blocks, so that W and W^T quantise alike), {1, 32} (MX); a last block along a dimension may be
// short.
//
// No CPU and no Hopper GPU multiplies FP4 (only Blackwell's Tensor Cores do), so a GEMM decodes: each
// element's decode(code) * decode(scale) is exactly a bf16 value (kernels/fp4_scale.h), the bf16 GEMM
// multiplies exactly those products and sums them in f32, and the tensors' factors multiply the sum.
// That is what an FP4 Tensor Core computes (fp4_gemm below; autograd/fp4.cpp's fp4_matmul calls it).
// The CPU decodes inside the packing of its blocked bf16 GEMM (kernels/cpu/gemm_fp4.cpp), a GPU inside
// the copies of its rung 3 (kernels/cuda/fp4.cu, gemm_mma.cu): no decoded operand is ever written.
// Benchmarks: build/bench/fp8_gemm (CPU), build/bench/cuda_gemm (GPU).
#pragma once

#include <cstdint>
#include <string>

#include "core/host_device.h"
#include "core/tensor.h"
#include "kernels/backends.h"
#include "kernels/fp4_scale.h"
#include "kernels/fp8.h"
#include "kernels/gemm.h"

namespace mg::kernels {

struct Fp4Tensor {
  Tensor codes;  // E2M1 [rows, cols]
  Tensor scales;  // E4M3 (NVFP4) or E8M0 (MXFP4), fp8_scale_shape(codes' shape, blocks)
  Tensor tensor_factor;  // f32 [1]: 1 / S_enc, or MXFP4's 1 (4/3 after stochastic rounding)
  Fp8Blocks blocks;
  Fp4Format format = Fp4Format::Nv;
};

// Element i's block in the scale grid of a [rows, cols] tensor (row-major): the one rule both backends'
// loops use, a pair of elements (one byte of codes) at a time, each element with its own block.
struct Fp4BlockIndex {
  std::int64_t cols, block_rows, block_cols, scale_cols;
  Fp4BlockIndex(const Shape& shape, Fp8Blocks blocks)
      : cols(shape[1]),
        block_rows(blocks.rows > 0 ? blocks.rows : (shape[0] > 1 ? shape[0] : 1)),
        block_cols(blocks.cols > 0 ? blocks.cols : (shape[1] > 1 ? shape[1] : 1)),
        scale_cols(fp8_block_count(shape[1], blocks.cols)) {}
  MG_HOST_DEVICE std::int64_t operator()(std::int64_t i) const {
    return i / cols / block_rows * scale_cols + i % cols / block_cols;
  }
  // One past the last element of i's run in its block: the elements from i up to the block's last
  // column or the row's end, whichever comes first (a CPU loop finds each run's scale once).
  std::int64_t run_end(std::int64_t i) const {
    const std::int64_t column = i % cols, last = column / block_cols * block_cols + block_cols;
    return i - column + (last < cols ? last : cols);
  }
};

// Quantises x (2-D, f32, f16 or bf16) as `rule` says, on x's device, nothing read back to the host: the
// tensor's amax and each block's (kernels/fp8.h's fp8_block_amax), the block scales, then the codes: a
// pair of elements (one byte) at a time, each element with its own block's scale, so any shape packs.
Fp4Tensor fp4_quantize(const Tensor& x, Fp8Blocks blocks, const Fp4Rule& rule);

// decode(code) * decode(scale) for every element (fp4_decode_value), without the tensor's factor, as
// `dtype` (bf16, exact; or f32), on the codes' device.
Tensor fp4_decode(const Fp4Tensor& x, DType dtype = DType::BF16);

// C = act(decode(a) decode(b)^T * a.tensor_factor * b.tensor_factor + bias): a [m, k] and b [n, k], both
// with k along their rows (the layout mg::fp4_quantize_operand makes), C [m, n] f32, f16 or bf16 on
// their device. The products of the decoded values are exact and summed in f32 (kernels/gemm.h's
// contract); the factors multiply the sum, then the bias (f32 or C's dtype, [n]) is added and the
// activation applied in f32, and the result is rounded once into C.
MG_KERNELS(void fp4_gemm(const Fp4Tensor& a, const Fp4Tensor& b, Tensor& c, const GemmEpilogue& epilogue = {});)

// What the CUDA backend alone has (kernels/cuda/fp4.cu, in builds with MG_WITH_CUDA).
namespace cuda {
// fp4_gemm by a separate pass: both operands decoded into bf16 tensors, the bf16 GEMM into f32, then
// the factors, bias and activation. What fp4_gemm runs where rung 3's decoding copies do not take the
// operands (an odd k, blocks along k not a multiple of 8); the benchmark's and the tests' reference.
void fp4_gemm_decoded(const Fp4Tensor& a, const Fp4Tensor& b, Tensor& c, const GemmEpilogue& epilogue = {});
// The kernel fp4_gemm runs for these operands: "fp4 mma 128x128x64, decoded in registers" (rung 3 with
// Copy::Fp4), or "decode pass + the bf16 gemm".
std::string fp4_gemm_kernel_name(const Fp4Tensor& a, const Fp4Tensor& b);
}  // namespace cuda

// The backends' kernels (the entry points above check and allocate).
MG_BACKENDS(
    // scales[b] = fp4_block_scale(block_amax[b], tensor_amax[0]); tensor_factor[0] likewise.
    void fp4_scales(const Tensor& block_amax, const Tensor& tensor_amax, const Fp4Rule& rule, Tensor& scales,
                    Tensor& tensor_factor);
    // codes[i] = fp4_encode_value(x[i], the factor of i's block, rule, i).
    void fp4_encode(const Tensor& x, const Tensor& scales, const Tensor& tensor_amax, Fp8Blocks blocks,
                    const Fp4Rule& rule, Tensor& codes);
    void fp4_decode(const Fp4Tensor& x, Tensor& out);)

}  // namespace mg::kernels
