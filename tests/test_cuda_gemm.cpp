// The CUDA GEMM kernels (kernels/cuda/gemm.cu) against the CPU's kernels::cpu::gemm, and the GEMM
// epilogue and TF32 switch of kernels/gemm.h.
//
// GPU cases (skipped with a message when no device is visible) cover every kernel of the ladder:
// sizes 1, 7, 15, 17, 127, 128, 129 (misaligned rows: rung 3's copies through registers), 136x200x40
// and the MLP's 128x784->256 (aligned: rung 3's cp.async, with partial tiles along m, n and k), the
// classifier's n = 10 (misaligned again), k = 0, in all four layouts, f16/bf16 operands into
// f16/bf16/f32 outputs, f32 on CUDA cores and in TF32, batched, and with bias + relu/gelu; rung 3's
// 128x256 tile, taken when C has a tile per SM (test_cuda_gemm_few_sms: the emulator reports 4 SMs);
// rungs 1 and 2 (f16 WMMA) when kernels::cuda::set_gemm_rung asks for them. Split-K (a long k over
// one to three output tiles: 64x40 over k = 1544, 3x9 over 2055, batched) in every kernel that
// splits, where the plan must say it splits, plain and with bias + GELU (the second pass's epilogue),
// on random values and exactly on integer ones, and the same bits on a second run. Every GPU output starts as NaN, so an
// element a kernel forgets to write fails the comparison.
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
// few ulps on either side) at most doubles the atol. Split-K changes only the order of the f32
// additions, which the bound above already allows for; being loose at a long k (S grows with k), it
// is backed by exact checks on integer operands (integer_valued below).
#include "tests/testing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
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
  return {a,
          b,
          {.batch = size.batch,
           .m = size.m,
           .n = size.n,
           .k = size.k,
           .transpose_a = transpose_a,
           .transpose_b = transpose_b}};
}

// S of the header: the largest sum of |products| of one element, plus the largest |bias|.
[[maybe_unused]] double abs_scale(const Operands& in, const Tensor& bias) {
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
[[maybe_unused]] void check_matches(const Tensor& got, const Tensor& expected, double rtol, double atol) {
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
  kernels::cpu::gemm(a, b, c, shape,
                     {.bias = from_vector({-20, -60}, {2}, {.dtype = DType::F32}),
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
                   << ", activation " << static_cast<int>(activation) << ", transpose_a " << ta << ", transpose_b "
                   << tb);
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
        check_values(c, expected, rounding,
                     2.0 * static_cast<double>(size.k + 2) * unit * scale + (d.out == DType::F16 ? 0x1p-25 : 0.0));
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
#include "tests/cuda_device.h"

namespace {

// The product on the CPU (kernels::cpu::gemm), the reference.
Tensor cpu_gemm(const Operands& in, DType out, const kernels::GemmEpilogue& epilogue) {
  const kernels::GemmShape& s = in.shape;
  Tensor expected = Tensor::empty({s.batch, s.m, s.n}, {.dtype = out});
  kernels::cpu::gemm(in.a, in.b, expected, s, epilogue);
  return expected;
}

// The product on the GPU, into an output poisoned with NaN (an element no kernel writes stays NaN),
// copied back to the CPU.
Tensor gpu_gemm(const Operands& in, DType out, const kernels::GemmEpilogue& epilogue) {
  const kernels::GemmShape& s = in.shape;
  Tensor got = full({s.batch, s.m, s.n}, std::numeric_limits<double>::quiet_NaN(), {.dtype = out}).to(Device::cuda());
  const kernels::GemmEpilogue on_gpu{.bias = epilogue.bias.defined() ? epilogue.bias.to(Device::cuda()) : Tensor(),
                                     .activation = epilogue.activation};
  kernels::cuda::gemm(in.a.to(Device::cuda()), in.b.to(Device::cuda()), got, s, on_gpu);
  return got.to(Device::cpu());
}

std::string describe(const Operands& in, DType out, const kernels::GemmEpilogue& epilogue) {
  const kernels::GemmShape& s = in.shape;
  return fmt::format("batch {}, m {}, n {}, k {}, transpose_a {}, transpose_b {}, {} -> {}{}, activation {}, tf32 {}",
                     s.batch, s.m, s.n, s.k, s.transpose_a, s.transpose_b, dtype_name(in.a.dtype()), dtype_name(out),
                     epilogue.bias.defined() ? ", bias" : "", static_cast<int>(epilogue.activation),
                     kernels::allow_tf32());
}

// Runs one product on the GPU (into NaN) and on the CPU, and compares them with the header's
// tolerance; `extra_atol` in units of S for the TF32 rounding of the operands.
void check_gpu_gemm(const Operands& in, DType out, const kernels::GemmEpilogue& epilogue = {},
                    double extra_atol = 0.0) {
  INFO(describe(in, out, epilogue));
  const double scale = abs_scale(in, epilogue.bias);
  const double epilogue_factor = epilogue.activation == kernels::Activation::Gelu ? 2.0 : 1.0;
  const double atol = epilogue_factor * 3.0 * static_cast<double>(in.shape.k + 1) * 0x1p-24 * scale +
                      extra_atol * scale + (out == DType::F16 ? 0x1p-24 : 0.0);
  check_matches(gpu_gemm(in, out, epilogue), cpu_gemm(in, out, epilogue), dtype_eps(out), atol);
}

// Operands (and a bias) of small integers, -3 to 3: exact in f16, bf16 and TF32; every product is an
// integer of at most 9, every sum of fewer than 2^24 / 9 of them an integer below 2^24, exact in f32
// in any order and any rounding of the additions (Tensor Cores' too). So the GPU's f32 sum is the
// CPU's to the bit, whatever the kernel and the split of k, and both round it into the output dtype
// alike: no tolerance hides a lost or doubled slice.
Tensor integer_valued(const Tensor& normal, DType dtype) {
  std::vector<double> values = normal.to_vector<double>();
  for (double& v : values) v = std::clamp(std::round(1.5 * v), -3.0, 3.0);
  return from_vector(values, normal.shape(), {.dtype = dtype});
}

// On integer operands: bit for bit, but for GELU, whose f32 erf differs between the CPU's libm and
// CUDA by a few ulps (CUDA's erff: 2): that moves GELU(x) by at most about 2^-22 |x|, and |x| <= S;
// 2^-20 S allows for it and the three f32 products around erf, and two f32 values that close may
// round one output ulp apart (rtol eps).
void check_gpu_gemm_exact(const Operands& in, DType out, const kernels::GemmEpilogue& epilogue) {
  INFO(describe(in, out, epilogue) << ", integer operands");
  const bool gelu = epilogue.activation == kernels::Activation::Gelu;
  const double atol = gelu ? 0x1p-20 * abs_scale(in, epilogue.bias) : 0.0;
  check_matches(gpu_gemm(in, out, epilogue), cpu_gemm(in, out, epilogue), gelu ? dtype_eps(out) : 0.0, atol);
}

const std::vector<Size>& sizes() {
  static const std::vector<Size> all = {{1, 1, 1, 1},       {1, 7, 7, 7},       {1, 15, 15, 15},
                                        {1, 17, 17, 17},    {1, 127, 127, 127}, {1, 128, 128, 128},
                                        {1, 129, 129, 129}, {1, 136, 200, 40},  {1, 128, 256, 784},  // MLP layer 1
                                        {1, 128, 10, 256},  {1, 5, 10, 784},    {1, 4, 8, 0},  // classifier; k = 0
                                        {3, 17, 33, 40},    {3, 136, 200, 40}};  // batched
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
  // Auto (rung 3 at these sizes: rung 4 only for large GEMMs), then on an H100 rung 4 asked for where it
  // takes the operands, for two of the dtype pairs (both operand types, both output widths), and not
  // under the sanitizers (reduced sizes: the optimised pass has run it).
  for (Dtypes d : {Dtypes{DType::F16, DType::F16}, Dtypes{DType::F16, DType::F32}, Dtypes{DType::BF16, DType::BF16},
                   Dtypes{DType::BF16, DType::F32}})
    for (Size size : sizes())
      for (int layout = 0; layout < 4; ++layout) {
        const Operands in = operands(size, layout & 1, layout & 2, d.in, 100 + layout);
        const std::string name = kernels::cuda::gemm_kernel_name(in.a.to(Device::cuda()), in.b.to(Device::cuda()),
                                                                 in.shape, d.out);
        INFO("kernel: " << name);
        check_gpu_gemm(in, d.out);
        const bool again = d.out == (d.in == DType::F16 ? DType::F16 : DType::F32) && !reduced_sizes();
        if (again && hopper()) {
          kernels::cuda::GemmRungGuard rung(kernels::cuda::GemmRung::Wgmma);
          INFO("kernel asked for: " << kernels::cuda::gemm_kernel_name(in.a.to(Device::cuda()), in.b.to(Device::cuda()),
                                                                       in.shape, d.out));
          check_gpu_gemm(in, d.out);
        }
      }
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

// ---- GPU: the rungs ---------------------------------------------------------------------------------

namespace {

// The most shared memory a block of the current device may have (with the opt-in).
int shared_per_block() {
  int device = 0, bytes = 0;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess);
  return bytes;
}
constexpr int kLargeTileShared = 192 * 1024;  // rung 3's 128x256 tile: 4 stages of 48 KiB

std::string kernel_for(DType dtype, const kernels::GemmShape& s) {
  const Shape a_shape = s.transpose_a ? Shape{s.batch, s.k, s.m} : Shape{s.batch, s.m, s.k};
  const Shape b_shape = s.transpose_b ? Shape{s.batch, s.n, s.k} : Shape{s.batch, s.k, s.n};
  const TensorOptions options{.dtype = dtype, .device = Device::cuda()};
  return kernels::cuda::gemm_kernel_name(Tensor::empty(a_shape, options), Tensor::empty(b_shape, options), s);
}

}  // namespace

TEST_CASE("cuda gemm: rungs 1 and 2 (f16 WMMA) when set_gemm_rung asks; bf16 and TF32 keep rung 3") {
  if (!have_gpu()) return;
  // Under the sanitizers (reduced sizes): an aligned, a misaligned, a batched and the classifier's shape.
  const std::vector<Size> rung_sizes =
      reduced_sizes() ? std::vector<Size>{{1, 17, 17, 17}, {1, 136, 200, 40}, {3, 17, 33, 40}, {1, 128, 10, 256}}
                      : sizes();
  const kernels::GemmShape aligned{.m = 136, .n = 200, .k = 40}, misaligned{.m = 17, .n = 17, .k = 17};
  CHECK(kernels::cuda::gemm_rung() == kernels::cuda::GemmRung::Auto);
  CHECK(kernel_for(DType::F16, aligned) == "mma 128x128x64, 3 stages");
  CHECK(kernel_for(DType::F16, misaligned) == "mma 128x128x64, 3 stages, any alignment");
  {
    kernels::cuda::GemmRungGuard rung(kernels::cuda::GemmRung::Wgmma);  // rung 4 where it takes them
    CHECK(kernel_for(DType::F16, aligned) == (hopper() ? "wgmma 128x256x64, 3 stages" : "mma 128x128x64, 3 stages"));
    CHECK(kernel_for(DType::F16, misaligned) == "mma 128x128x64, 3 stages, any alignment");
  }
  {
    kernels::cuda::GemmRungGuard rung(kernels::cuda::GemmRung::MmaPipelined);
    CHECK(kernel_for(DType::F16, aligned) == "mma 128x128x64, 3 stages");
    CHECK(kernel_for(DType::BF16, aligned) == "mma 128x128x64, 3 stages");
  }
  {
    kernels::cuda::GemmRungGuard rung(kernels::cuda::GemmRung::WmmaPipelined);
    CHECK(kernel_for(DType::F16, aligned) == "wmma 128x128x32, 4 stages");
    CHECK(kernel_for(DType::F16, misaligned) == "wmma simple 32x32x16");  // falls to the rung below
    CHECK(kernel_for(DType::BF16, aligned) == "mma 128x128x64, 3 stages");
    for (const Size size : rung_sizes)  // rung 2 where the rows are aligned, rung 1 elsewhere
      for (int layout = 0; layout < 4; ++layout)
        for (const DType out : {DType::F16, DType::F32})
          check_gpu_gemm(operands(size, layout & 1, layout & 2, DType::F16, 700 + layout), out);
  }
  {
    kernels::cuda::GemmRungGuard rung(kernels::cuda::GemmRung::WmmaSimple);
    CHECK(kernel_for(DType::F16, aligned) == "wmma simple 32x32x16");
    {
      Tf32Scope tf32(true);
      CHECK(kernel_for(DType::F32, aligned) == "tf32 mma 128x128x32, 3 stages");
    }
    for (const Size size : rung_sizes)
      for (int layout = 0; layout < 4; ++layout)
        check_gpu_gemm(operands(size, layout & 1, layout & 2, DType::F16, 800 + layout), DType::F16);
  }
  CHECK(kernels::cuda::gemm_rung() == kernels::cuda::GemmRung::Auto);
}

TEST_CASE("cuda gemm: the 128x256 tile only where a block may have its 192 KiB of shared memory") {
  if (!have_gpu()) return;
  // 8192^2 is 64 x 32 tiles of 128x256, one per SM on any GPU; only the plan is asked for. An H100
  // lets a block have 227 KiB, an A100 163, an Ada GPU 99 (test_cuda_gemm_ada: an emulated one).
  const int shared = shared_per_block();
  kernels::cuda::GemmRungGuard rung(kernels::cuda::GemmRung::MmaPipelined);  // rung 4 takes it on an H100
  const std::string name = kernel_for(DType::F16, {.m = 8192, .n = 8192, .k = 64});
  INFO(name << "; a block may have " << shared << " bytes of shared memory");
  CHECK(name.starts_with(shared >= kLargeTileShared ? "mma 128x256" : "mma 128x128"));
}

TEST_CASE("cuda gemm: rung 3's 128x256 tile, for a C with a tile per SM, every layout and dtype") {
  if (!have_gpu()) return;
  if (shared_per_block() < kLargeTileShared) {
    MESSAGE("skipped: this device's blocks may not have the 192 KiB of shared memory the 128x256 tile needs");
    return;
  }
  // The smallest C (of 256 rows, twice as many columns each try) that the plan gives the large tile:
  // it depends on the SM count (test_cuda_gemm_few_sms runs this on an emulator that reports 4).
  kernels::cuda::GemmRungGuard rung(kernels::cuda::GemmRung::MmaPipelined);  // rung 4 takes it on an H100
  std::int64_t n = 256;
  while (!kernel_for(DType::F16, {.m = 256, .n = n, .k = 72}).starts_with("mma 128x256")) {
    n *= 2;
    REQUIRE(n <= (std::int64_t{1} << 20));
  }
  INFO("n = " << n);
  Generator generator(9);
  Tf32Scope tf32(true);
  struct Dtypes {
    DType in, out;
  };
  for (Dtypes d : {Dtypes{DType::F16, DType::F16}, Dtypes{DType::BF16, DType::F32}, Dtypes{DType::F32, DType::F32}})
    for (int layout = 0; layout < 4; ++layout) {
      const Operands in = operands({1, 256, n, 72}, layout & 1, layout & 2, d.in, 900 + layout);
      CHECK(kernels::cuda::gemm_kernel_name(in.a.to(Device::cuda()), in.b.to(Device::cuda()), in.shape)
                .starts_with(d.in == DType::F32 ? "tf32 mma 128x256x32" : "mma 128x256x64"));
      const Tensor bias = randn({n}, generator).to(d.out);
      check_gpu_gemm(in, d.out, {.bias = bias, .activation = kernels::Activation::Gelu},
                     d.in == DType::F32 ? 0x1p-10 : 0.0);
    }
}

// ---- GPU: rung 4 (wgmma, sm_90a) -------------------------------------------------------------------------

TEST_CASE("cuda gemm: rung 4 (wgmma + TMA): every layout and dtype, ragged tiles, batched, several tiles a block") {
  if (!have_gpu()) return;
  if (!hopper()) {
    MESSAGE("skipped: rung 4 runs on compute capability 9.0 only (an H100 or H200)");
    return;
  }
  // Ragged along m, n and k (TMA's zeros and clipped stores); k of 3 and 5 steps of 64 (the stages'
  // phases wrap); batched; 9 and 8 tiles (more than test_cuda_gemm_few_sms's 4 SMs: a block walks
  // several, the producer running into the next tile while the consumers store this one).
  std::vector<Size> rung_sizes = {{1, 264, 520, 136}, {2, 136, 264, 312}, {1, 8, 16, 8}};
  kernels::cuda::GemmRungGuard rung(kernels::cuda::GemmRung::Wgmma);  // Auto keeps rung 4 for large GEMMs
  struct Dtypes {
    DType in, out;
  };
  std::vector<Dtypes> dtypes = {{DType::F16, DType::F16},
                                {DType::BF16, DType::F32},
                                {DType::F16, DType::F32},
                                {DType::BF16, DType::BF16}};
  if (reduced_sizes()) rung_sizes = {{2, 136, 264, 312}}, dtypes = {dtypes[0], dtypes[1]};
  Generator generator(19);
  for (const Dtypes d : dtypes)
    for (const Size size : rung_sizes)
      for (int layout = 0; layout < 4; ++layout) {
        const Operands in = operands(size, layout & 1, layout & 2, d.in, 1000 + layout);
        const std::string name = kernels::cuda::gemm_kernel_name(in.a.to(Device::cuda()), in.b.to(Device::cuda()),
                                                                 in.shape, d.out);
        INFO("kernel: " << name);
        CHECK(name.starts_with(d.out == DType::F32 ? "wgmma 128x128x64" : "wgmma 128x256x64"));
        if (layout == 1) {  // bias and GELU, once a size
          const Tensor bias = randn({size.n}, generator).to(d.out);
          check_gpu_gemm(in, d.out, {.bias = bias, .activation = kernels::Activation::Gelu});
        } else {
          check_gpu_gemm(in, d.out);
        }
        if (layout == 2) {  // bit for bit on integers
          Operands exact = operands(size, true, false, DType::F32, 1100);
          exact.a = integer_valued(exact.a, d.in);
          exact.b = integer_valued(exact.b, d.in);
          check_gpu_gemm_exact(exact, d.out, {});
        }
      }
  // Not taken: rows not on 16 bytes (n = 12 of f16 C is 24 bytes), and k = 0.
  CHECK(kernel_for(DType::F16, {.m = 64, .n = 12, .k = 64}).starts_with("mma"));
  CHECK(kernel_for(DType::F16, {.m = 64, .n = 64, .k = 0}).starts_with("mma"));
}

TEST_CASE("cuda gemm: Auto runs rung 4 only where it was measured to pay: 8 waves of its tiles, k >= 1024") {
  if (!have_gpu() || !hopper()) return;
  int device = 0, sms = 0;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess);
  INFO(sms << " SMs");
  // Only the plans are asked for. 8192^2 is 2048 tiles of 128x256: 8 waves on up to 256 SMs.
  CHECK(kernel_for(DType::F16, {.m = 8192, .n = 8192, .k = 1024}).starts_with("wgmma 128x256"));
  CHECK(kernel_for(DType::BF16, {.m = 8192, .n = 8192, .k = 1024}).starts_with("wgmma 128x256"));
  CHECK(kernel_for(DType::F16, {.m = 8192, .n = 8192, .k = 1000}).starts_with("mma"));  // k short of 1024
  // 4096^2, 512 tiles: rung 3 on an H100's 132 SMs (where it was faster), rung 4 on 64 SMs or fewer.
  CHECK(kernel_for(DType::F16, {.m = 4096, .n = 4096, .k = 1024}).starts_with(512 >= 8 * sms ? "wgmma" : "mma"));
  // The CNN's conv2 forward (25088 x 64 over k = 288) stays on rung 3 on any GPU.
  CHECK(kernel_for(DType::F16, {.m = 25088, .n = 64, .k = 288}).starts_with("mma"));
}

// ---- GPU: split-K -----------------------------------------------------------------------------------

TEST_CASE("cuda gemm: split-K only for a long k over few output tiles (the plan, on an empty product)") {
  if (!have_gpu()) return;
  // Only the plan is asked for: the tensors are allocated, never filled or multiplied.
  const auto plan = [](DType dtype, kernels::GemmShape s) {
    const Shape a_shape = s.transpose_a ? Shape{s.k, s.m} : Shape{s.m, s.k};
    const Shape b_shape = s.transpose_b ? Shape{s.n, s.k} : Shape{s.k, s.n};
    const TensorOptions options{.dtype = dtype, .device = Device::cuda()};
    return kernels::cuda::gemm_kernel_name(Tensor::empty(a_shape, options), Tensor::empty(b_shape, options), s);
  };
  const auto splits = [](const std::string& name) { return name.find("split-k") != std::string::npos; };
  // The CNN's weight gradients at batch 128 (dW = dY^T cols, TN): 3 and 1 output tiles over a long k.
  const std::string conv2_dw = plan(DType::F16, {.m = 64, .n = 288, .k = 25088, .transpose_a = true});
  const std::string conv1_dw = plan(DType::F16, {.m = 32, .n = 9, .k = 100352, .transpose_a = true});
  const std::string conv1_dw_f32 = plan(DType::F32, {.m = 32, .n = 9, .k = 100352, .transpose_a = true});
  INFO(conv2_dw << "; " << conv1_dw << "; " << conv1_dw_f32);
  CHECK((splits(conv2_dw) && conv2_dw.starts_with("mma 128x128x64, 3 stages, split-k")));
  CHECK((splits(conv1_dw) && conv1_dw.starts_with("mma 128x128x64, 3 stages, any alignment, split-k")));  // n = 9
  CHECK((splits(conv1_dw_f32) && conv1_dw_f32.starts_with("simt")));
  // Short k (the MLP's dW at batch 128, its first layer's forward), or enough tiles: no split.
  CHECK_FALSE(splits(plan(DType::F16, {.m = 256, .n = 784, .k = 128, .transpose_a = true})));
  CHECK_FALSE(splits(plan(DType::F16, {.m = 128, .n = 256, .k = 784, .transpose_b = true})));
  CHECK_FALSE(splits(plan(DType::F16, {.m = 4096, .n = 4096, .k = 4096})));
}

TEST_CASE("cuda gemm: split-K, every kernel that splits, against the CPU and exactly on integers") {
  if (!have_gpu()) return;
  REQUIRE_FALSE(kernels::allow_tf32());
  struct Mode {
    DType in, out;
    bool tf32;
  };
  // 64x40 over 1544 is one tile of rung 3's cp.async kernel for f16/bf16 (or TF32), 3x9 over 2055 one
  // of its kernel that copies through registers (k misaligns the rows); f32 without TF32 takes the
  // CUDA-core kernel. Batched, so that the partial sums' [slice, batch] layout is exercised. Each
  // kernel's last slice ends inside one of its k steps at one of the two k (1544 = 24 x 64 + 8 = 48 x
  // 32 + 8, 2055 = 32 x 64 + 7 = 256 x 8 + 7): the zero-fill along k, within a slice. (Short k: the
  // emulator multiplies rung 3's whole 128x128 tile, however little of it the product fills.)
  const std::vector<Size> sizes = {{2, 64, 40, 1544}, {3, 3, 9, 2055}};
  Generator generator(17);
  std::vector<Mode> modes{Mode{DType::F16, DType::F16, false},   Mode{DType::F16, DType::F32, false},
                          Mode{DType::BF16, DType::BF16, false}, Mode{DType::BF16, DType::F32, false},
                          Mode{DType::F32, DType::F32, false},   Mode{DType::F32, DType::F32, true}};
  std::vector<int> layouts{0, 1, 2, 3};
  if (reduced_sizes()) {  // every kernel that splits, both operand orders, each output precision once
    modes = {modes[0], modes[3], modes[4], modes[5]};
    layouts = {0, 3};
  }
  for (Mode mode : modes) {
    Tf32Scope tf32(mode.tf32);
    const double tf32_atol = mode.tf32 ? 0x1p-10 : 0.0;  // as in the TF32 test above
    for (Size size : sizes)
      for (int layout : layouts) {
        const bool ta = layout & 1, tb = layout & 2;
        const Operands random = operands(size, ta, tb, mode.in, 500 + layout);
        const std::string name = kernels::cuda::gemm_kernel_name(random.a.to(Device::cuda()),
                                                                 random.b.to(Device::cuda()), random.shape);
        INFO("kernel: " << name);
        CHECK(name.find("split-k") != std::string::npos);

        const DType bias_dtype = layout % 2 == 0 ? mode.out : DType::F32;  // both kinds the contract allows
        check_gpu_gemm(random, mode.out, {}, tf32_atol);
        const Tensor bias = randn({size.n}, generator).to(bias_dtype);
        check_gpu_gemm(random, mode.out, {.bias = bias, .activation = kernels::Activation::Gelu}, tf32_atol);

        Operands exact = operands(size, ta, tb, DType::F32, 600 + layout);
        exact.a = integer_valued(exact.a, mode.in);
        exact.b = integer_valued(exact.b, mode.in);
        const Tensor integer_bias = integer_valued(randn({size.n}, generator), bias_dtype);
        check_gpu_gemm_exact(exact, mode.out, {});
        check_gpu_gemm_exact(exact, mode.out, {.bias = integer_bias, .activation = kernels::Activation::Gelu});

        // The slices are added in a fixed order: the same bits again (one layout a mode: the order is
        // the second pass's, whatever the layout).
        if (layout == layouts.front())
          check_close(gpu_gemm(random, mode.out, {}), gpu_gemm(random, mode.out, {}), 0.0, 0.0);
      }
  }
  CHECK_FALSE(kernels::allow_tf32());
}

#endif  // MG_WITH_CUDA
