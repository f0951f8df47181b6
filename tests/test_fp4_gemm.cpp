// The FP4 GEMM (kernels::fp4_gemm) and the decoding inside the CPU GEMM's packing that it and the FP8
// GEMM run on (kernels/cpu/gemm_pack_codes.cpp):
//   - against f64 products of the decoded operands, for NVFP4 and MXFP4, 1-D and 2-D blocks, ragged
//     shapes, an odd k (the codes' rows then start mid-byte), every output dtype, bias and activation;
//   - bit for bit: packing codes gives what packing their decoded bf16 values gives, on every
//     microkernel this CPU runs, for FP8 in both layouts and FP4 on and off its byte-at-a-time path;
//   - bit for bit: the FP8 GEMM's block scales, each chunk's sum (a GEMM of its own) added with one fma;
//   - the same bits on 1 and 2 threads; the ends of MXFP4's decode (inf, 0) reach C; the errors.
// The f64 bound: K products of exact values summed in f32, then one rounding of the factors' product,
// one of the scaling and one of the bias add: (K + 4) * 2^-24 * sum |a_k b_k| * factors, plus C's own
// rounding (bf16 2^-8, f16 2^-11 of the value and 2^-25 below its normals). A wrong block or scale is
// off by a factor of 2 or more.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/microkernel.h"
#include "kernels/fp4.h"
#include "kernels/threads.h"
#include "tests/fp8_gemm_cases.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;
using kernels::Fp4Format;
using kernels::Fp4Tensor;
using kernels::Fp8Blocks;
using kernels::Fp8Tensor;

namespace {

// N(0, 1) values times powers of two that vary along both dimensions, so that blocks differ.
Tensor spread(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  return fp8_cases::spread_randn(rows, cols, seed);
}

// What FP8 codes [rows, cols] stand for without their scales, columns [c0, c1), as bf16 (exact).
Tensor code_values(const Tensor& codes, std::int64_t c0, std::int64_t c1) {
  const std::int64_t rows = codes.size(0), cols = codes.size(1);
  const auto* bytes = static_cast<const std::uint8_t*>(codes.data_ptr());
  std::vector<double> values;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = c0; c < c1; ++c) values.push_back(fp8::decode(bytes[r * cols + c], codes.dtype()));
  return from_vector(values, {rows, c1 - c0}, {.dtype = DType::BF16});
}

Fp4Tensor fp4_of(std::int64_t rows, std::int64_t cols, Fp8Blocks blocks, Fp4Format format, std::uint64_t seed) {
  return kernels::fp4_quantize(spread(rows, cols, seed), blocks, {.format = format});
}

float factor_of(const Fp4Tensor& x) { return x.tensor_factor.data<float>()[0]; }

// Runs fp4_gemm and counts the elements outside the header's bound.
int mismatches(const Fp4Tensor& a, const Fp4Tensor& b, DType out, bool epilogue, std::uint64_t seed) {
  const std::int64_t m = a.codes.size(0), n = b.codes.size(0), k = a.codes.size(1);
  const std::vector<double> av = kernels::fp4_decode(a, DType::F32).to_vector<double>();
  const std::vector<double> bv = kernels::fp4_decode(b, DType::F32).to_vector<double>();
  Generator generator(seed);
  const Tensor bias = epilogue ? randn({n}, generator) : Tensor();
  Tensor c = Tensor::empty({m, n}, {.dtype = out});
  kernels::fp4_gemm(a, b, c,
                    {.bias = bias, .activation = epilogue ? kernels::Activation::Relu : kernels::Activation::None});
  const std::vector<double> got = c.to_vector<double>();
  const std::vector<double> bias_values = epilogue ? bias.to_vector<double>() : std::vector<double>();
  const double factors = static_cast<double>(factor_of(a)) * factor_of(b);
  const double out_eps = out == DType::BF16 ? 0x1p-8 : out == DType::F16 ? 0x1p-11 : 0.0;
  int bad = 0;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = 0.0, magnitude = 0.0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double product = av[static_cast<std::size_t>(i * k + p)] * bv[static_cast<std::size_t>(j * k + p)];
        sum += product;
        magnitude += std::fabs(product);
      }
      double expected = sum * factors + (epilogue ? bias_values[static_cast<std::size_t>(j)] : 0.0);
      if (epilogue) expected = std::max(expected, 0.0);
      const double bound = static_cast<double>(k + 4) * 0x1p-24 * magnitude * factors +
                           (epilogue ? 0x1p-24 * std::fabs(bias_values[static_cast<std::size_t>(j)]) : 0.0) +
                           out_eps * std::fabs(expected) + (out == DType::F16 ? 0x1p-25 : 0.0);
      if (std::fabs(got[static_cast<std::size_t>(i * n + j)] - expected) > bound) ++bad;
    }
  return bad;
}

// The packed GEMM over two operands as gemm_packed.h describes them, into an f32 C.
std::vector<float> run_packed(const kernels::cpu::MicroKernel& kernel, const kernels::cpu::GemmOperand& a,
                              const kernels::cpu::GemmOperand& b, std::int64_t m, std::int64_t n, std::int64_t k) {
  Tensor c = Tensor::empty({m, n});
  kernels::cpu::packed_gemm_parallel(
      {.kernel = &kernel, .a = a, .b = b, .k = k, .c = c.data_ptr(), .c_dtype = DType::F32, .ldc = n}, m, n);
  return c.to_vector<float>();
}

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("fp4_gemm against f64: both formats and their blocks, ragged shapes and an odd k, every output") {
  const std::int64_t sizes[][3] = {{1, 2, 2}, {13, 37, 30}, {4, 6, 7}, {33, 16, 256}, {70, 45, 1030}};
  std::uint64_t seed = 1;
  for (const auto& size : sizes)
    for (const auto& [format, a_blocks, b_blocks] : {std::tuple{Fp4Format::Nv, Fp8Blocks{1, 16}, Fp8Blocks{16, 16}},
                                                     std::tuple{Fp4Format::Nv, Fp8Blocks{1, 16}, Fp8Blocks{1, 16}},
                                                     std::tuple{Fp4Format::Mx, Fp8Blocks{1, 32}, Fp8Blocks{1, 32}}}) {
      const Fp4Tensor a = fp4_of(size[0], size[2], a_blocks, format, seed++);
      const Fp4Tensor b = fp4_of(size[1], size[2], b_blocks, format, seed++);
      for (DType out : {DType::F32, DType::BF16, DType::F16})
        for (bool epilogue : {false, true}) {
          INFO("m n k " << size[0] << " " << size[1] << " " << size[2] << ", "
                        << (format == Fp4Format::Nv ? "NVFP4" : "MXFP4") << " b blocks " << b_blocks.rows << "x"
                        << b_blocks.cols << ", into " << out << ", bias+relu " << epilogue);
          CHECK(mismatches(a, b, out, epilogue, seed++) == 0);
        }
    }
}

TEST_CASE("packing decodes FP8 and FP4 codes into exactly what packing their bf16 values gives, on every kernel") {
  const std::int64_t m = 37, n = 45, k = 530;  // two blocks of k, edge tiles on both sides
  const Fp8Tensor a8 = fp8_cases::quantized(spread(m, k, 3), {0, 0}, DType::E4M3);
  const Fp8Tensor b8 = fp8_cases::quantized(spread(k, n, 4), {0, 0}, DType::E5M2);  // [k, n]: lines along k
  const Tensor a8_values = code_values(a8.codes, 0, k), b8_values = code_values(b8.codes, 0, n);
  const Fp4Tensor a4 = fp4_of(m + 1, k, {1, 16}, Fp4Format::Nv, 5), b4 = fp4_of(n + 1, k, {16, 16}, Fp4Format::Nv, 6);
  const Fp4Tensor mx_a = fp4_of(m + 1, k, {1, 32}, Fp4Format::Mx, 16),
                  mx_b = fp4_of(n + 1, k, {1, 32}, Fp4Format::Mx, 17);
  const Fp4Tensor odd_a = fp4_of(m + 1, 7, {1, 16}, Fp4Format::Mx, 7),
                  odd_b = fp4_of(n + 1, 7, {1, 32}, Fp4Format::Mx, 8);
  for (const kernels::cpu::MicroKernel* kernel : kernels::cpu::runnable_microkernels()) {
    INFO(kernel->name);
    // FP8: A's lines contiguous along k, B's lines contiguous across (a column of [k, n]).
    const std::vector<float> fp8 =
        run_packed(*kernel, {.data = a8.codes.data_ptr(), .dtype = DType::E4M3, .line_stride = k, .k_stride = 1},
                   {.data = b8.codes.data_ptr(), .dtype = DType::E5M2, .line_stride = 1, .k_stride = n}, m, n, k);
    const std::vector<float> fp8_values =
        run_packed(*kernel, {.data = a8_values.data_ptr(), .dtype = DType::BF16, .line_stride = k, .k_stride = 1},
                   {.data = b8_values.data_ptr(), .dtype = DType::BF16, .line_stride = 1, .k_stride = n}, m, n, k);
    CHECK(same_bits(fp8, fp8_values));
    // FP4: rows on whole bytes (k even: 16 values, or a byte of two, at a time; NVFP4 with 16 x 16 blocks
    // on B, and MXFP4) and rows of 7 (value by value).
    for (const auto& [a, b] : {std::pair{&a4, &b4}, std::pair{&mx_a, &mx_b}, std::pair{&odd_a, &odd_b}}) {
      const Tensor a_values = kernels::fp4_decode(*a), b_values = kernels::fp4_decode(*b);
      const std::int64_t kk = a->codes.size(1), rows = a->codes.size(0), cols = b->codes.size(0);
      INFO("fp4 k " << kk);
      CHECK(same_bits(
          run_packed(*kernel, kernels::cpu::fp4_gemm_operand(*a), kernels::cpu::fp4_gemm_operand(*b), rows, cols, kk),
          run_packed(*kernel, {.data = a_values.data_ptr(), .dtype = DType::BF16, .line_stride = kk, .k_stride = 1},
                     {.data = b_values.data_ptr(), .dtype = DType::BF16, .line_stride = kk, .k_stride = 1}, rows, cols,
                     kk)));
    }
  }
}

TEST_CASE("fp8_gemm's block scales: each chunk's sum scaled into the running sum with one fma, bit for bit") {
  // Chunks of 32 along k (A's 1 x 32 blocks inside B's 128 x 128): 16 of them a block of k, and k = 1100
  // crosses blocks; 35 is odd: a chunk a block, padded to whole pairs.
  for (const std::int64_t chunk : {std::int64_t{32}, std::int64_t{35}}) {
    const std::int64_t m = 30, n = 40, k = chunk == 32 ? 1100 : 140;
    const Fp8Tensor a = fp8_cases::quantized(spread(m, k, 9), {1, chunk}, DType::E4M3);
    const Fp8Tensor b = fp8_cases::quantized(spread(n, k, 10), {chunk == 32 ? 128 : 8, chunk}, DType::E4M3);
    Tensor c = Tensor::empty({m, n});
    kernels::fp8_gemm(a, b, c, {.m = m, .n = n, .k = k, .transpose_b = true});
    // The replay: every chunk a GEMM of its own on the same kernel, from the codes' bf16 values.
    const std::vector<float> a_scale = a.scale_inv.to_vector<float>(), b_scale = b.scale_inv.to_vector<float>();
    const std::int64_t a_grid = a.scale_inv.size(1), b_grid = b.scale_inv.size(1), b_rows = b.blocks.rows;
    std::vector<float> expected(static_cast<std::size_t>(m * n), 0.0f);
    for (std::int64_t k0 = 0; k0 < k; k0 += chunk) {
      const std::int64_t length = std::min(chunk, k - k0);
      const Tensor a_chunk = code_values(a.codes, k0, k0 + length), b_chunk = code_values(b.codes, k0, k0 + length);
      const std::vector<float> sums = run_packed(
          kernels::cpu::code_gemm_microkernel(),
          {.data = a_chunk.data_ptr(), .dtype = DType::BF16, .line_stride = length, .k_stride = 1},
          {.data = b_chunk.data_ptr(), .dtype = DType::BF16, .line_stride = length, .k_stride = 1}, m, n, length);
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          const float scale = a_scale[static_cast<std::size_t>(i * a_grid + k0 / chunk)] *
                              b_scale[static_cast<std::size_t>(j / b_rows * b_grid + k0 / chunk)];
          float& sum = expected[static_cast<std::size_t>(i * n + j)];
          sum = std::fma(sums[static_cast<std::size_t>(i * n + j)], scale, sum);
        }
    }
    INFO("chunk " << chunk);
    CHECK(same_bits(c.to_vector<float>(), expected));
  }
}

TEST_CASE("fp4_gemm: the same bits on 1 and 2 threads, and as the bf16 GEMM of the decoded operands") {
  const int threads = num_threads();
  const Fp4Tensor a = fp4_of(200, 300, {1, 16}, Fp4Format::Nv, 11), b = fp4_of(260, 300, {16, 16}, Fp4Format::Nv, 12);
  std::vector<std::vector<float>> results;
  for (int t : {1, 2}) {
    set_num_threads(t);
    Tensor c = Tensor::empty({200, 260});
    kernels::fp4_gemm(a, b, c);
    results.push_back(c.to_vector<float>());
  }
  set_num_threads(threads);
  CHECK(same_bits(results[0], results[1]));
  // The decode-then-multiply way (a GPU's), on the same kernel, times the factors: the same bits.
  Tensor sums = Tensor::empty({200, 260});
  kernels::cpu::gemm_packed(kernels::cpu::code_gemm_microkernel(), kernels::fp4_decode(a), kernels::fp4_decode(b), sums,
                            {.m = 200, .n = 260, .k = 300, .transpose_b = true});
  std::vector<float> expected = sums.to_vector<float>();
  for (float& v : expected) v *= factor_of(a) * factor_of(b);
  CHECK(same_bits(results[0], expected));
}

TEST_CASE("fp4_gemm: MXFP4's decode ends reach C (past bf16's largest: inf; below its normals: 0)") {
  const auto hand = [](std::uint8_t code, std::uint8_t scale) {  // [1, 2]: the code, then 0
    Fp4Tensor x{.codes = Tensor::empty({1, 2}, {.dtype = DType::E2M1}),
                .scales = Tensor::empty({1, 1}, {.dtype = DType::E8M0}),
                .tensor_factor = ones({1}),
                .blocks = {1, 32},
                .format = Fp4Format::Mx};
    static_cast<std::uint8_t*>(x.codes.data_ptr())[0] = fp8::pack_codes(code, 0x0);
    static_cast<std::uint8_t*>(x.scales.data_ptr())[0] = scale;
    return x;
  };
  const Fp4Tensor six = hand(0x7, 127);  // 6 * 2^0
  Tensor c = Tensor::empty({1, 1});
  kernels::fp4_gemm(hand(0x7, 254), six, c);  // 6 * 2^127 is past bf16's largest: inf
  CHECK(std::isinf(c.item()));
  kernels::fp4_gemm(hand(0x1, 0), six, c);  // 0.5 * 2^-127 is below bf16's normals: 0
  CHECK(c.item() == 0.0);
  kernels::fp4_gemm(hand(0x1, 1), six, c);  // 0.5 * 2^-126 = 2^-127 too
  CHECK(c.item() == 0.0);
  kernels::fp4_gemm(hand(0x2, 1), six, c);  // 1 * 2^-126 stays: times 6
  CHECK(c.item() == 6 * 0x1p-126);
}

TEST_CASE("fp4_gemm: bad input is an mg::Error that names the kernel and the operand") {
  const Fp4Tensor a = fp4_of(4, 32, {1, 16}, Fp4Format::Nv, 13), b = fp4_of(6, 32, {1, 16}, Fp4Format::Nv, 14);
  const Fp4Tensor short_k = fp4_of(6, 16, {1, 16}, Fp4Format::Nv, 15);
  Tensor c = Tensor::empty({4, 6});
  check_error([&] { kernels::fp4_gemm(a, short_k, c); }, "kernels::fp4_gemm: needs A [m, k] and B [n, k]");
  Tensor wrong_c = Tensor::empty({6, 4});
  check_error([&] { kernels::fp4_gemm(a, b, wrong_c); }, "C must be f32, f16 or bf16 [4, 6]");
  Tensor i32_c = Tensor::empty({4, 6}, {.dtype = DType::I32});
  check_error([&] { kernels::fp4_gemm(a, b, i32_c); }, "C must be");
  check_error([&] { kernels::fp4_gemm(a, b, c, {.bias = ones({4})}); }, "the bias must be [6]");
  Fp4Tensor mx_scales = b;
  mx_scales.format = Fp4Format::Mx;
  check_error([&] { kernels::fp4_gemm(a, mx_scales, c); }, "kernels::fp4_gemm (B, MXFP4): the scales must be e8m0");
  Fp4Tensor no_factor = a;
  no_factor.tensor_factor = Tensor();
  check_error([&] { kernels::fp4_gemm(no_factor, b, c); }, "(A, NVFP4): the tensor factor must be f32 [1]");
}
