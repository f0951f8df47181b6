// The FP8 kernel family's entry points (kernels/fp8.h): argument checks, then the backend of the
// output's device (MG_ROUTE, kernels/route.h, as kernels/dispatch.cpp's). The CPU kernels: kernels/cpu/fp8.cpp and
// kernels/cpu/gemm_fp8.cpp; the GPU's: kernels/cuda/fp8.cu and gemm_fp8.cu. Every tensor of a call is on one device.
#include "kernels/fp8.h"

#include <cmath>

#include "core/convert.h"
#include "core/error.h"
#include "kernels/copy.h"
#include "kernels/route.h"

namespace mg::kernels {

namespace {

void check_matrix(const char* kernel, const Tensor& x, const char* what) {
  MG_CHECK(x.defined() && x.dim() == 2, "kernels::{}: {} must be a 2-D tensor, got {}", kernel, what,
           x.defined() ? fmt::format("{}", x.shape()) : std::string("an undefined tensor"));
}

// `x` is on the call's device (the first operand's).
void check_device(const char* kernel, const Tensor& x, const Device& device, const char* what) {
  MG_CHECK(x.device() == device,
           "kernels::{}: {} is on {} but the other operands on {}; every tensor of an FP8 "
           "kernel must be on one device",
           kernel, what, x.device(), device);
}

void check_blocks(const char* kernel, Fp8Blocks blocks) {
  MG_CHECK(blocks.rows >= 0 && blocks.cols >= 0,
           "kernels::{}: block extents must be >= 0 (0: the whole dimension), "
           "got {} x {}",
           kernel, blocks.rows, blocks.cols);
}

void check_scales(const char* kernel, const Tensor& scale, const Shape& expected, const Device& device,
                  const char* what) {
  MG_CHECK(scale.defined() && scale.dtype() == DType::F32 && scale.shape() == expected && scale.device() == device,
           "kernels::{}: {} must be f32 of shape {} (one per block) on {}, the codes' device, got {}", kernel, what,
           expected, device,
           scale.defined() ? fmt::format("{} {} on {}", scale.dtype(), scale.shape(), scale.device())
                           : std::string("an undefined tensor"));
}

void check_fp8(const char* kernel, const Fp8Tensor& x, const char* what) {
  check_matrix(kernel, x.codes, what);
  MG_CHECK(is_fp8(x.codes.dtype()), "kernels::{}: {}'s codes must be e4m3 or e5m2, got {}", kernel, what,
           x.codes.dtype());
  check_blocks(kernel, x.blocks);
  check_scales(kernel, x.scale_inv, fp8_scale_shape(x.codes.shape(), x.blocks), x.codes.device(), "scale_inv");
}

}  // namespace

std::int64_t fp8_block_count(std::int64_t extent, std::int64_t block) {
  if (block <= 0) return 1;
  return (extent + block - 1) / block;
}

Shape fp8_scale_shape(const Shape& shape, Fp8Blocks blocks) {
  return Shape{fp8_block_count(shape[0], blocks.rows), fp8_block_count(shape[1], blocks.cols)};
}

Tensor fp8_block_amax(const Tensor& x, Fp8Blocks blocks) {
  check_matrix("fp8_block_amax", x, "x");
  check_blocks("fp8_block_amax", blocks);
  return MG_ROUTE(x, fp8_block_amax, x, blocks);
}

Fp8Tensor fp8_quantize(const Tensor& x, const Tensor& scale, Fp8Blocks blocks, DType format) {
  check_matrix("fp8_quantize", x, "x");
  check_blocks("fp8_quantize", blocks);
  check_scales("fp8_quantize", scale, fp8_scale_shape(x.shape(), blocks), x.device(), "scale");
  // The scales are checked on the host: a GPU's are read back first (one host wait).
  const Tensor host_scale = scale.device().is_cpu() ? scale : scale.to(Device::cpu());
  const float* s = host_scale.data<float>();
  for (std::int64_t i = 0; i < scale.numel(); ++i)
    MG_CHECK(std::isfinite(s[i]) && s[i] > 0.0f,
             "kernels::fp8_quantize: scale {} of block {} is not a finite positive number; a scale comes from an "
             "amax that is finite and not zero (kernels/fp8_scale.h's fp8_scale, which the recipes use, keeps the "
             "previous scale otherwise)",
             s[i], i);
  Fp8Tensor out{.codes = Tensor::empty(x.shape(), {.dtype = format, .device = x.device()}),
                .scale_inv = Tensor::empty(scale.shape(), {.dtype = DType::F32, .device = x.device()}),
                .blocks = blocks};
  Tensor no_copy;
  MG_ROUTE(x, fp8_quantize, x, scale, blocks, out.codes, no_copy, out.scale_inv);
  return out;
}

namespace {

// Quantises x with scales made on its device (fp8_quantize_fitted, fp8_quantize_delayed): the codes
// asked for, and the column-wise copy's scale_inv as the transpose of the row-wise grid.
Fp8Quantized quantize_copies(const Tensor& x, const Tensor& scale, Shape grid, Fp8Blocks blocks, DType format,
                             Fp8Copies copies) {
  const auto asked = [copies](Fp8Copies c) { return (static_cast<int>(copies) & static_cast<int>(c)) != 0; };
  const TensorOptions code_options{.dtype = format, .device = x.device()};
  Tensor codes = asked(Fp8Copies::RowWise) ? Tensor::empty(x.shape(), code_options) : Tensor();
  Tensor codes_t = asked(Fp8Copies::ColumnWise) ? Tensor::empty({x.size(1), x.size(0)}, code_options) : Tensor();
  Tensor scale_inv = Tensor::empty(grid, {.dtype = DType::F32, .device = x.device()});
  MG_ROUTE(x, fp8_quantize, x, scale, blocks, codes, codes_t, scale_inv);
  Fp8Quantized out;
  if (codes.defined()) out.rowwise = {codes, scale_inv, blocks};
  if (codes_t.defined()) {
    Tensor scale_inv_t = scale_inv.reshape({grid[1], grid[0]});  // a grid of one row or column: the same order
    if (grid[0] > 1 && grid[1] > 1) {
      scale_inv_t = Tensor::empty({grid[1], grid[0]}, {.dtype = DType::F32, .device = x.device()});
      permute(scale_inv, {1, 0}, scale_inv_t);
    }
    out.columnwise = {codes_t, scale_inv_t, {blocks.cols, blocks.rows}};
  }
  return out;
}

}  // namespace

Fp8Quantized fp8_quantize_fitted(const Tensor& x, Fp8Blocks blocks, const Fp8ScaleRule& rule, Fp8Copies copies) {
  check_matrix("fp8_quantize_fitted", x, "x");
  check_blocks("fp8_quantize_fitted", blocks);
  Tensor amax = fp8_block_amax(x, blocks);
  Tensor scale = Tensor::empty(amax.shape(), {.dtype = DType::F32, .device = x.device()});
  MG_ROUTE(x, fp8_scales, amax, rule, scale);
  Fp8Quantized out = quantize_copies(x, scale, amax.shape(), blocks, rule.format, copies);
  out.amax = amax;
  return out;
}

Fp8Quantized fp8_quantize_delayed(const Tensor& x, Tensor& amax_history, Tensor& scale, int role,
                                  const Fp8ScaleRule& rule, bool most_recent, Fp8Copies copies) {
  check_matrix("fp8_quantize_delayed", x, "x");
  MG_CHECK(amax_history.defined() && amax_history.dtype() == DType::F32 && amax_history.dim() == 2 &&
               amax_history.size(1) >= 1 && scale.defined() && scale.dtype() == DType::F32 && scale.dim() == 1 &&
               scale.size(0) == amax_history.size(0) && role >= 0 && role < scale.size(0),
           "kernels::fp8_quantize_delayed: needs f32 amax_history [roles, len >= 1], scale [roles] and a role "
           "below roles; got {}, {} and role {}",
           amax_history.defined() ? fmt::format("{} {}", amax_history.dtype(), amax_history.shape()) : "undefined",
           scale.defined() ? fmt::format("{} {}", scale.dtype(), scale.shape()) : "undefined", role);
  check_device("fp8_quantize_delayed", amax_history, x.device(), "the amax history");
  check_device("fp8_quantize_delayed", scale, x.device(), "the scale");
  MG_CHECK(rule.kind == Fp8ScaleRule::Kind::PerTensor,
           "kernels::fp8_quantize_delayed: delayed scaling keeps one scale per tensor; the rule must be PerTensor");
  Tensor amax = fp8_block_amax(x, {0, 0});
  Fp8Quantized out = quantize_copies(x, scale.slice(role, role + 1), {1, 1}, {0, 0}, rule.format, copies);
  MG_ROUTE(x, fp8_record_amax, amax_history, scale, role, amax, rule, most_recent);
  out.amax = amax;
  return out;
}

Tensor fp8_dequantize(const Fp8Tensor& x) {
  check_fp8("fp8_dequantize", x, "x");
  Tensor out = Tensor::empty(x.codes.shape(), {.dtype = DType::F32, .device = x.codes.device()});
  MG_ROUTE(out, fp8_dequantize, x, out);
  return out;
}

float fp8_accumulate(float sum, double group_sum, const Fp8Accumulator& accumulator) {
  return cpu::cut_to_bits(static_cast<double>(sum) + group_sum, accumulator);
}

void fp8_gemm(const Fp8Tensor& a, const Fp8Tensor& b, Tensor& c, const GemmShape& s, const Fp8Accumulator& accumulator,
              const GemmEpilogue& epilogue) {
  check_fp8("fp8_gemm", a, "A");
  check_fp8("fp8_gemm", b, "B");
  check_matrix("fp8_gemm", c, "C");
  check_device("fp8_gemm", b.codes, a.codes.device(), "B");
  check_device("fp8_gemm", c, a.codes.device(), "C");
  const Shape a_shape = s.transpose_a ? Shape{s.k, s.m} : Shape{s.m, s.k};
  const Shape b_shape = s.transpose_b ? Shape{s.n, s.k} : Shape{s.k, s.n};
  MG_CHECK(s.batch == 1 && a.codes.shape() == a_shape && b.codes.shape() == b_shape && c.shape() == Shape({s.m, s.n}),
           "kernels::fp8_gemm: shapes A {} B {} C {} do not fit m={} n={} k={} (transpose_a={}, transpose_b={}, "
           "batch 1)",
           a.codes.shape(), b.codes.shape(), c.shape(), s.m, s.n, s.k, s.transpose_a, s.transpose_b);
  MG_CHECK(c.dtype() == DType::F32 || is_low_precision(c.dtype()),
           "kernels::fp8_gemm: C must be f32, f16 or bf16, got {}", c.dtype());
  // The blocks' extents along k: chunks must end at every scale change of both operands.
  const std::int64_t ka = s.transpose_a ? a.blocks.rows : a.blocks.cols;
  const std::int64_t kb = s.transpose_b ? b.blocks.cols : b.blocks.rows;
  const std::int64_t ka_whole = ka <= 0 || ka >= s.k ? s.k : ka, kb_whole = kb <= 0 || kb >= s.k ? s.k : kb;
  const std::int64_t small = std::min(ka_whole, kb_whole), large = std::max(ka_whole, kb_whole);
  MG_CHECK(small == 0 || large % small == 0 || large == s.k,
           "kernels::fp8_gemm: the operands' blocks along k ({} and {}) must nest, one a multiple of the other, so "
           "that each chunk of k has one scale per operand",
           ka, kb);
  if (accumulator.limited) {
    MG_CHECK(accumulator.mantissa_bits >= 1 && accumulator.mantissa_bits <= 23 && accumulator.group >= 1 &&
                 accumulator.promote_every >= 0 &&
                 (accumulator.promote_every == 0 || accumulator.promote_every % accumulator.group == 0),
             "kernels::fp8_gemm: a Limited accumulator needs 1 <= mantissa_bits <= 23, group >= 1 and promote_every "
             "a multiple of group (or 0), got {}, {}, {}",
             accumulator.mantissa_bits, accumulator.group, accumulator.promote_every);
    MG_CHECK(small == s.k || (accumulator.promote_every > 0 && small % accumulator.promote_every == 0),
             "kernels::fp8_gemm: block scales change every {} along k, so the Limited accumulator must be promoted "
             "at every block boundary (promote_every must divide {}), got promote_every = {}",
             small, small, accumulator.promote_every);
  }
  if (epilogue.bias.defined())
    MG_CHECK(epilogue.bias.dim() == 1 && epilogue.bias.numel() == s.n && epilogue.bias.device() == c.device() &&
                 (epilogue.bias.dtype() == DType::F32 || is_low_precision(epilogue.bias.dtype())),
             "kernels::fp8_gemm: the bias must be [{}] f32, f16 or bf16 on {}, C's device, got {} {} on {}", s.n,
             c.device(), epilogue.bias.dtype(), epilogue.bias.shape(), epilogue.bias.device());
  MG_ROUTE(c, fp8_gemm, a, b, c, s, accumulator, epilogue);
}

}  // namespace mg::kernels
