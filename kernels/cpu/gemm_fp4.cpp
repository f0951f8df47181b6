// The FP4 GEMM on the CPU (kernels/fp4.h): the blocked GEMM of kernels/cpu/gemm_packed.h with E2M1
// operands, decoded inside packing (each value times its block's E4M3 or E8M0 scale, an exact bf16:
// kernels/cpu/gemm_pack_codes.cpp) and summed in f32 on the FP8 GEMM's microkernel (vdpbf16ps where the
// CPU has it); the tensors' two factors multiply the sum in the epilogue. No decoded copy of an operand
// is written: a decode pass of each operand and the bf16 GEMM took 2.9 times as long at 1024^3 on two
// cores (docs/results/cpu-bench.md#fp4-gemm).
// Tests: build/tests/test_fp4_gemm. Benchmark: build/bench/fp8_gemm.
#include "kernels/cpu/gemm_packed.h"
#include "kernels/fp4.h"

namespace mg::kernels::cpu {

GemmOperand fp4_gemm_operand(const Fp4Tensor& x) {
  const Fp4BlockIndex blocks(x.codes.shape(), x.blocks);
  return {.data = x.codes.data_ptr(),
          .dtype = DType::E2M1,
          .line_stride = x.codes.size(1),
          .k_stride = 1,
          .fp4_scales = {.data = x.scales.data_ptr(),
                         .block_lines = blocks.block_rows,
                         .block_k = blocks.block_cols,
                         .line_stride = blocks.scale_cols,
                         .k_stride = 1},
          .fp4_format = x.format};
}

void fp4_gemm(const Fp4Tensor& a, const Fp4Tensor& b, Tensor& c, const GemmEpilogue& epilogue) {
  const Tensor bias = epilogue.bias.defined() ? epilogue.bias.to(DType::F32) : Tensor();
  const PackedGemm gemm{.kernel = &code_gemm_microkernel(),
                        .a = fp4_gemm_operand(a),
                        .b = fp4_gemm_operand(b),
                        .k = a.codes.size(1),
                        .c = c.data_ptr(),
                        .c_dtype = c.dtype(),
                        .ldc = c.size(1),
                        .bias = bias.defined() ? bias.data<float>() : nullptr,
                        .activation = epilogue.activation,
                        .alpha = a.tensor_factor.data<float>()[0] * b.tensor_factor.data<float>()[0]};
  packed_gemm_parallel(gemm, c.size(0), c.size(1));
}

}  // namespace mg::kernels::cpu
