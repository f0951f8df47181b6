// The FP4 kernels' entry points (kernels/fp4.h): argument checks, the tensors allocated on the input's
// device, then its backend (MG_ROUTE). The CPU kernels: kernels/cpu/fp4.cpp and gemm_fp4.cpp; the GPU's:
// kernels/cuda/fp4.cu.
#include "kernels/fp4.h"

#include "core/error.h"
#include "core/factory.h"
#include "kernels/route.h"

namespace mg::kernels {

namespace {

const char* format_name(Fp4Format format) { return format == Fp4Format::Nv ? "NVFP4" : "MXFP4"; }

DType scale_dtype(Fp4Format format) { return format == Fp4Format::Nv ? DType::E4M3 : DType::E8M0; }

std::string described(const Tensor& x) {
  return x.defined() ? fmt::format("{} {} on {}", x.dtype(), x.shape(), x.device())
                     : std::string("an undefined tensor");
}

// An Fp4Tensor's parts agree: 2-D codes, one scale code a block, an f32 factor, all on one device.
void check_fp4(const char* kernel, const Fp4Tensor& x, const char* what) {
  const std::string op = fmt::format("kernels::{} ({}, {})", kernel, what, format_name(x.format));
  MG_CHECK(x.codes.defined() && x.codes.dim() == 2 && x.codes.dtype() == DType::E2M1,
           "{}: the codes must be a 2-D e2m1 tensor, got {}", op, described(x.codes));
  MG_CHECK(x.blocks.rows >= 0 && x.blocks.cols >= 0,
           "{}: block extents must be >= 0 (0: the whole dimension), got {} x {}", op, x.blocks.rows, x.blocks.cols);
  const Shape grid = fp8_scale_shape(x.codes.shape(), x.blocks);
  MG_CHECK(x.scales.defined() && x.scales.dtype() == scale_dtype(x.format) && x.scales.shape() == grid &&
               x.scales.device() == x.codes.device(),
           "{}: the scales must be {} {} (one per block) on {}, got {}", op, scale_dtype(x.format), grid,
           x.codes.device(), described(x.scales));
  MG_CHECK(x.tensor_factor.defined() && x.tensor_factor.dtype() == DType::F32 && x.tensor_factor.numel() == 1 &&
               x.tensor_factor.device() == x.codes.device(),
           "{}: the tensor factor must be f32 [1] on {}, got {}", op, x.codes.device(), described(x.tensor_factor));
}

}  // namespace

Fp4Tensor fp4_quantize(const Tensor& x, Fp8Blocks blocks, const Fp4Rule& rule) {
  MG_CHECK(x.defined() && x.dim() == 2 && (x.dtype() == DType::F32 || is_low_precision(x.dtype())),
           "kernels::fp4_quantize: x must be a 2-D f32, f16 or bf16 tensor, got {}",
           x.defined() ? fmt::format("{} {}", x.dtype(), x.shape()) : std::string("an undefined tensor"));
  MG_CHECK(blocks.rows >= 0 && blocks.cols >= 0,
           "kernels::fp4_quantize ({}): block extents must be >= 0 (0: the whole dimension), got {} x {}",
           format_name(rule.format), blocks.rows, blocks.cols);
  MG_CHECK(x.numel() % 2 == 0,
           "kernels::fp4_quantize: x {} has an odd number of elements, but E2M1 codes are two a byte and a tensor of "
           "them must end on a whole byte (core/dtype.h); pad a dimension to an even size first (the FP4 recipes pad "
           "each GEMM's reduction: mg::fp4_quantize_operand)",
           x.shape());
  const Device device = x.device();
  Fp4Tensor out{.codes = Tensor::empty(x.shape(), {.dtype = DType::E2M1, .device = device}),
                .scales = Tensor::empty(fp8_scale_shape(x.shape(), blocks),
                                        {.dtype = scale_dtype(rule.format), .device = device}),
                .tensor_factor = ones({1}, {.device = device}),
                .blocks = blocks,
                .format = rule.format};
  if (x.numel() == 0) return out;
  // The tensor's amax is the largest block amax: one pass over x, then one over the grid.
  const Tensor block_amax = fp8_block_amax(x, blocks);
  const Tensor tensor_amax = fp8_block_amax(block_amax, {0, 0}).reshape({1});
  MG_ROUTE(out.codes, fp4_scales, block_amax, tensor_amax, rule, out.scales, out.tensor_factor);
  MG_ROUTE(out.codes, fp4_encode, x, out.scales, tensor_amax, blocks, rule, out.codes);
  return out;
}

void fp4_gemm(const Fp4Tensor& a, const Fp4Tensor& b, Tensor& c, const GemmEpilogue& epilogue) {
  check_fp4("fp4_gemm", a, "A");
  check_fp4("fp4_gemm", b, "B");
  const Device device = a.codes.device();
  const std::int64_t m = a.codes.size(0), n = b.codes.size(0), k = a.codes.size(1);
  MG_CHECK(b.codes.device() == device && b.codes.size(1) == k,
           "kernels::fp4_gemm: needs A [m, k] and B [n, k] on one device (k along both operands' rows), got A {} "
           "and B {}",
           described(a.codes), described(b.codes));
  MG_CHECK(c.defined() && c.shape() == Shape({m, n}) && c.device() == device &&
               (c.dtype() == DType::F32 || is_low_precision(c.dtype())),
           "kernels::fp4_gemm: C must be f32, f16 or bf16 [{}, {}] on {}, got {}", m, n, device, described(c));
  if (epilogue.bias.defined())
    MG_CHECK(epilogue.bias.dim() == 1 && epilogue.bias.numel() == n && epilogue.bias.device() == device &&
                 (epilogue.bias.dtype() == DType::F32 || epilogue.bias.dtype() == c.dtype()),
             "kernels::fp4_gemm: the bias must be [{}] in f32 or C's dtype {} on {}, got {}", n, c.dtype(), device,
             described(epilogue.bias));
  if (c.numel() > 0) MG_ROUTE(c, fp4_gemm, a, b, c, epilogue);
}

Tensor fp4_decode(const Fp4Tensor& x, DType dtype) {
  check_fp4("fp4_decode", x, "x");
  MG_CHECK(dtype == DType::BF16 || dtype == DType::F32,
           "kernels::fp4_decode: decodes into bf16 (exact: what a GEMM reads) or f32, not {}", dtype);
  Tensor out = Tensor::empty(x.codes.shape(), {.dtype = dtype, .device = x.codes.device()});
  if (out.numel() > 0) MG_ROUTE(out, fp4_decode, x, out);
  return out;
}

}  // namespace mg::kernels
