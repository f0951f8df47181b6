// Packing for mixgrad's CPU GEMM (kernels/cpu/gemm_packed.h): copies one micro-panel of op(A) or op(B)
// (a GemmOperand: strided, runs or window) into the layout its microkernel reads (microkernel.h),
// converting as it copies, so that no widened copy of an operand is ever made:
//
//   pack_f32          out[k][width]   f32: f32 copied, f16 widened by F16C, bf16 by a shift
//   pack_bf16_pairs   out[s][width]   bf16 pairs (k0 + 2s low, k0 + 2s + 1 high): for vdpbf16ps
//
// Lines past `lines` and a missing last k of a pair are zero. Layouts contiguous along the lines are
// copied a run at a time; layouts contiguous along k are transposed 8 x 8 in AVX2 registers; window
// and runs operands (convolution) are gathered by row runs of the image; FP8 and FP4 operands are
// decoded into bf16 lines first (gemm_pack_codes.cpp). The implementation:
// kernels/cpu/gemm_pack.cpp. Tests: build/tests/test_gemm_packed (every layout, edge and operand kind).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/gemm_packed.h"

namespace mg::kernels::cpu {

// A thread's working memory for packing, reused from one panel to the next.
struct PackBuffers {
  std::vector<float> line;  // one line of an operand, widened
  std::vector<std::uint16_t> raw;  // gathered f16/bf16 bits of a window operand
  std::vector<float> lines_f32;  // a runs operand's lines (or a window's, positions along k) copied out
  std::vector<std::uint16_t> lines_bits;  // the same for f16 and bf16 bits
  std::vector<std::uint16_t> decoded;  // an FP8 or FP4 operand's lines, decoded into bf16
};

// buffer's data, grown to at least count elements first (a thread's buffers are kept: they only grow).
template <class T>
T* reserve(std::vector<T>& buffer, std::int64_t count) {
  if (buffer.size() < static_cast<std::size_t>(count)) buffer.resize(static_cast<std::size_t>(count));
  return buffer.data();
}

// Whether x holds FP8 or FP4 codes (gemm_packed.h), which pack_f32 and pack_bf16_pairs decode first.
bool is_code_operand(const GemmOperand& x);
// `lines` lines of such an x from line0, over k in [k0, k0 + kc), decoded into bf16 (exact: FP8 values
// as they are, E2M1 values times their block's scale, fp4_decode_value) in buffers.decoded; returns the
// bf16 operand [lines, kc] over them, which the packers above lay out as they would any bf16 operand.
// kernels/cpu/gemm_pack_codes.cpp.
GemmOperand decode_codes(const GemmOperand& x, std::int64_t line0, std::int64_t lines, std::int64_t k0, std::int64_t kc,
                         PackBuffers& buffers);

// `lines` lines of x from line0, over k in [k0, k0 + kc), as one FMA micro-panel of `width` lines.
void pack_f32(const GemmOperand& x, std::int64_t line0, std::int64_t lines, std::int64_t k0, std::int64_t kc, int width,
              float* out, PackBuffers& buffers);
// The same lines as one Bf16Dot micro-panel; x must hold bf16.
void pack_bf16_pairs(const GemmOperand& x, std::int64_t line0, std::int64_t lines, std::int64_t k0, std::int64_t kc,
                     int width, std::uint32_t* out, PackBuffers& buffers);

}  // namespace mg::kernels::cpu
