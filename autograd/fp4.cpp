// FP4 operands and their GEMM (autograd/fp4.h). Tests: build/tests/test_fp4_quantize, build/tests/test_fp4_linear.
#include "autograd/fp4.h"

#include <algorithm>
#include <numeric>

#include "autograd/ops.h"
#include "core/error.h"
#include "core/factory.h"
#include "kernels/fp4.h"

namespace mg {

namespace {

constexpr std::int64_t kHadamardBlock = 16;

bool nvfp4(const Fp8Options& options) { return options.scaling == Fp8Scaling::Nvfp4; }

// The blocks of operand `role`, quantised along its columns (every copy is made K-major first).
kernels::Fp8Blocks blocks_for(Fp8Role role, const Fp8Options& options) {
  if (!nvfp4(options)) return {1, 32};
  if (role == Fp8Role::Weight && options.weight_blocks_2d) return {16, 16};
  return {1, 16};
}

// The weight gradient's operands: x and dy reduced along their rows (the batch).
bool weight_gradient_operand(Fp8Role role, bool reduce_rows) { return reduce_rows && role != Fp8Role::Weight; }

}  // namespace

std::int64_t fp4_padded_rows(std::int64_t rows, const Fp8Options& options) {
  std::int64_t multiple = blocks_for(Fp8Role::Input, options).cols;
  if (options.hadamard != HadamardMode::Off) multiple = std::lcm(multiple, kHadamardBlock);
  return (rows + multiple - 1) / multiple * multiple;
}

kernels::Fp4Tensor fp4_quantize_operand(const Tensor& x, Fp8Role role, bool reduce_rows, const Fp8Options& options,
                                        const Fp4Stream& stream) {
  MG_CHECK(is_fp4(options.scaling), "mg::fp4_quantize_operand: the options' scaling must be Nvfp4 or Mxfp4");
  MG_CHECK(x.defined() && x.dim() == 2, "mg::fp4_quantize_operand: x must be 2-D, got {}",
           x.defined() ? fmt::format("{}", x.shape()) : std::string("an undefined tensor"));
  NoGradGuard no_grad;  // quantisation is inside fp8_linear's one recorded op
  Tensor source = reduce_rows ? transpose(x, 0, 1) : x;  // K-major: the reduction along the columns
  if (weight_gradient_operand(role, reduce_rows)) {
    const std::int64_t rows = source.size(1), padded = fp4_padded_rows(rows, options);
    if (padded != rows)
      source = cat({source, zeros({source.size(0), padded - rows}, {.dtype = source.dtype(), .device = x.device()})},
                   1);
    if (options.hadamard != HadamardMode::Off)
      source = hadamard(source.to(DType::F32), {.block = kHadamardBlock,
                                                .random_signs = options.hadamard == HadamardMode::Random,
                                                .seed = options.seed});
  }
  if (source.size(1) % 2 != 0)  // both operands of a GEMM share k: an odd k gets a zero column in each
    source = cat({source, zeros({source.size(0), 1}, {.dtype = source.dtype(), .device = x.device()})}, 1);
  const kernels::Fp4Rule rule{.format = nvfp4(options) ? kernels::Fp4Format::Nv : kernels::Fp4Format::Mx,
                              .stochastic = role == Fp8Role::GradOutput && options.stochastic_gradients,
                              .stream = {.seed = stream.seed,
                                         .step = stream.step,
                                         .tensor = 4 * stream.layer + (reduce_rows ? 1u : 0u)}};
  return kernels::fp4_quantize(source, blocks_for(role, options), rule);
}

Tensor fp4_matmul(const kernels::Fp4Tensor& a, const kernels::Fp4Tensor& b, DType out, const Tensor& bias) {
  const OpSpan span("fp4_matmul");
  MG_CHECK(a.codes.defined() && b.codes.defined() && a.codes.dim() == 2 && b.codes.dim() == 2 &&
               a.codes.size(1) == b.codes.size(1),
           "mg::fp4_matmul: needs a [m, k] and b [n, k] (both K-major), got {} and {}",
           a.codes.defined() ? fmt::format("{}", a.codes.shape()) : std::string("undefined"),
           b.codes.defined() ? fmt::format("{}", b.codes.shape()) : std::string("undefined"));
  NoGradGuard no_grad;
  Tensor c = Tensor::empty({a.codes.size(0), b.codes.size(0)}, {.dtype = out, .device = a.codes.device()});
  // Decoded exactly into bf16 as the GEMM reads them, summed in f32, then the tensors' factors and the
  // bias, rounded once (kernels/fp4.h).
  kernels::fp4_gemm(a, b, c, {.bias = bias.defined() ? bias.to(DType::F32) : Tensor()});
  return c;
}

}  // namespace mg
