// The FP8 GEMM on the CPU (kernels/fp8.h): codes decoded inside packing, chunks of k with constant
// scales summed on a microkernel (F32 accumulator: the blocked GEMM of kernels/cpu/gemm_packed.h) or
// by the scalar model of Hopper's accumulator (Limited), each chunk added to an f32 sum times its two
// scales. Tests: build/tests/test_fp8_gemm. Benchmark: build/bench/fp8_gemm.
//
// Why a microkernel fits: every E4M3 and E5M2 value is exactly a bf16 value, so packing turns each code
// into its bf16 bits (a 256-entry table, kernels/cpu/gemm_pack_codes.cpp) and vdpbf16ps multiplies them
// at bf16 speed; the products of two FP8 values (at most 4 + 4 significant bits) are exact in f32, and
// each is added with one f32 rounding, exactly as the F32 contract says. A CPU without AVX512_BF16
// decodes to f32 for its FMA kernel: the same products, the same sums in another order of rounding
// (microkernel.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/convert.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/microkernel.h"
#include "kernels/cpu/parallel.h"
#include "kernels/fp8.h"
#include "kernels/pointwise.h"

namespace mg::kernels::cpu {

const MicroKernel& code_gemm_microkernel() {
  // The dot kernel where it outruns the FMA, as for bf16 GEMMs (blas_choice.h).
  if (micro_cpu().bf16_dot_pays)
    if (const MicroKernel* kernel = microkernel(MicroKernelId::Avx512Bf16Dot)) return *kernel;
  for (MicroKernelId id : {MicroKernelId::Avx512Fma, MicroKernelId::Avx2Fma})
    if (const MicroKernel* kernel = microkernel(id)) return *kernel;
  return *microkernel(MicroKernelId::ModelFma);
}

namespace {

// One operand as the GEMM walks it: element (line, k) of op(A) (line = row i) or op(B) (line = column j),
// with the scale of its block. `transposed` is the GemmShape flag that says how the codes are stored.
struct CodeOperand {
  const std::uint8_t* codes;
  DType format;
  std::int64_t line_stride, k_stride;
  const float* scale_inv;
  std::int64_t block_lines, block_k, scale_stride_line, scale_stride_k;  // scale of (l, k): l / bl, k / bk

  // op(X) is [lines, k]; the codes are stored [lines, k], or [k, lines] when k_major.
  CodeOperand(const Fp8Tensor& x, bool k_major, std::int64_t lines, std::int64_t k)
      : codes(static_cast<const std::uint8_t*>(x.codes.data_ptr())), format(x.codes.dtype()) {
    const std::int64_t stored_cols = k_major ? lines : k;
    const std::int64_t block_rows = x.blocks.rows > 0 ? x.blocks.rows : std::max<std::int64_t>(1, k_major ? k : lines);
    const std::int64_t block_cols = x.blocks.cols > 0 ? x.blocks.cols : std::max<std::int64_t>(1, stored_cols);
    const std::int64_t scale_cols = fp8_block_count(stored_cols, x.blocks.cols);
    line_stride = k_major ? 1 : k;
    k_stride = k_major ? lines : 1;
    scale_inv = x.scale_inv.data<float>();
    block_lines = k_major ? block_cols : block_rows;
    block_k = k_major ? block_rows : block_cols;
    scale_stride_line = k_major ? 1 : scale_cols;
    scale_stride_k = k_major ? scale_cols : 1;
  }
  std::uint8_t code(std::int64_t line, std::int64_t k) const { return codes[line * line_stride + k * k_stride]; }
  // The same operand for the packed GEMM (kernels/cpu/gemm_packed.h): its codes and its scale grid.
  GemmOperand packed() const {
    return {.data = codes, .dtype = format, .line_stride = line_stride, .k_stride = k_stride};
  }
  BlockGrid grid() const {
    return {.data = scale_inv,
            .block_lines = block_lines,
            .block_k = block_k,
            .line_stride = scale_stride_line,
            .k_stride = scale_stride_k};
  }
  // Whether one scale covers all `lines` x k.
  bool one_scale(std::int64_t lines, std::int64_t k) const { return block_lines >= lines && block_k >= k; }
  float scale(std::int64_t line, std::int64_t k) const { return scale_inv[grid().at(line, k)]; }
};

// k cut into chunks of constant scales: [begin(c), end(c)).
struct KChunks {
  std::int64_t k, length;
  std::int64_t count() const { return std::max<std::int64_t>(1, (k + length - 1) / length); }
  std::int64_t begin(std::int64_t c) const { return c * length; }
  std::int64_t end(std::int64_t c) const { return std::min(k, (c + 1) * length); }
};

}  // namespace

// The rounding step of the Limited accumulator, exact in double before the one cut to mantissa_bits.
float cut_to_bits(double value, const Fp8Accumulator& acc) {
  if (value == 0.0 || !std::isfinite(value)) return static_cast<float>(value);
  int exponent = 0;
  const double fraction = std::frexp(value, &exponent);  // value = fraction * 2^exponent, |fraction| in [0.5, 1)
  const double scaled = std::ldexp(fraction, acc.mantissa_bits + 1);  // the significant bits above the point
  const double kept = acc.rounding == Fp8Rounding::Truncate ? std::trunc(scaled) : std::nearbyint(scaled);
  return static_cast<float>(std::ldexp(kept, exponent - acc.mantissa_bits - 1));
}

namespace {

// One chunk's sum for element (i, j) through the Limited model: groups of `group` exact products, each
// added to a running sum cut to mantissa_bits, promoted into f32 every promote_every products.
float limited_chunk_sum(const CodeOperand& a, const CodeOperand& b, std::int64_t i, std::int64_t j, std::int64_t k0,
                        std::int64_t k1, const Fp8Accumulator& acc) {
  float promoted = 0.0f, running = 0.0f;
  for (std::int64_t g = k0; g < k1; g += acc.group) {
    double group_sum = 0.0;  // products of FP8 values are exact in f64, and so (in practice) their sum
    for (std::int64_t k = g; k < std::min(k1, g + acc.group); ++k)
      group_sum += static_cast<double>(fp8::decode(a.code(i, k), a.format)) * fp8::decode(b.code(j, k), b.format);
    running = fp8_accumulate(running, group_sum, acc);
    const std::int64_t done = std::min(k1, g + acc.group) - k0;
    if (acc.promote_every > 0 && done % acc.promote_every == 0) promoted += running, running = 0.0f;
  }
  return promoted + running;
}

// The epilogue of one row of f32 results: bias, activation, one rounding into C.
void store_row(float* row, std::int64_t cols, std::int64_t j0, const GemmEpilogue& epilogue, const float* bias,
               Tensor& c, std::int64_t offset) {
  for (std::int64_t col = 0; col < cols; ++col) {
    float v = row[col] + (bias ? bias[j0 + col] : 0.0f);
    if (epilogue.activation == Activation::Relu) v = functors::Relu{}(v);
    if (epilogue.activation == Activation::Gelu) v = functors::Gelu{}(v);
    row[col] = v;
  }
  convert(row, DType::F32, static_cast<std::byte*>(c.data_ptr()) + dtype_bytes(c.dtype(), offset), c.dtype(), cols);
}

}  // namespace

std::string fp8_gemm_kernel_name() { return std::string(code_gemm_microkernel().name); }

void fp8_gemm(const Fp8Tensor& a, const Fp8Tensor& b, Tensor& c, const GemmShape& s, const Fp8Accumulator& accumulator,
              const GemmEpilogue& epilogue) {
  const CodeOperand oa(a, s.transpose_a, s.m, s.k), ob(b, !s.transpose_b, s.n, s.k);
  // Chunks end where either operand's scale changes (the checks made the extents nest).
  const KChunks chunks{s.k, std::max<std::int64_t>(1, std::min(oa.block_k, ob.block_k))};
  Tensor bias32 = epilogue.bias.defined() ? epilogue.bias.to(DType::F32) : Tensor();
  const float* bias = bias32.defined() ? bias32.data<float>() : nullptr;
  if (s.k == 0) {  // no products: C = act(bias); with blocks along k the scale grids are empty, so read none
    std::vector<float> row(static_cast<std::size_t>(s.n));
    for (std::int64_t i = 0; i < s.m; ++i) {
      std::fill(row.begin(), row.end(), 0.0f);
      store_row(row.data(), s.n, 0, epilogue, bias, c, i * s.n);
    }
    return;
  }

  if (accumulator.limited) {  // the scalar model: one element of C at a time
    parallel_for(s.m, std::max<std::int64_t>(1, (1 << 16) / std::max<std::int64_t>(1, s.n * s.k)),
                 [&](std::int64_t begin, std::int64_t end) {
                   std::vector<float> row(static_cast<std::size_t>(s.n));
                   for (std::int64_t i = begin; i < end; ++i) {
                     for (std::int64_t j = 0; j < s.n; ++j) {
                       float sum = 0.0f;
                       for (std::int64_t ch = 0; ch < chunks.count(); ++ch) {
                         const float chunk = limited_chunk_sum(oa, ob, i, j, chunks.begin(ch), chunks.end(ch),
                                                               accumulator);
                         const std::int64_t k0 = chunks.begin(ch);
                         sum = std::fma(chunk, oa.scale(i, k0) * ob.scale(j, k0), sum);
                       }
                       row[static_cast<std::size_t>(j)] = sum;
                     }
                     store_row(row.data(), s.n, 0, epilogue, bias, c, i * s.n);
                   }
                 });
    return;
  }

  // The packed GEMM decodes the codes as it packs them; one scale per operand multiplies the sum once
  // (alpha), else every chunk's sum is scaled into the running sum (PackedGemm::k_chunk).
  const bool per_tensor = oa.one_scale(s.m, s.k) && ob.one_scale(s.n, s.k);
  const PackedGemm gemm{.kernel = &code_gemm_microkernel(),
                        .a = oa.packed(),
                        .b = ob.packed(),
                        .k = s.k,
                        .c = c.data_ptr(),
                        .c_dtype = c.dtype(),
                        .ldc = s.n,
                        .bias = bias,
                        .activation = epilogue.activation,
                        .k_chunk = per_tensor ? 0 : chunks.length,
                        .a_scales = oa.grid(),
                        .b_scales = ob.grid(),
                        .alpha = per_tensor ? oa.scale_inv[0] * ob.scale_inv[0] : 1.0f};
  packed_gemm_parallel(gemm, s.m, s.n);
}

}  // namespace mg::kernels::cpu
