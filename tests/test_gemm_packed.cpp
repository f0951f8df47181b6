// mixgrad's own CPU GEMM (kernels/cpu/gemm_packed.h) on every microkernel this CPU runs, the scalar
// models included, so packing, edges, blocks of k and the epilogue are tested on any machine.
//
// Every element of C must be exactly one chain of f32 operations in k order (microkernel.h), so each
// case compares bits with a plain loop that computes that chain element by element: fma from +0 for
// the FMA kernels, bf16_dot_step over pairs of k (the last one padded with zero) for the dot kernel,
// then bias, activation and one rounding into C's dtype. Shapes cross every block (k past KC, m past
// MC, n past NC), every edge (1, odd sizes), all four layouts, a batch, and k = 0. That the chain is
// the Tensor Core contract (within f32 accumulation error of an f64 reference) is test_ops_matmul's.
// B packed once for many GEMMs (kernels::prepare_gemm_b, the LSTM's W_hh) gives the same bits as
// packing it every time, on 1 and 2 threads.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/convert.h"
#include "kernels/cpu/blas_choice.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/gemm.h"
#include "kernels/pointwise.h"
#include "kernels/threads.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::kernels;
using namespace mg::kernels::cpu;

namespace {

struct Case {
  std::int64_t batch, m, n, k;
};

// Element (i, p) of op(A) and (p, j) of op(B) of product t, as f32 (exact: f32, f16, bf16 all fit).
struct Operands {
  std::vector<float> a, b;
  const GemmShape& s;
  float a_at(std::int64_t t, std::int64_t i, std::int64_t p) const {
    return a[static_cast<std::size_t>(t * s.m * s.k + (s.transpose_a ? p * s.m + i : i * s.k + p))];
  }
  float b_at(std::int64_t t, std::int64_t p, std::int64_t j) const {
    return b[static_cast<std::size_t>(t * s.k * s.n + (s.transpose_b ? j * s.k + p : p * s.n + j))];
  }
};

std::vector<float> values_of(const Tensor& t) {
  std::vector<float> values(static_cast<std::size_t>(t.numel()));
  convert(t.data_ptr(), t.dtype(), values.data(), DType::F32, t.numel());
  return values;
}

std::uint16_t bits_of(float bf16_value) {
  return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(bf16_value) >> 16);
}

// C's element (i, j) of product t as the kernel's arithmetic must compute it, before the epilogue.
float chain(MicroArith arith, const Operands& x, std::int64_t t, std::int64_t i, std::int64_t j) {
  float acc = 0.0f;
  const std::int64_t k = x.s.k;
  if (arith == MicroArith::Fma) {
    for (std::int64_t p = 0; p < k; ++p) acc = std::fma(x.a_at(t, i, p), x.b_at(t, p, j), acc);
    return acc;
  }
  for (std::int64_t p = 0; p < k; p += 2) {
    const float a_odd = p + 1 < k ? x.a_at(t, i, p + 1) : 0.0f, b_odd = p + 1 < k ? x.b_at(t, p + 1, j) : 0.0f;
    acc = bf16_dot_step(acc, bits_of(x.a_at(t, i, p)), bits_of(a_odd), bits_of(x.b_at(t, p, j)), bits_of(b_odd));
  }
  return acc;
}

float activate(Activation activation, float x) {
  switch (activation) {
    case Activation::None:
      return x;
    case Activation::Relu:
      return functors::Relu{}(x);
    case Activation::Gelu:
      return functors::Gelu{}(x);
  }
  return x;
}

// C = act(op(A) op(B) + bias) on `kernel`, checked bit for bit against the chains; returns mismatches.
int mismatches(const MicroKernel& kernel, DType dtype, DType c_dtype, const Case& c, bool transpose_a, bool transpose_b,
               Activation activation, bool with_bias, std::uint64_t seed) {
  const GemmShape s{
      .batch = c.batch, .m = c.m, .n = c.n, .k = c.k, .transpose_a = transpose_a, .transpose_b = transpose_b};
  Generator generator(seed);
  const Tensor a = randn({c.batch, transpose_a ? c.k : c.m, transpose_a ? c.m : c.k}, generator).to(dtype);
  const Tensor b = randn({c.batch, transpose_b ? c.n : c.k, transpose_b ? c.k : c.n}, generator).to(dtype);
  const Tensor bias = with_bias ? randn({c.n}, generator).to(c_dtype) : Tensor();
  Tensor out = full({c.batch, c.m, c.n}, 7.0, {.dtype = c_dtype});  // every element must be overwritten
  gemm_packed(kernel, a, b, out, s, {.bias = bias, .activation = activation});
  const Operands x{values_of(a), values_of(b), s};
  const std::vector<float> bias_values = with_bias ? values_of(bias) : std::vector<float>();
  const std::vector<float> got = values_of(out);
  int wrong = 0;
  for (std::int64_t t = 0; t < c.batch; ++t)
    for (std::int64_t i = 0; i < c.m; ++i)
      for (std::int64_t j = 0; j < c.n; ++j) {
        float sum = chain(kernel.arith, x, t, i, j);
        if (with_bias) sum += bias_values[static_cast<std::size_t>(j)];
        const float activated = activate(activation, sum);
        std::uint32_t rounded = 0;  // one rounding into C's dtype, and back to f32 (exact)
        float want = 0.0f;
        convert(&activated, DType::F32, &rounded, c_dtype, 1);
        convert(&rounded, c_dtype, &want, DType::F32, 1);
        const float value = got[static_cast<std::size_t>((t * c.m + i) * c.n + j)];
        const bool same = std::isnan(want) ? std::isnan(value)
                                           : std::bit_cast<std::uint32_t>(want) == std::bit_cast<std::uint32_t>(value);
        if (!same && wrong++ < 3)
          MESSAGE("C[" << t << "," << i << "," << j << "] = " << value << ", the chain gives " << want);
      }
  return wrong;
}

std::vector<DType> dtypes_of(const MicroKernel& kernel) {
  if (kernel.arith == MicroArith::Bf16Dot) return {DType::BF16};
  return {DType::F32, DType::F16, DType::BF16};
}

}  // namespace

TEST_CASE("packed GEMM: every kernel, dtype and layout gives exactly the chain of its arithmetic") {
  // k = 515 crosses the FMA kernels' block of k (384), k = 1030 the dot kernel's (512); m = 130 crosses
  // a block of rows (120); n = 1030 a block of columns (1024). Sizes 1 and odd ones leave edge tiles.
  const std::vector<Case> cases{{1, 1, 1, 1},       {1, 13, 33, 7},  {2, 25, 70, 515},
                                {1, 130, 40, 1030}, {1, 3, 1030, 5}, {1, 4, 5, 0}};
  for (const MicroKernel* kernel : runnable_microkernels())
    for (DType dtype : dtypes_of(*kernel))
      for (const Case& c : cases)
        for (int layout = 0; layout < 4; ++layout) {
          const bool transpose_a = layout & 1, transpose_b = layout & 2;
          INFO(kernel->name << " " << dtype_name(dtype) << " batch " << c.batch << " m " << c.m << " n " << c.n << " k "
                            << c.k << " transpose_a " << transpose_a << " transpose_b " << transpose_b);
          CHECK(mismatches(*kernel, dtype, dtype, c, transpose_a, transpose_b, Activation::None, false, 1 + layout) ==
                0);
        }
}

TEST_CASE("packed GEMM: the epilogue (bias, ReLU, GELU) on the f32 sums, then one rounding, into C of either dtype") {
  const Case c{1, 30, 45, 600};  // past the FMA kernels' block of k: the sums are kept between blocks
  for (const MicroKernel* kernel : runnable_microkernels())
    for (DType dtype : dtypes_of(*kernel))
      for (DType c_dtype : {dtype, DType::F32})
        for (Activation activation : {Activation::None, Activation::Relu, Activation::Gelu}) {
          INFO(kernel->name << " " << dtype_name(dtype) << " into " << dtype_name(c_dtype) << ", activation "
                            << static_cast<int>(activation));
          CHECK(mismatches(*kernel, dtype, c_dtype, c, false, true, activation, true, 11) == 0);
          CHECK(mismatches(*kernel, dtype, c_dtype, c, false, false, activation, activation == Activation::None, 12) ==
                0);
        }
}

TEST_CASE("packed GEMM: the same bits on 1 and 2 threads") {
  const int threads = num_threads();
  Generator generator(5);
  const Tensor a = randn({200, 300}, generator).to(DType::BF16), b = randn({300, 260}, generator).to(DType::BF16);
  const GemmShape s{.m = 200, .n = 260, .k = 300};
  for (const MicroKernel* kernel : runnable_microkernels()) {
    Tensor one = Tensor::empty({200, 260}, {.dtype = DType::BF16}),
           two = Tensor::empty({200, 260}, {.dtype = DType::BF16});
    set_num_threads(1);
    gemm_packed(*kernel, a, b, one, s);
    set_num_threads(2);
    gemm_packed(*kernel, a, b, two, s);
    INFO(kernel->name);
    CHECK(one.to_vector<double>() == two.to_vector<double>());
  }
  set_num_threads(threads);
}

TEST_CASE("packed GEMM: a bf16 value below 2^-126 is zero to the dot kernel and kept by the FMA kernels") {
  // 2^-130 is a bf16 subnormal; times 2^100 it would be 2^-30. vdpbf16ps reads it as zero
  // (kernels/cpu/microkernel.h); an f32 FMA, like the GPU's bf16 Tensor Cores, keeps it.
  const Tensor a = from_vector({0x1p-130, 1.0}, {1, 2}, {.dtype = DType::BF16});
  const Tensor b = from_vector({0x1p100, 0.0}, {2, 1}, {.dtype = DType::BF16});
  const GemmShape s{.m = 1, .n = 1, .k = 2};
  for (const MicroKernel* kernel : runnable_microkernels()) {
    Tensor c = Tensor::empty({1, 1}, {.dtype = DType::F32});
    gemm_packed(*kernel, a, b, c, s);
    INFO(kernel->name);
    CHECK(c.item() == (kernel->arith == MicroArith::Bf16Dot ? 0.0 : 0x1p-30));
  }
}

TEST_CASE("packed GEMM: mg::matmul of f16 and bf16 runs the chosen microkernel") {
  const GemmChoice& choice = gemm_choice();
  MESSAGE("this process: " << gemm_backend());
  Generator generator(9);
  for (DType dtype : {DType::F16, DType::BF16}) {
    const std::optional<MicroKernelId> id = dtype == DType::F16 ? choice.f16 : choice.bf16;
    if (!id) continue;  // "widen": the library's GEMM, test_ops_matmul's
    const Tensor a = randn({37, 410}, generator).to(dtype), b = randn({410, 45}, generator).to(dtype);
    Tensor direct = Tensor::empty({37, 45}, {.dtype = dtype});
    gemm_packed(*microkernel(*id), a, b, direct, {.m = 37, .n = 45, .k = 410});
    INFO(dtype_name(dtype) << " on " << microkernel_name(*id));
    CHECK(matmul(a, b).to_vector<double>() == direct.to_vector<double>());
  }
}

TEST_CASE("prepare_gemm_b: B packed (or widened) once gives the microkernel's bits, for f16, bf16 and f32") {
  // n = 50 is not a whole number of micro-panels; k = 2201 is several blocks of k (kernels/cpu/gemm_packed.h),
  // and odd k leaves the last bf16 pair of a block half empty (each panel's offset counts pairs); m = 200 > n
  // cuts the product along its rows, m = 1 and 45 along its columns.
  for (DType dtype : {DType::F16, DType::BF16, DType::F32}) {
    for (std::int64_t k : {70, 71, 2201}) {
      for (bool transpose_b : {true, false}) {
        CAPTURE(dtype);
        CAPTURE(k);
        CAPTURE(transpose_b);
        const Tensor b = mg::testing::uniform_in(transpose_b ? Shape{50, k} : Shape{k, 50}, dtype, 2, -1, 1);
        const kernels::GemmShape shape{.m = 33, .n = 50, .k = k, .transpose_b = transpose_b};
        const kernels::PreparedGemmB prepared = kernels::prepare_gemm_b(b, shape);
        // A microkernel's panels where one runs (blas_choice.h; for f32 AVX-512's FMA kernel, as a
        // convolution's), else the library's f32 copy of f16/bf16.
        const kernels::cpu::MicroKernel* kernel = dtype == DType::F32 ? kernels::cpu::convolution_microkernel(dtype)
                                                                      : kernels::cpu::gemm_microkernel(dtype);
        CHECK((prepared.panels != nullptr) == (kernel != nullptr));
        CHECK(prepared.widened.defined() == (!kernel && dtype != DType::F32));
        for (std::int64_t m : {1, 45, 200}) {
          CAPTURE(m);
          const Tensor a = mg::testing::uniform_in({m, k}, dtype, 1, -1, 1);
          Tensor expected = Tensor::empty({m, 50}, {.dtype = DType::F32}),
                 got = Tensor::empty({m, 50}, {.dtype = DType::F32});
          kernels::GemmShape with_m = shape;
          with_m.m = m;
          if (kernel)  // the microkernel's bits (gemm's own for f16 and bf16)
            kernels::cpu::gemm_packed(*kernel, a, b, expected, with_m);
          else
            kernels::gemm(a, b, expected, with_m);
          // On 2 threads a product with m < n and work for two tiles (45 x 50 x 2201) is cut between
          // its micro-panels: the second tile reads the prepared panels from the second one on.
          for (int threads : {1, 2}) {
            CAPTURE(threads);
            const int before = num_threads();
            set_num_threads(threads);
            kernels::gemm_prepared_b(a, b, prepared, got, with_m);
            set_num_threads(before);
            CHECK(got.to_vector<float>() == expected.to_vector<float>());
          }
        }
      }
    }
  }
  const Tensor b = mg::testing::uniform_in({50, 70}, DType::BF16, 2, -1, 1),
               a = mg::testing::uniform_in({4, 70}, DType::BF16, 1);
  const kernels::PreparedGemmB prepared = kernels::prepare_gemm_b(b, {.m = 4, .n = 50, .k = 70, .transpose_b = true});
  Tensor c = Tensor::empty({4, 50}, {.dtype = DType::F32});
  mg::testing::check_error([&] { kernels::gemm_prepared_b(a, b, prepared, c, {.m = 4, .n = 50, .k = 70}); },
                           "kernels::gemm_prepared_b: B was prepared for n 50, k 70 (transposed), not for n 50, k 70");
  mg::testing::check_error([&] { kernels::prepare_gemm_b(b, {.m = 4, .n = 50, .k = 71}); },
                           "kernels::prepare_gemm_b: needs one B of k x n = 71 x 50 elements");
}
