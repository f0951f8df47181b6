// The FP8 GEMM cases the suites share (test_fp8_gemm.cpp, test_cuda_fp8_gemm.cpp, test_cuda_fp8_wgmma.cpp): operands
// quantised on the CPU with every block shape of kernels/fp8.h, the GEMM run on either device, and the
// checks of a GPU result against the CPU's model: bit for bit on the emulator, within the bound of
// test_cuda_fp8_gemm.cpp's header on a GPU.
#pragma once

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/fp8.h"
#include "tests/testing.h"

namespace mg::testing::fp8_cases {

using kernels::Fp8Accumulator;
using kernels::Fp8Blocks;
using kernels::Fp8Tensor;

inline Fp8Tensor on(const Fp8Tensor& x, Device device) {
  return {x.codes.to(device), x.scale_inv.to(device), x.blocks};
}

// The bytes of each element, on the CPU.
inline std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  const auto* p = static_cast<const std::uint8_t*>(host.data_ptr());
  return {p, p + host.numel() * dtype_size(host.dtype())};
}

// GPU and CPU results equal bit for bit (NaN matching NaN in floating dtypes); one CHECK, naming the first
// element that differs. Returns how many differ.
inline std::int64_t check_same_bits(const std::string& what, const Tensor& gpu, const Tensor& cpu) {
  REQUIRE(gpu.dtype() == cpu.dtype());
  REQUIRE(gpu.shape() == cpu.shape());
  const std::vector<std::uint8_t> g = bytes_of(gpu), c = bytes_of(cpu);
  const std::size_t size = dtype_size(cpu.dtype());
  const bool floating = is_floating(cpu.dtype());
  const std::vector<double> gv = floating ? gpu.to(Device::cpu()).to(DType::F64).to_vector<double>()
                                          : std::vector<double>();
  const std::vector<double> cv = floating ? cpu.to(DType::F64).to_vector<double>() : std::vector<double>();
  std::int64_t differ = 0, first = -1;
  for (std::int64_t i = 0; i < cpu.numel(); ++i) {
    const std::size_t at = static_cast<std::size_t>(i) * size;
    if (std::memcmp(&g[at], &c[at], size) == 0) continue;
    if (floating && std::isnan(gv[static_cast<std::size_t>(i)]) && std::isnan(cv[static_cast<std::size_t>(i)]))
      continue;
    if (differ++ == 0) first = i;
  }
  std::string detail;
  if (first >= 0) {
    const std::size_t at = static_cast<std::size_t>(first) * size;
    detail = floating ? fmt::format("element {}: GPU {} CPU {}", first, gv[static_cast<std::size_t>(first)],
                                    cv[static_cast<std::size_t>(first)])
                      : fmt::format("element {}: GPU {:#04x} CPU {:#04x}", first, g[at], c[at]);
  }
  CHECK_MESSAGE(differ == 0, what << ": " << differ << " of " << cpu.numel() << " elements differ; " << detail);
  return differ;
}

// N(0, 1) values times powers of two from 1/4 to 4 that vary along both dimensions, so that blocks differ.
inline Tensor spread_randn(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  Generator generator(seed);
  std::vector<double> v = randn({rows, cols}, generator).to_vector<double>();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      v[static_cast<std::size_t>(r * cols + c)] *= std::exp2((r / 5 + c / 7) % 5 - 2);
  return from_vector(v, {rows, cols});
}

// fp8 max / amax per block (MX: the power of two at or below it; 1 where the amax is 0 or not finite),
// from the CPU's amax.
inline Tensor scales_for(const Tensor& amax, DType format, bool power_of_two) {
  std::vector<double> scale = amax.to(Device::cpu()).to_vector<double>();
  for (double& s : scale) {
    s = std::isfinite(s) && s > 0 ? fp8::format_info(format).max / s : 1.0;
    if (power_of_two) s = std::exp2(std::floor(std::log2(s)));
  }
  return from_vector(scale, amax.shape());
}

inline Fp8Tensor quantized(const Tensor& x, Fp8Blocks blocks, DType format, bool power_of_two = false) {
  return kernels::fp8_quantize(x, scales_for(kernels::fp8_block_amax(x, blocks), format, power_of_two), blocks, format);
}

// ---- GEMM cases ------------------------------------------------------------------------------------------

// Block extents in op() coordinates: along the lines (A's rows i, B's columns j) and along k.
struct Scaling {
  const char* name;
  std::int64_t a_line, a_k, b_line, b_k;
  bool power_of_two;
  int promote_every;  // the Limited mode's: it must divide the blocks along k (kernels/fp8.h)
};
inline const Scaling kPerTensor{"per-tensor", 0, 0, 0, 0, false, 0};
inline const Scaling kDeepSeek{"1x128 activations, 128x128 weights", 1, 128, 128, 128, false, 128};
inline const Scaling kMx{"MX 1x32", 1, 32, 1, 32, true, 32};
inline const Scaling kWeightGradient{"{128, 1} blocks of a weight gradient", 1, 128, 1, 128, false, 128};
inline Fp8Blocks stored_a(const Scaling& s, bool t) {
  return t ? Fp8Blocks{s.a_k, s.a_line} : Fp8Blocks{s.a_line, s.a_k};
}
inline Fp8Blocks stored_b(const Scaling& s, bool t) {
  return t ? Fp8Blocks{s.b_line, s.b_k} : Fp8Blocks{s.b_k, s.b_line};
}

struct GemmCase {
  std::int64_t m, n, k;
  bool transpose_a, transpose_b;
  DType fa, fb;
  Scaling scaling;
  DType out;
  bool epilogue;  // a bias in C's dtype and relu
};

inline std::string describe(const GemmCase& g) {
  return fmt::format("{}x{}x{} {}{} {}x{} {} -> {}{}", g.m, g.n, g.k, g.transpose_a ? 'T' : 'N',
                     g.transpose_b ? 'T' : 'N', dtype_name(g.fa), dtype_name(g.fb), g.scaling.name, g.out,
                     g.epilogue ? ", bias + relu" : "");
}

// The operands of a case on the CPU.
struct GemmOperands {
  Fp8Tensor a, b;
  kernels::GemmShape shape;
  kernels::GemmEpilogue epilogue;
};

inline GemmOperands operands(const GemmCase& g, std::uint64_t seed) {
  const Tensor x = spread_randn(g.transpose_a ? g.k : g.m, g.transpose_a ? g.m : g.k, seed);
  const Tensor w = spread_randn(g.transpose_b ? g.n : g.k, g.transpose_b ? g.k : g.n, seed + 1);
  GemmOperands o{quantized(x, stored_a(g.scaling, g.transpose_a), g.fa, g.scaling.power_of_two),
                 quantized(w, stored_b(g.scaling, g.transpose_b), g.fb, g.scaling.power_of_two),
                 {.m = g.m, .n = g.n, .k = g.k, .transpose_a = g.transpose_a, .transpose_b = g.transpose_b},
                 {}};
  if (g.epilogue) {
    Generator generator(seed + 2);
    o.epilogue = {.bias = randn({g.n}, generator).to(g.out), .activation = kernels::Activation::Relu};
  }
  return o;
}

inline Tensor run(const GemmOperands& o, DType out, const Fp8Accumulator& accumulator, Device device) {
  Tensor c = full({o.shape.m, o.shape.n}, std::nan(""), {.dtype = out, .device = device});  // unwritten: NaN
  const kernels::GemmEpilogue epilogue{.bias = o.epilogue.bias.defined() ? o.epilogue.bias.to(device) : Tensor(),
                                       .activation = o.epilogue.activation};
  kernels::fp8_gemm(on(o.a, device), on(o.b, device), c, o.shape, accumulator, epilogue);
  return c;
}

// S of the header for every element: sum over k of |a_ik b_kj|, scales included, plus |bias_j|.
inline std::vector<double> magnitudes(const GemmOperands& o) {
  Tensor s = Tensor::empty({o.shape.m, o.shape.n});
  kernels::cpu::gemm(abs(kernels::fp8_dequantize(o.a)), abs(kernels::fp8_dequantize(o.b)), s, o.shape);
  std::vector<double> v = s.to_vector<double>();
  if (o.epilogue.bias.defined()) {
    const std::vector<double> bias = o.epilogue.bias.to_vector<double>();
    for (std::size_t i = 0; i < v.size(); ++i) v[i] += std::fabs(bias[i % bias.size()]);
  }
  return v;
}

// The header's bound between two results of accumulators that keep at least 13 bits, G mma.sync apart
// between promotions. Returns how many elements are outside it (one CHECK).
inline std::int64_t check_within_bound(const std::string& what, const Tensor& got, const Tensor& reference,
                                       const std::vector<double>& s, std::int64_t groups, std::int64_t k) {
  const std::vector<double> g = got.to(Device::cpu()).to(DType::F64).to_vector<double>();
  const std::vector<double> r = reference.to(DType::F64).to_vector<double>();
  const double relative = 2.0 * (static_cast<double>(groups) * 0x1p-13 + static_cast<double>(2 * k + 16) * 0x1p-24);
  std::int64_t outside = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    const double bound = relative * s[i] + dtype_eps(reference.dtype()) * std::fabs(r[i]) + 0x1p-24;
    const double error = std::fabs(g[i] - r[i]);
    if (!(error <= bound)) ++outside;
    worst = std::max(worst, bound > 0 ? error / bound : error);
  }
  CHECK_MESSAGE(outside == 0,
                what << ": " << outside << " elements outside the bound (worst at " << worst << " of it)");
  return outside;
}

// The GPU against the CPU's Limited model: bit for bit on the emulator; on a GPU within the bound, and
// how many are equal bit for bit is printed.
inline void check_against_model(const std::string& what, const Tensor& gpu, const Tensor& model,
                                const std::vector<double>& s, std::int64_t groups, std::int64_t k) {
  if (cuda_emulated()) {
    check_same_bits(what, gpu, model);
    return;
  }
  check_within_bound(what, gpu, model, s, groups, k);
  const std::vector<std::uint8_t> g = bytes_of(gpu), c = bytes_of(model);
  const std::size_t size = dtype_size(model.dtype());
  std::int64_t same = 0;
  for (std::size_t at = 0; at < c.size(); at += size) same += std::memcmp(&g[at], &c[at], size) == 0;
  MESSAGE(what << ": " << same << " of " << model.numel() << " elements equal to the model bit for bit");
}

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Codes [rows, cols] (on the CPU) stored the other way: [cols, rows].
inline Tensor transposed_codes(const Tensor& codes) {
  const std::int64_t rows = codes.size(0), cols = codes.size(1);
  Tensor out = Tensor::empty({cols, rows}, {.dtype = codes.dtype()});
  const auto* from = static_cast<const std::uint8_t*>(codes.data_ptr());
  auto* to = static_cast<std::uint8_t*>(out.data_ptr());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) to[c * rows + r] = from[r * cols + c];
  return out;
}

// The GPU's own accumulator (kernels/fp8.h: by compute capability), promoted every `promote_every`. A
// build without CUDA (-DMG_CUDA=OFF) has no fp8_mma_accumulator to link; there the GPU cases return
// before they ask (have_gpu() is false).
inline Fp8Accumulator device_accumulator(int promote_every) {
#ifdef MG_WITH_CUDA
  Fp8Accumulator accumulator = kernels::cuda::fp8_mma_accumulator(Device::cuda());
#else
  Fp8Accumulator accumulator;
#endif
  accumulator.promote_every = promote_every;
  return accumulator;
}

// The same operands with A stored the other way ([k, m] and its scale grid transposed), which rung 1
// takes: the same values, so the same sums.
inline GemmOperands with_a_transposed(const GemmOperands& o) {
  GemmOperands t = o;
  t.a = {transposed_codes(o.a.codes), transpose(o.a.scale_inv, 0, 1), {o.a.blocks.cols, o.a.blocks.rows}};
  t.shape.transpose_a = !o.shape.transpose_a;
  return t;
}

}  // namespace mg::testing::fp8_cases
