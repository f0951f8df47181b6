// The FP8 kernels of kernels/fp8.h: block amax, quantisation and its inverse, the FP8 GEMM with the F32
// and the Limited accumulator, their argument checks, and bit-stability across thread counts.
//
// References are computed here, independently of the kernels: an operand's values are decode(code) *
// scale_inv[block] with the block found from the stored layout, and C is summed in f64 (essentially
// exact: each product has at most 4 + 4 + 24 + 24 significant bits, and K <= 300 of them). The F32
// contract sums K exact code products in f32 (K roundings, each within 2^-24 of the running sum) and adds
// each chunk of constant scales with one rounding of the scale product and one fma: the error is below
// (K + 2 chunks + 4) * 2^-24 * sum |a_k b_k| (the extra 4: the bias add and slack for first-order
// terms). A bf16 C adds one rounding, 2^-8 of the value (f16: 2^-11, and 2^-25 below its normals). A
// wrong scale or block index is off by a factor near 2 or more: far outside these bounds.
#include "tests/testing.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/fp8.h"
#include "tests/fp8_gemm_cases.h"

using namespace mg;
using namespace mg::testing;
using kernels::Fp8Accumulator;
using kernels::Fp8Blocks;
using kernels::Fp8Rounding;
using kernels::Fp8Tensor;
using mg::testing::fp8_cases::GemmCase;
using mg::testing::fp8_cases::quantized;
using mg::testing::fp8_cases::Scaling;
using mg::testing::fp8_cases::spread_randn;
using mg::testing::fp8_cases::stored_a;
using mg::testing::fp8_cases::stored_b;

namespace {

DType format_of(const Tensor& codes) { return codes.dtype() == DType::E4M3 ? DType::E4M3 : DType::E5M2; }
const std::uint8_t* codes_of(const Fp8Tensor& x) { return static_cast<const std::uint8_t*>(x.codes.data_ptr()); }

// The scale grid index of stored element (r, c), from the blocks' definition (0: the whole extent).
std::int64_t block_index(std::int64_t r, std::int64_t c, std::int64_t rows, std::int64_t cols, Fp8Blocks b) {
  const std::int64_t br = b.rows > 0 ? b.rows : std::max<std::int64_t>(rows, 1);
  const std::int64_t bc = b.cols > 0 ? b.cols : std::max<std::int64_t>(cols, 1);
  return r / br * ((cols + bc - 1) / bc) + c / bc;
}

// What the codes stand for, in f64, in the stored layout.
std::vector<double> values_of(const Fp8Tensor& x) {
  const std::int64_t rows = x.codes.size(0), cols = x.codes.size(1);
  const std::vector<double> inv = x.scale_inv.to_vector<double>();
  std::vector<double> v(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      v[static_cast<std::size_t>(r * cols + c)] =
          static_cast<double>(fp8::decode(codes_of(x)[r * cols + c], format_of(x.codes))) *
          inv[static_cast<std::size_t>(block_index(r, c, rows, cols, x.blocks))];
  return v;
}

// Runs the F32 GEMM and returns how many elements fall outside the bound of the header comment.
int gemm_mismatches(const GemmCase& g, std::uint64_t seed) {
  const Tensor x = spread_randn(g.transpose_a ? g.k : g.m, g.transpose_a ? g.m : g.k, seed);
  const Tensor w = spread_randn(g.transpose_b ? g.n : g.k, g.transpose_b ? g.k : g.n, seed + 1);
  const Fp8Tensor a = quantized(x, stored_a(g.scaling, g.transpose_a), g.fa, g.scaling.power_of_two);
  const Fp8Tensor b = quantized(w, stored_b(g.scaling, g.transpose_b), g.fb, g.scaling.power_of_two);
  kernels::GemmEpilogue epilogue;
  if (g.epilogue) {
    Generator generator(seed + 2);
    epilogue = {.bias = randn({g.n}, generator).to(g.out), .activation = kernels::Activation::Relu};
  }
  Tensor c = Tensor::empty({g.m, g.n}, {.dtype = g.out});
  kernels::fp8_gemm(a, b, c, {.m = g.m, .n = g.n, .k = g.k, .transpose_a = g.transpose_a, .transpose_b = g.transpose_b},
                    {}, epilogue);
  const std::vector<double> av = values_of(a), bv = values_of(b), got = c.to_vector<double>();
  const std::vector<double> bias = g.epilogue ? epilogue.bias.to_vector<double>() : std::vector<double>(g.n, 0.0);
  const auto whole = [&](std::int64_t block) { return block > 0 ? std::min(block, g.k) : g.k; };
  const std::int64_t chunk = std::min(whole(g.scaling.a_k), whole(g.scaling.b_k)), chunks = (g.k + chunk - 1) / chunk;
  int off = 0;
  for (std::int64_t i = 0; i < g.m; ++i)
    for (std::int64_t j = 0; j < g.n; ++j) {
      double sum = 0, magnitude = 0;
      for (std::int64_t kk = 0; kk < g.k; ++kk) {
        const double p = av[static_cast<std::size_t>(g.transpose_a ? kk * g.m + i : i * g.k + kk)] *
                         bv[static_cast<std::size_t>(g.transpose_b ? j * g.k + kk : kk * g.n + j)];
        sum += p, magnitude += std::fabs(p);
      }
      const double bj = bias[static_cast<std::size_t>(j)];
      const double expected = g.epilogue ? std::max(0.0, sum + bj) : sum;
      double allowed = static_cast<double>(g.k + 2 * chunks + 4) * std::ldexp(magnitude + std::fabs(bj), -24);
      if (g.out == DType::BF16) allowed += std::ldexp(std::fabs(expected) + allowed, -8);
      if (g.out == DType::F16) allowed += std::ldexp(std::fabs(expected) + allowed, -11) + std::ldexp(1.0, -25);
      const double error = std::fabs(got[static_cast<std::size_t>(i * g.n + j)] - expected);
      if (!(error <= allowed)) {
        if (off == 0)
          MESSAGE("C[" << i << "," << j << "] off by " << error << " > " << allowed << ", expected " << expected);
        ++off;
      }
    }
  return off;
}

Fp8Accumulator limited(int promote_every, Fp8Rounding rounding = Fp8Rounding::Truncate) {
  return {.limited = true, .mantissa_bits = 13, .rounding = rounding, .group = 32, .promote_every = promote_every};
}

}  // namespace

TEST_CASE("fp8_block_amax: the grid of block maxima, by hand, ragged edges, NaN, f16/bf16 input") {
  // x = [[1, -3, 0.5, 2], [-7, 4, 0, -0.25]]
  const Tensor x = from_vector({1, -3, 0.5, 2, -7, 4, 0, -0.25}, {2, 4});
  check_values(kernels::fp8_block_amax(x, {1, 2}), {3, 2, 7, 0.25});
  check_values(kernels::fp8_block_amax(x, {0, 0}), {7});  // one scale for the tensor
  CHECK(kernels::fp8_scale_shape({2, 4}, {0, 0}) == Shape{1, 1});
  check_values(kernels::fp8_block_amax(x, {1, 0}), {3, 7});
  check_values(kernels::fp8_block_amax(x, {0, 3}), {7, 2});  // columns {0, 1, 2} and the ragged {3}
  check_values(kernels::fp8_block_amax(x.to(DType::BF16), {1, 2}), {3, 2, 7, 0.25});
  check_values(kernels::fp8_block_amax(x.to(DType::F16), {2, 3}), {7, 2});
  // 3 x 5 in 2 x 2 blocks: a 2 x 3 grid whose last row and column are ragged; odd values negative.
  std::vector<double> v(15);
  for (int i = 0; i < 15; ++i) v[static_cast<std::size_t>(i)] = (i % 2 ? -1 : 1) * (i + 1);
  const Tensor ragged = from_vector(v, {3, 5});
  CHECK(kernels::fp8_scale_shape({3, 5}, {2, 2}) == Shape{2, 3});
  check_values(kernels::fp8_block_amax(ragged, {2, 2}), {7, 9, 10, 12, 14, 15});
  // A NaN makes its block's amax NaN, wherever it sits in the block, and no other block's.
  const Tensor with_nan = from_vector({1, NAN, 5, 2, -3, 4, 0.5, 8}, {2, 4});
  check_values(kernels::fp8_block_amax(with_nan, {1, 2}), {NAN, 5, 4, 8});
  check_values(kernels::fp8_block_amax(with_nan, {0, 0}), {NAN});
}

TEST_CASE("fp8_quantize / fp8_dequantize: codes are encode(x * scale, saturate), scale_inv = 1 / scale") {
  // Scale 2, E4M3: 100 -> 200, a tie between 192 and 208 that goes to even 192; 300 -> 600 saturates to
  // 448 (0x7E); -0.1 -> -0.2 rounds to -0.203125 (1.625 x 2^-3); 1e-4 -> 2e-4 is below half of 2^-9: 0.
  const Tensor x = from_vector({100, 300, -0.1, 1e-4}, {1, 4});
  const Fp8Tensor q = kernels::fp8_quantize(x, full({1, 1}, 2.0), {0, 0}, DType::E4M3);
  CHECK(q.codes.dtype() == DType::E4M3);
  CHECK(codes_of(q)[1] == 0x7E);
  const std::vector<float> xv = x.to_vector<float>();
  for (std::size_t i = 0; i < 4; ++i)
    CHECK(codes_of(q)[i] == fp8::encode(xv[i] * 2.0f, DType::E4M3, fp8::Overflow::Saturate));
  check_values(q.scale_inv, {0.5});
  check_values(kernels::fp8_dequantize(q), {96, 224, -0.1015625, 0});
  // E5M2 with scale 2: 30000 -> 60000 rounds to its max 57344 (below the tie 61440); 40000 saturates.
  const Fp8Tensor e5 = kernels::fp8_quantize(from_vector({30000, 40000}, {1, 2}), full({1, 1}, 2.0), {0, 0},
                                             DType::E5M2);
  check_values(kernels::fp8_dequantize(e5), {28672, 28672});
  // Ragged 3 x 5 in 2 x 2 blocks, six different scales (one of them not a power of two: 1 / 3).
  const Tensor y = spread_randn(3, 5, 1);
  const std::vector<double> scales{1, 2, 0.25, 1.0 / 3, 8, 0.5};
  const Tensor scale = from_vector(scales, {2, 3});
  const Fp8Tensor r = kernels::fp8_quantize(y, scale, {2, 2}, DType::E4M3);
  const std::vector<float> yv = y.to_vector<float>(), sv = scale.to_vector<float>(),
                           inv = r.scale_inv.to_vector<float>();
  for (std::int64_t i = 0; i < 15; ++i) {
    const std::size_t blk = static_cast<std::size_t>(block_index(i / 5, i % 5, 3, 5, {2, 2}));
    CHECK(codes_of(r)[i] ==
          fp8::encode(yv[static_cast<std::size_t>(i)] * sv[blk], DType::E4M3, fp8::Overflow::Saturate));
  }
  for (std::size_t b = 0; b < 6; ++b) CHECK(inv[b] == 1.0f / sv[b]);
  check_values(kernels::fp8_dequantize(r), values_of(r), 0, 0);
}

TEST_CASE("fp8_gemm, F32 accumulator: every layout, format pair, scaling and output against f64") {
  const Scaling scalings[] = {
      {"per-tensor", 0, 0, 0, 0, false, 0},
      {"1x128 on A, 128x128 on B (DeepSeek-V3 forward)", 1, 128, 128, 128, false, 0},
      {"MX 1x32 on both, powers of two", 1, 32, 1, 32, true, 0},
      {"128 along k on both (the weight gradient's blocks, with transpose_a)", 1, 128, 1, 128, false, 0},
      {"nested: 32 along k on A, 128x128 on B", 1, 32, 128, 128, false, 0},
  };
  const std::pair<DType, DType> formats[] = {{DType::E4M3, DType::E4M3},
                                             {DType::E5M2, DType::E4M3},
                                             {DType::E4M3, DType::E5M2}};
  const std::int64_t sizes[][3] = {{13, 37, 300}, {4, 5, 19}, {33, 16, 256}};  // ragged; odd k < a block; whole
  std::uint64_t seed = 10;
  for (const Scaling& scaling : scalings)
    for (const auto& [fa, fb] : formats)
      for (int layout = 0; layout < 4; ++layout)
        for (const auto& size : sizes)
          for (DType out : {DType::F32, DType::BF16, DType::F16})
            for (bool epilogue : {false, true}) {
              const GemmCase g{.m = size[0],
                               .n = size[1],
                               .k = size[2],
                               .transpose_a = (layout & 1) != 0,
                               .transpose_b = (layout & 2) != 0,
                               .fa = fa,
                               .fb = fb,
                               .scaling = scaling,
                               .out = out,
                               .epilogue = epilogue};
              INFO(scaling.name << ": m n k " << g.m << " " << g.n << " " << g.k << ", transposes " << g.transpose_a
                                << g.transpose_b << ", " << dtype_name(fa) << " x " << dtype_name(fb) << " into " << out
                                << ", bias+relu " << epilogue);
              CHECK(gemm_mismatches(g, seed++) == 0);
            }
}

TEST_CASE("fp8_accumulate: the Limited accumulator keeps 14 significant bits, truncating or to nearest") {
  // At 4096 = 2^12 the spacing of 14 significant bits is 2^-1.
  const Fp8Accumulator truncate = limited(128), nearest = limited(128, Fp8Rounding::Nearest);
  CHECK(kernels::fp8_accumulate(4096, 0.375, truncate) == 4096);
  CHECK(kernels::fp8_accumulate(4096, 0.375, nearest) == 4096.5);
  CHECK(kernels::fp8_accumulate(4096, 0.25, nearest) == 4096);  // the tie goes to even 4096
  CHECK(kernels::fp8_accumulate(4096, 0.75, nearest) == 4097);  // the tie 4096.75 goes to even 4097
  CHECK(kernels::fp8_accumulate(4096, 0.75, truncate) == 4096.5);
  CHECK(kernels::fp8_accumulate(-4096, -0.375, truncate) == -4096);  // truncation is toward zero
  CHECK(kernels::fp8_accumulate(4095, 0.25, truncate) == 4095.25);  // below 2^12 the spacing is 2^-2
  CHECK(kernels::fp8_accumulate(0, 0, truncate) == 0);
}

TEST_CASE("fp8_gemm, Limited accumulator: promotion every 128 products tells it apart from F32") {
  // A's row: 448, then 4095 x 2^-4; B's column: 448, then ones. Exact: 200704 + 4095/16 = 200959.9375.
  // Limited sums groups of 32 exactly: the first group gives 200704 + 31/16, cut to 14 bits at 2^17
  // (spacing 16): 200704; each later group adds 2, below the spacing, and is lost: 200704 without
  // promotion. Promoted every 128 products, the first window loses 31/16 + 3 x 2 = 127/16, and each of
  // the other 31 windows sums 128 x 2^-4 = 8 exactly (partial sums up to 8 need few bits), promoted into
  // f32: 200704 + 31 x 8 = 200952. F32 is exact: every partial sum is a multiple of 2^-4 below 2^18.
  const std::int64_t k = 4096;
  std::vector<double> row(k, 0.0625), column(k, 1.0);
  row[0] = column[0] = 448;
  // Per-tensor scales of 1: the codes are the values.
  const Fp8Tensor a = kernels::fp8_quantize(from_vector(row, {1, k}), ones({1, 1}), {0, 0}, DType::E4M3);
  const Fp8Tensor b = kernels::fp8_quantize(from_vector(column, {k, 1}), ones({1, 1}), {0, 0}, DType::E4M3);
  const auto product = [&](const Fp8Accumulator& accumulator) {
    Tensor c = Tensor::empty({1, 1});
    kernels::fp8_gemm(a, b, c, {.m = 1, .n = 1, .k = k}, accumulator);
    return c.item();
  };
  CHECK(product({}) == 200959.9375);
  CHECK(product(limited(0)) == 200704);
  CHECK(product(limited(128)) == 200952);
  CHECK(product(limited(0, Fp8Rounding::Nearest)) == 200704);  // 200706 is still below half a spacing up
}

TEST_CASE("fp8_gemm, Limited accumulator with block scales: the model replayed here, bit for bit") {
  // 1x128 on A, 128x128 on B, k = 300 (chunks 128, 128, 44), promoted every 64: the chunk sums, the fma
  // with the two scales, and the order of the f32 additions, as kernels/fp8.h describes them.
  const std::int64_t m = 5, n = 7, k = 300;
  const Fp8Tensor a = quantized(spread_randn(m, k, 3), {1, 128}, DType::E4M3);
  const Fp8Tensor b = quantized(spread_randn(n, k, 4), {128, 128}, DType::E4M3);
  const Fp8Accumulator acc = limited(64);
  Tensor c = Tensor::empty({m, n});
  kernels::fp8_gemm(a, b, c, {.m = m, .n = n, .k = k, .transpose_b = true}, acc);
  const std::vector<float> got = c.to_vector<float>(), ia = a.scale_inv.to_vector<float>(),
                           ib = b.scale_inv.to_vector<float>();
  const auto code_value = [](const Fp8Tensor& x, std::int64_t at) {
    return static_cast<double>(fp8::decode(codes_of(x)[at], DType::E4M3));
  };
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      float sum = 0;
      for (std::int64_t k0 = 0; k0 < k; k0 += 128) {
        float promoted = 0, running = 0;
        for (std::int64_t g = k0; g < std::min(k, k0 + 128); g += 32) {
          double group = 0;
          for (std::int64_t kk = g; kk < std::min(k, g + 32); ++kk)
            group += code_value(a, i * k + kk) * code_value(b, j * k + kk);
          running = kernels::fp8_accumulate(running, group, acc);
          if ((std::min(k, g + 32) - k0) % 64 == 0) promoted += running, running = 0;
        }
        const float scales = ia[static_cast<std::size_t>(i * 3 + k0 / 128)] * ib[static_cast<std::size_t>(k0 / 128)];
        sum = std::fma(promoted + running, scales, sum);
      }
      CHECK(got[static_cast<std::size_t>(i * n + j)] == sum);
    }
}

TEST_CASE("fp8 kernels: bad input is an mg::Error that names the kernel") {
  Generator generator(5);
  const Tensor x = randn({8, 256}, generator), w = randn({256, 6}, generator);
  const Fp8Tensor a = quantized(x, {1, 128}, DType::E4M3), b = quantized(w, {128, 128}, DType::E4M3);
  Tensor c = Tensor::empty({8, 6});
  const kernels::GemmShape s{.m = 8, .n = 6, .k = 256};
  check_error([&] { kernels::fp8_gemm(a, b, c, {.m = 8, .n = 6, .k = 255}); }, "kernels::fp8_gemm: shapes");
  check_error([&] { kernels::fp8_gemm(a, b, c, {.m = 8, .n = 6, .k = 256, .transpose_b = true}); },
              "kernels::fp8_gemm: shapes");
  Tensor c_wrong = Tensor::empty({8, 5});
  check_error([&] { kernels::fp8_gemm(a, b, c_wrong, s); }, "kernels::fp8_gemm: shapes");
  const Fp8Tensor not_fp8{.codes = x.to(DType::BF16), .scale_inv = a.scale_inv, .blocks = a.blocks};
  check_error([&] { kernels::fp8_gemm(not_fp8, b, c, s); }, "kernels::fp8_gemm: A's codes must be e4m3 or e5m2");
  const Fp8Tensor wrong_grid{.codes = a.codes, .scale_inv = ones({8, 1}), .blocks = a.blocks};
  check_error([&] { kernels::fp8_gemm(wrong_grid, b, c, s); }, "kernels::fp8_gemm: scale_inv must be f32 of shape");
  // Blocks of 96 and 128 along k = 256 do not nest: a chunk would straddle a scale change.
  const Fp8Tensor a96 = quantized(x, {1, 96}, DType::E4M3);
  check_error([&] { kernels::fp8_gemm(a96, b, c, s); }, "kernels::fp8_gemm: the operands' blocks along k (96 and 128)");
  check_error([&] { kernels::fp8_gemm(a, b, c, s, limited(0)); }, "kernels::fp8_gemm: block scales change every 128");
  check_error([&] { kernels::fp8_gemm(a, b, c, s, limited(96)); }, "kernels::fp8_gemm: block scales change every 128");
  check_error([&] { kernels::fp8_gemm(a, b, c, s, limited(48)); }, "kernels::fp8_gemm: a Limited accumulator needs");
  Tensor c_int = Tensor::empty({8, 6}, {.dtype = DType::I32});
  check_error([&] { kernels::fp8_gemm(a, b, c_int, s); }, "kernels::fp8_gemm: C must be f32");
  // fp8_quantize: every scale finite and positive, and one per block.
  const auto quantize = [&](const Tensor& scale, Fp8Blocks blocks) {
    return [&x, scale, blocks] { kernels::fp8_quantize(x, scale, blocks, DType::E4M3); };
  };
  for (double bad : {0.0, -1.0, double(INFINITY), double(NAN)})
    check_error(quantize(full({1, 1}, bad), {0, 0}), fmt::format("kernels::fp8_quantize: scale {} of block 0", bad));
  check_error(quantize(ones({8, 1}), {1, 128}), "kernels::fp8_quantize: scale must be f32 of shape");
  check_error([&] { kernels::fp8_block_amax(ones({8}), {0, 0}); }, "kernels::fp8_block_amax");
}

TEST_CASE("fp8_gemm: the same bits on 1 and 2 threads, with either accumulator") {
  // Large enough that both the F32 tiles and the Limited model's rows are cut into several chunks.
  const int threads = num_threads();
  for (const Fp8Accumulator& acc : {Fp8Accumulator{}, limited(128)}) {
    const std::int64_t m = acc.limited ? 64 : 200, n = 260, k = 300;
    const Fp8Tensor a = quantized(spread_randn(m, k, 6), {1, 128}, DType::E4M3);
    const Fp8Tensor b = quantized(spread_randn(n, k, 7), {128, 128}, DType::E4M3);
    std::vector<std::vector<float>> results;
    for (int t : {1, 2}) {
      set_num_threads(t);
      Tensor c = Tensor::empty({m, n});
      kernels::fp8_gemm(a, b, c, {.m = m, .n = n, .k = k, .transpose_b = true}, acc);
      results.push_back(c.to_vector<float>());
    }
    INFO("limited " << acc.limited);
    CHECK(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)) == 0);
  }
  set_num_threads(threads);
}

TEST_CASE("fp8_gemm: k = 0 stores the epilogue of a zero sum, also where the scale grids along k are empty") {
  // Like kernels::gemm (tests/test_ops_matmul.cpp: "k = 0 gives zeros"). With blocks along k the scale
  // grids are [m, 0] and [0, 1]: there is no scale to read, and none may be read.
  const Tensor bias = from_vector({-1, 0, 2, 0.5}, {4});
  for (const auto& [ba, bb] : {std::pair<Fp8Blocks, Fp8Blocks>{{0, 0}, {0, 0}}, {{1, 128}, {128, 128}}})
    for (const Fp8Accumulator& acc : {Fp8Accumulator{}, limited(128)}) {
      const Tensor x = Tensor::empty({3, 0}), w = Tensor::empty({0, 4});
      const Fp8Tensor a = kernels::fp8_quantize(x, ones(kernels::fp8_scale_shape({3, 0}, ba)), ba, DType::E4M3);
      const Fp8Tensor b = kernels::fp8_quantize(w, ones(kernels::fp8_scale_shape({0, 4}, bb)), bb, DType::E4M3);
      Tensor c = full({3, 4}, 7.0);
      INFO("blocks along k " << ba.cols << ", limited " << acc.limited);
      kernels::fp8_gemm(a, b, c, {.m = 3, .n = 4, .k = 0}, acc,
                        {.bias = bias, .activation = kernels::Activation::Relu});
      check_values(c, {0, 0, 2, 0.5, 0, 0, 2, 0.5, 0, 0, 2, 0.5});
    }
}
