// The CUDA GEMM kernels (kernels/cuda/gemm.cu) against the CPU's kernels::cpu::gemm, and the GEMM
// epilogue and TF32 switch of kernels/gemm.h.
//
// GPU cases (skipped with a message when no device is visible) cover every kernel of the ladder:
// sizes 1, 7, 15, 17, 127, 128, 129 (misaligned rows: the simple WMMA kernel for f16/bf16), 136x200x40
// and the MLP's 128x784->256 (aligned: the pipelined one, with partial tiles along m, n and k), the
// classifier's n = 10 (the simple one again), k = 0, in all four layouts, f16/bf16 operands into
// f16/bf16/f32 outputs, f32 on CUDA cores and in TF32, batched, and with bias + relu/gelu. Every GPU
// output starts as NaN, so an element a kernel forgets to write fails the comparison.
// CPU cases (run everywhere): the epilogue against a plain f64 loop, and the TF32 switch's default.
//
// Tolerances. Both sides multiply the same rounded operands (f16 and bf16 products are exact in
// f32; f32 products round once) and add the k products (and the bias) in f32, in different orders.
// With S = the largest sum of |a_i b_i| (+ |bias|) of an element, the CPU's sum is within
// (k + 1) * 2^-24 * S of the exact one (Higham's gamma_(k+1), rounding to nearest), the GPU's within
// (k + 1) * 2^-23 * S (Tensor Cores may round their f32 additions toward zero: a whole ulp), so the
// two differ by at most 3 (k + 1) * 2^-24 * S (atol). Each side then rounds to nearest into the
// output dtype: at most one ulp of the output apart after that (rtol = eps: 2^-10 f16, 2^-7 bf16,
// 2^-23 f32), and 2^-24 absolute below f16's normal range. GELU (slope <= 1.13, an f32 erf within a
// few ulps on either side) at most doubles the atol.
#include "tests/testing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/gemm.h"

using namespace mg;
using namespace mg::testing;

namespace {

struct Size {
  std::int64_t batch, m, n, k;
};

// The operands of one product, stored as the flags say, N(0, 1) values rounded to `dtype`.
struct Operands {
  Tensor a, b;
  kernels::GemmShape shape;
};

Operands operands(Size size, bool transpose_a, bool transpose_b, DType dtype, std::uint64_t seed) {
  Generator generator(seed);
  const Shape a_shape = transpose_a ? Shape{size.batch, size.k, size.m} : Shape{size.batch, size.m, size.k};
  const Shape b_shape = transpose_b ? Shape{size.batch, size.n, size.k} : Shape{size.batch, size.k, size.n};
  Tensor a = randn(a_shape, generator).to(dtype);
  Tensor b = randn(b_shape, generator).to(dtype);
  return {a, b, {.batch = size.batch, .m = size.m, .n = size.n, .k = size.k, .transpose_a = transpose_a,
                 .transpose_b = transpose_b}};
}

// S of the header: the largest sum of |products| of one element, plus the largest |bias|.
double abs_scale(const Operands& in, const Tensor& bias) {
  const kernels::GemmShape& s = in.shape;
  Tensor sums = Tensor::empty({s.batch, s.m, s.n});
  kernels::cpu::gemm(abs(in.a.to(DType::F32)), abs(in.b.to(DType::F32)), sums, s);
  double scale = 0.0;
  for (double v : sums.to_vector<double>()) scale = std::max(scale, v);
  double bias_max = 0.0;
  if (bias.defined())
    for (double v : bias.to_vector<double>()) bias_max = std::max(bias_max, std::fabs(v));
  return scale + bias_max;
}

// Every element of `got` within atol + rtol * |expected|; one CHECK, naming the worst element.
void check_matches(const Tensor& got, const Tensor& expected, double rtol, double atol) {
  const std::vector<double> g = got.to_vector<double>(), e = expected.to_vector<double>();
  REQUIRE(g.size() == e.size());
  std::size_t failures = 0, worst = 0;
  double worst_excess = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double error = std::fabs(g[i] - e[i]), allowed = atol + rtol * std::fabs(e[i]);
    const double excess = std::isnan(error) ? std::numeric_limits<double>::infinity() : error - allowed;
    if (!(error <= allowed)) ++failures;
    if (excess > worst_excess) worst_excess = excess, worst = i;
  }
  INFO(failures << " of " << g.size() << " elements off; worst: element " << worst << ", got " << g[worst]
                << ", expected " << e[worst] << ", allowed error " << atol + rtol * std::fabs(e[worst]));
  CHECK(failures == 0);
}

}  // namespace

// ---- CPU: the epilogue and the switch --------------------------------------------------------------

TEST_CASE("gemm: TF32 is off by default (fp32 means fp32), and the switch reads back") {
  CHECK_FALSE(kernels::allow_tf32());
  kernels::set_allow_tf32(true);
  CHECK(kernels::allow_tf32());
  kernels::set_allow_tf32(false);
  CHECK_FALSE(kernels::allow_tf32());
}

TEST_CASE("gemm epilogue on the CPU: hand-computed bias and relu") {
  Tensor a = from_vector({1, 2, 3, 4}, {2, 2}, {.dtype = DType::F32});
  Tensor b = from_vector({5, 6, 7, 8}, {2, 2}, {.dtype = DType::F32});
  Tensor c = Tensor::empty({2, 2});
  const kernels::GemmShape shape{.m = 2, .n = 2, .k = 2};
  kernels::cpu::gemm(a, b, c, shape, {.bias = from_vector({-20, -60}, {2}, {.dtype = DType::F32})});
  check_values(c, {-1, -38, 23, -10});  // [[19, 22], [43, 50]] + [-20, -60]
  kernels::cpu::gemm(a, b, c, shape, {.bias = from_vector({-20, -60}, {2}, {.dtype = DType::F32}),
                                      .activation = kernels::Activation::Relu});
  check_values(c, {0, 0, 23, 0});
}

TEST_CASE("gemm epilogue on the CPU: bias then relu/gelu against an f64 loop, every layout and dtype") {
  const Size size{2, 5, 7, 9};
  struct Dtypes {
    DType in, out, bias;
  };
  for (Dtypes d : {Dtypes{DType::F64, DType::F64, DType::F64}, Dtypes{DType::F32, DType::F32, DType::F32},
                   Dtypes{DType::F16, DType::F16, DType::F16}, Dtypes{DType::F16, DType::F16, DType::F32},
                   Dtypes{DType::BF16, DType::BF16, DType::BF16}, Dtypes{DType::F16, DType::F32, DType::F32}}) {
    for (kernels::Activation activation :
         {kernels::Activation::None, kernels::Activation::Relu, kernels::Activation::Gelu}) {
      for (int layout = 0; layout < 4; ++layout) {
        const bool ta = layout & 1, tb = layout & 2;
        INFO("in " << dtype_name(d.in) << ", out " << dtype_name(d.out) << ", bias " << dtype_name(d.bias)
                   << ", activation " << static_cast<int>(activation) << ", transpose_a " << ta
                   << ", transpose_b " << tb);
        const Operands in = operands(size, ta, tb, d.in, 11 + layout);
        Generator generator(29);
        const Tensor bias = randn({size.n}, generator).to(d.bias);
        Tensor c = Tensor::empty({size.batch, size.m, size.n}, {.dtype = d.out});
        kernels::cpu::gemm(in.a, in.b, c, in.shape, {.bias = bias, .activation = activation});

        // matmul, then bias, then the activation, all in f64 on the operands' own values.
        const std::vector<double> av = in.a.to_vector<double>(), bv = in.b.to_vector<double>(),
                                  biases = bias.to_vector<double>();
        std::vector<double> expected;
        double scale = 0.0;
        for (std::int64_t t = 0; t < size.batch; ++t)
          for (std::int64_t i = 0; i < size.m; ++i)
            for (std::int64_t j = 0; j < size.n; ++j) {
              double sum = biases[j], abs_sum = std::fabs(biases[j]);
              for (std::int64_t p = 0; p < size.k; ++p) {
                const double x = av[t * size.m * size.k + (ta ? p * size.m + i : i * size.k + p)];
                const double y = bv[t * size.k * size.n + (tb ? j * size.k + p : p * size.n + j)];
                sum += x * y;
                abs_sum += std::fabs(x * y);
              }
              if (activation == kernels::Activation::Relu) sum = sum < 0 ? 0 : sum;
              if (activation == kernels::Activation::Gelu) sum = 0.5 * sum * (1 + std::erf(sum / std::sqrt(2.0)));
              expected.push_back(sum);
              scale = std::max(scale, abs_sum);
            }
        // The compute precision's error (f64 for f64, else f32) as in the header, against the exact
        // value here rather than another sum: (k + 2) units of S, doubled for GELU; then half an ulp
        // of the output for its one rounding, and half of f16's subnormal spacing.
        const double unit = d.in == DType::F64 ? 0x1p-53 : 0x1p-24;
        const double rounding = d.out == DType::F16 || d.out == DType::BF16 ? tolerance(d.out, 0.5) : 0.0;
        check_values(c, expected, rounding, 2.0 * static_cast<double>(size.k + 2) * unit * scale +
                                                (d.out == DType::F16 ? 0x1p-25 : 0.0));
      }
    }
  }
}

TEST_CASE("gemm on the CPU: the TF32 switch changes nothing there") {
  const Operands in = operands({1, 33, 17, 65}, false, true, DType::F32, 3);
  Tensor off = Tensor::empty({1, 33, 17}), on = Tensor::empty({1, 33, 17});
  kernels::cpu::gemm(in.a, in.b, off, in.shape);
  kernels::set_allow_tf32(true);
  kernels::cpu::gemm(in.a, in.b, on, in.shape);
  kernels::set_allow_tf32(false);
  check_close(on, off, 0.0, 0.0);
}

// ---- GPU: every kernel against the CPU -------------------------------------------------------------
#ifdef MG_WITH_CUDA

namespace {

// Runs one product on the GPU (into NaN) and on the CPU, and compares them with the header's
// tolerance; `extra_atol` in units of S for the TF32 rounding of the operands.
void check_gpu_gemm(const Operands& in, DType out, const kernels::GemmEpilogue& epilogue = {},
                    double extra_atol = 0.0) {
  const kernels::GemmShape& s = in.shape;
  INFO("batch " << s.batch << ", m " << s.m << ", n " << s.n << ", k " << s.k << ", transpose_a " << s.transpose_a
                << ", transpose_b " << s.transpose_b << ", " << dtype_name(in.a.dtype()) << " -> " << dtype_name(out)
                << (epilogue.bias.defined() ? ", bias" : "") << ", activation " << static_cast<int>(epilogue.activation)
                << ", tf32 " << kernels::allow_tf32());
  const Shape c_shape{s.batch, s.m, s.n};
  Tensor expected = Tensor::empty(c_shape, {.dtype = out});
  kernels::cpu::gemm(in.a, in.b, expected, s, epilogue);

  Tensor got = full(c_shape, std::numeric_limits<double>::quiet_NaN(), {.dtype = out}).to(Device::cuda());
  const kernels::GemmEpilogue on_gpu{.bias = epilogue.bias.defined() ? epilogue.bias.to(Device::cuda()) : Tensor(),
                                     .activation = epilogue.activation};
  kernels::cuda::gemm(in.a.to(Device::cuda()), in.b.to(Device::cuda()), got, s, on_gpu);

  const double scale = abs_scale(in, epilogue.bias);
  const double epilogue_factor = epilogue.activation == kernels::Activation::Gelu ? 2.0 : 1.0;
  const double atol = epilogue_factor * 3.0 * static_cast<double>(s.k + 1) * 0x1p-24 * scale + extra_atol * scale +
                      (out == DType::F16 ? 0x1p-24 : 0.0);
  check_matches(got.to(Device::cpu()), expected, dtype_eps(out), atol);
}

const std::vector<Size>& sizes() {
  static const std::vector<Size> all = {
      {1, 1, 1, 1},     {1, 7, 7, 7},      {1, 15, 15, 15},   {1, 17, 17, 17},  {1, 127, 127, 127},
      {1, 128, 128, 128}, {1, 129, 129, 129}, {1, 136, 200, 40}, {1, 128, 256, 784},  // MLP layer 1
      {1, 128, 10, 256},  {1, 5, 10, 784},    {1, 4, 8, 0},                           // classifier; k = 0
      {3, 17, 33, 40},    {3, 136, 200, 40}};                                         // batched
  return all;
}

// Sets the TF32 switch for its scope and puts it back off, even when a check throws.
struct Tf32Scope {
  explicit Tf32Scope(bool allow) { kernels::set_allow_tf32(allow); }
  ~Tf32Scope() { kernels::set_allow_tf32(false); }
};

}  // namespace

TEST_CASE("cuda gemm: f16 and bf16 operands into f16, bf16 and f32, every size and layout") {
  if (!have_gpu()) return;
  struct Dtypes {
    DType in, out;
  };
  for (Dtypes d : {Dtypes{DType::F16, DType::F16}, Dtypes{DType::F16, DType::F32}, Dtypes{DType::BF16, DType::BF16},
                   Dtypes{DType::BF16, DType::F32}})
    for (Size size : sizes())
      for (int layout = 0; layout < 4; ++layout)
        check_gpu_gemm(operands(size, layout & 1, layout & 2, d.in, 100 + layout), d.out);
}

TEST_CASE("cuda gemm: f32 on CUDA cores, every size and layout") {
  if (!have_gpu()) return;
  REQUIRE_FALSE(kernels::allow_tf32());
  for (Size size : sizes())
    for (int layout = 0; layout < 4; ++layout)
      check_gpu_gemm(operands(size, layout & 1, layout & 2, DType::F32, 200 + layout), DType::F32);
}

TEST_CASE("cuda gemm: bias (in C's dtype or f32) then relu or gelu, fused into every kernel") {
  if (!have_gpu()) return;
  Generator generator(7);
  for (DType dtype : {DType::F16, DType::BF16, DType::F32})
    for (Size size : {Size{1, 128, 256, 784}, Size{1, 128, 10, 256}, Size{3, 17, 33, 40}})
      for (kernels::Activation activation : {kernels::Activation::Relu, kernels::Activation::Gelu})
        for (DType bias_dtype : {dtype, DType::F32})
          for (int layout = 0; layout < 4; ++layout) {
            const Operands in = operands(size, layout & 1, layout & 2, dtype, 300 + layout);
            const Tensor bias = randn({size.n}, generator).to(bias_dtype);
            check_gpu_gemm(in, dtype, {.bias = bias, .activation = activation});
          }
}

TEST_CASE("cuda gemm: TF32 only when allowed; within TF32's rounding of f32 when on") {
  if (!have_gpu()) return;
  REQUIRE_FALSE(kernels::allow_tf32());
  for (int layout = 0; layout < 4; ++layout) {
    const Operands in = operands({1, 256, 256, 256}, layout & 1, layout & 2, DType::F32, 400 + layout);
    const Shape c_shape{1, 256, 256};
    const auto run = [&] {
      Tensor c = Tensor::empty(c_shape, {.device = Device::cuda()});
      kernels::cuda::gemm(in.a.to(Device::cuda()), in.b.to(Device::cuda()), c, in.shape);
      return c.to(Device::cpu());
    };
    // Off: the CUDA-core kernel, the same bits every run.
    const Tensor fp32 = run();
    check_close(run(), fp32, 0.0, 0.0);
    Tf32Scope tf32(true);
    // On: each operand rounded to 10 mantissa bits (2^-11 relative each), so every product is off by
    // up to ~2^-10 of itself: 2^-10 * S on top of the f32 accumulation.
    check_gpu_gemm(in, DType::F32, {}, 0x1p-10);
    const std::vector<double> tf32_values = run().to_vector<double>(), fp32_values = fp32.to_vector<double>();
    const bool differs = tf32_values != fp32_values;  // random f32 operands do not fit in TF32's 10 bits
    CHECK(differs);
  }
  CHECK_FALSE(kernels::allow_tf32());
}

#endif  // MG_WITH_CUDA
