// Which library runs the CPU's f32/f64 GEMM (kernels/cpu/blas_choice.h), and that both keep the GEMM
// contract (kernels/gemm.h).
//
// The choice is a pure function of a core name, the CPU's features, what Eigen was compiled for and
// MG_GEMM, so each case hands it those inputs; no case depends on the machine that runs it. The
// numerics cases run the same GEMMs on Eigen and on OpenBLAS (kernels::cpu::gemm_on) against an f64
// reference. No case measures time: which library is faster is for bench/train_step.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/blas_choice.h"
#include "kernels/gemm.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;
using kernels::GemmShape;
using kernels::cpu::choose_gemm;
using kernels::cpu::CpuFeatures;
using kernels::cpu::GemmChoiceInputs;
using kernels::cpu::GemmLibrary;
using kernels::cpu::VectorWidth;

namespace {

const CpuFeatures kAvx512Cpu{.avx = true, .avx2 = true, .avx512f = true};
const CpuFeatures kAvx2Cpu{.avx = true, .avx2 = true};
const CpuFeatures kAvxCpu{.avx = true};

// A build that links OpenBLAS, whose detection picked `core`, running on `cpu`; Eigen compiled for
// AVX-512 unless told otherwise (it then runs at the CPU's width at most).
GemmChoiceInputs inputs(const std::string& core, CpuFeatures cpu, VectorWidth eigen_width = VectorWidth::Avx512) {
  return {.mg_gemm = std::nullopt,
          .have_openblas = true,
          .openblas_core = core,
          .openblas_version = "0.3.21",
          .cpu = cpu,
          .micro = {},
          .eigen_width = eigen_width,
          .eigen_version = "3.4.0"};
}

GemmChoiceInputs with_mg_gemm(GemmChoiceInputs in, const std::string& value) {
  in.mg_gemm = value;
  return in;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// choose_gemm must throw mg::Error whose message holds every one of `parts`.
void check_choice_error(const GemmChoiceInputs& in, const std::vector<std::string>& parts) {
  try {
    choose_gemm(in);
    FAIL("no mg::Error was thrown");
  } catch (const Error& error) {
    const std::string message = error.what();
    INFO("message: " << message);
    for (const std::string& part : parts) CHECK(contains(message, part));
  }
}

}  // namespace

TEST_CASE("gemm choice: OpenBLAS's generic Prescott kernels on an AVX-512 CPU give way to Eigen") {
  const auto choice = choose_gemm(inputs("Prescott", kAvx512Cpu));
  CHECK(choice.library == GemmLibrary::Eigen);
  INFO(choice.description);
  CHECK(choice.description.starts_with("Eigen 3.4.0 AVX-512 ("));
  CHECK(contains(choice.description, "OpenBLAS 0.3.21 would run its generic Prescott kernels on this AVX-512 CPU"));
  CHECK(contains(choice.description, "MG_GEMM=openblas forces it"));
  // Generic kernels do not run by themselves on any CPU, nor in a build whose Eigen is SSE only.
  CHECK(choose_gemm(inputs("Nehalem", kAvx2Cpu)).library == GemmLibrary::Eigen);
  CHECK(choose_gemm(inputs("Prescott", CpuFeatures{}, VectorWidth::Sse)).library == GemmLibrary::Eigen);
}

TEST_CASE("gemm choice: OpenBLAS runs kernels at least as wide as Eigen's") {
  const auto skylake = choose_gemm(inputs("SkylakeX", kAvx512Cpu));
  CHECK(skylake.library == GemmLibrary::OpenBlas);
  CHECK(skylake.description == "OpenBLAS 0.3.21 SkylakeX (AVX-512 kernels, one thread)");
  const auto haswell = choose_gemm(inputs("Haswell", kAvx2Cpu));  // Eigen is AVX2 at most on an AVX2 CPU
  CHECK(haswell.library == GemmLibrary::OpenBlas);
  CHECK(haswell.description == "OpenBLAS 0.3.21 Haswell (AVX2 kernels, one thread)");
  CHECK(choose_gemm(inputs("Zen", kAvx2Cpu)).library == GemmLibrary::OpenBlas);
  CHECK(choose_gemm(inputs("Sandybridge", kAvxCpu)).library == GemmLibrary::OpenBlas);
  // A portable build (Eigen for SSE or AVX2 only) on an AVX-512 CPU: OpenBLAS's wider kernels win.
  CHECK(choose_gemm(inputs("Haswell", kAvx512Cpu, VectorWidth::Avx2)).library == GemmLibrary::OpenBlas);
  CHECK(choose_gemm(inputs("SkylakeX", kAvx512Cpu, VectorWidth::Sse)).library == GemmLibrary::OpenBlas);
  // OPENBLAS_CORETYPE takes names in any case, and so does the table.
  CHECK(choose_gemm(inputs("skylakex", kAvx512Cpu)).library == GemmLibrary::OpenBlas);
}

TEST_CASE("gemm choice: narrower OpenBLAS kernels than Eigen's give way to Eigen") {
  const auto choice = choose_gemm(inputs("Haswell", kAvx512Cpu));
  CHECK(choice.library == GemmLibrary::Eigen);
  INFO(choice.description);
  CHECK(contains(choice.description, "OpenBLAS 0.3.21 would run its AVX2 Haswell kernels, narrower than Eigen's"));
  CHECK(choose_gemm(inputs("Sandybridge", kAvx2Cpu)).library == GemmLibrary::Eigen);
}

TEST_CASE("gemm choice: a core name the table does not know runs Eigen, and says so") {
  for (const std::string core : {"Zen5", "NEOVERSEN1", ""}) {
    const auto choice = choose_gemm(inputs(core, kAvx512Cpu));
    CHECK(choice.library == GemmLibrary::Eigen);
    INFO(choice.description);
    CHECK(contains(choice.description, "'" + core + "' kernels, whose vector width mixgrad does not know"));
    CHECK(contains(choice.description, "MG_GEMM=openblas forces them"));
  }
  CHECK_FALSE(kernels::cpu::openblas_kernel_width("Zen5").has_value());
  CHECK(kernels::cpu::openblas_kernel_width("Cooperlake") == VectorWidth::Avx512);
  CHECK(kernels::cpu::openblas_kernel_width("Prescott") == VectorWidth::Sse);
}

TEST_CASE("gemm choice: off x86 OpenBLAS's own detection is kept; without OpenBLAS, Eigen") {
  GemmChoiceInputs arm = inputs("NEOVERSEN1", CpuFeatures{.x86 = false});
  CHECK(choose_gemm(arm).library == GemmLibrary::OpenBlas);
  CHECK(choose_gemm(arm).description == "OpenBLAS 0.3.21 NEOVERSEN1 (one thread)");
  GemmChoiceInputs no_blas = inputs("", kAvx512Cpu);
  no_blas.have_openblas = false;
  CHECK(choose_gemm(no_blas).library == GemmLibrary::Eigen);
  CHECK(choose_gemm(no_blas).description == "Eigen 3.4.0 AVX-512 (this build has no OpenBLAS)");
}

TEST_CASE("gemm choice: MG_GEMM overrides the rule both ways; empty means unset") {
  const auto eigen = choose_gemm(with_mg_gemm(inputs("SkylakeX", kAvx512Cpu), "eigen"));
  CHECK(eigen.library == GemmLibrary::Eigen);
  CHECK(eigen.description == "Eigen 3.4.0 AVX-512 (MG_GEMM=eigen)");
  const auto openblas = choose_gemm(with_mg_gemm(inputs("Prescott", kAvx512Cpu), "openblas"));
  CHECK(openblas.library == GemmLibrary::OpenBlas);
  CHECK(openblas.description == "OpenBLAS 0.3.21 Prescott (one thread; MG_GEMM=openblas)");
  CHECK(choose_gemm(with_mg_gemm(inputs("Prescott", kAvx512Cpu), "")).library == GemmLibrary::Eigen);
  CHECK(choose_gemm(with_mg_gemm(inputs("SkylakeX", kAvx512Cpu), "")).library == GemmLibrary::OpenBlas);
  GemmChoiceInputs no_blas = with_mg_gemm(inputs("", kAvx512Cpu), "eigen");
  no_blas.have_openblas = false;
  CHECK(choose_gemm(no_blas).library == GemmLibrary::Eigen);
}

TEST_CASE("gemm choice: a bad MG_GEMM is an error naming the variable, the value and the allowed values") {
  for (const std::string value : {"OpenBLAS", "mkl", "blas", "eigen "}) {
    INFO("MG_GEMM=" << value);
    check_choice_error(with_mg_gemm(inputs("SkylakeX", kAvx512Cpu), value),
                       {"MG_GEMM=" + value + ":", "allowed values are eigen and openblas"});
  }
  GemmChoiceInputs no_blas = with_mg_gemm(inputs("", kAvx512Cpu), "openblas");
  no_blas.have_openblas = false;
  check_choice_error(no_blas, {"MG_GEMM=openblas", "has no OpenBLAS", "MG_GEMM=eigen"});
}

TEST_CASE("gemm choice: this process's choice is the rule applied to its inputs") {
  const GemmChoiceInputs in = kernels::cpu::gemm_choice_inputs();
  kernels::cpu::GemmChoice expected;
  try {
    expected = choose_gemm(in);
  } catch (const Error&) {  // a bad MG_GEMM in this process's environment
    check_error([] { kernels::cpu::gemm_backend(); }, "MG_GEMM=");
    return;
  }
  MESSAGE("this process: OpenBLAS core '" << in.openblas_core << "', GEMM: " << kernels::cpu::gemm_backend());
  CHECK(kernels::cpu::gemm_backend() == expected.description + "; microkernels: " + expected.microkernels);
  CHECK(kernels::cpu::gemm_choice().library == expected.library);
  CHECK(kernels::cpu::gemm_choice().f16 == expected.f16);
  CHECK(kernels::cpu::gemm_choice().bf16 == expected.bf16);
}

namespace {

const kernels::cpu::MicroCpu kAllMicro{.avx2_fma = true, .avx512f = true, .avx512_bf16 = true, .bf16_dot_pays = true};
// An Intel CPU with AVX512_BF16 (Cooper Lake, Sapphire Rapids): vdpbf16ps at half the FMA's rate.
const kernels::cpu::MicroCpu kSlowBf16Dot{.avx2_fma = true, .avx512f = true, .avx512_bf16 = true};
const kernels::cpu::MicroCpu kAvx512NoBf16{.avx2_fma = true, .avx512f = true};
const kernels::cpu::MicroCpu kAvx2Micro{.avx2_fma = true};

GemmChoiceInputs on(kernels::cpu::MicroCpu micro, const std::string& mg_gemm = "") {
  GemmChoiceInputs in = inputs("SkylakeX", kAvx512Cpu);
  in.micro = micro;
  if (!mg_gemm.empty()) in.mg_gemm = mg_gemm;
  return in;
}

}  // namespace

TEST_CASE("gemm choice: f16, bf16 and f32 run on AVX-512's microkernels where the CPU has them") {
  using kernels::cpu::MicroKernelId;
  const auto all = choose_gemm(on(kAllMicro));
  CHECK(all.bf16 == MicroKernelId::Avx512Bf16Dot);
  CHECK(all.f16 == MicroKernelId::Avx512Fma);
  CHECK(all.f32 == MicroKernelId::Avx512Fma);
  CHECK(all.library == GemmLibrary::OpenBlas);  // f64's
  CHECK(all.microkernels == "f16 avx512-fma, bf16 avx512-bf16-dot, f32 avx512-fma");
  // A library MG_GEMM names multiplies f32 too, unless a kernel word says otherwise.
  CHECK_FALSE(choose_gemm(on(kAllMicro, "eigen")).f32.has_value());
  CHECK_FALSE(choose_gemm(on(kAllMicro, "openblas,avx512-bf16-dot")).f32.has_value());
  CHECK(choose_gemm(on(kAllMicro, "avx512-bf16-dot")).f32 == MicroKernelId::Avx512Fma);
  const auto no_bf16 = choose_gemm(on(kAvx512NoBf16));
  CHECK(no_bf16.bf16 == MicroKernelId::Avx512Fma);  // bf16 widened by a shift as it is packed
  // Where vdpbf16ps does fewer multiply-adds than the FMA, bf16 runs on the FMA too, unless MG_GEMM asks.
  const auto slow_dot = choose_gemm(on(kSlowBf16Dot));
  CHECK(slow_dot.bf16 == MicroKernelId::Avx512Fma);
  CHECK(slow_dot.microkernels == "f16 avx512-fma, bf16 avx512-fma, f32 avx512-fma");
  CHECK(choose_gemm(on(kSlowBf16Dot, "avx512-bf16-dot")).bf16 == MicroKernelId::Avx512Bf16Dot);
  // AVX2 alone widens (its FMA kernel was slower than OpenBLAS's AVX2 GEMM), unless MG_GEMM asks.
  const auto avx2 = choose_gemm(on(kAvx2Micro));
  CHECK_FALSE(avx2.f16.has_value());
  CHECK_FALSE(avx2.bf16.has_value());
  CHECK_FALSE(avx2.f32.has_value());  // the library
  const auto none = choose_gemm(on({}));
  CHECK_FALSE(none.f16.has_value());
  CHECK_FALSE(none.bf16.has_value());
  CHECK(none.microkernels == "f16 widen, bf16 widen");
}

TEST_CASE("gemm choice: MG_GEMM names a library and microkernels, comma-separated; a later kernel wins") {
  using kernels::cpu::MicroKernelId;
  const auto model = choose_gemm(on(kAllMicro, "model"));
  CHECK(model.f32 == MicroKernelId::ModelFma);
  CHECK(model.f16 == MicroKernelId::ModelFma);
  CHECK(model.bf16 == MicroKernelId::ModelBf16Dot);
  CHECK(model.microkernels == "f16 model-fma, bf16 model-bf16-dot, f32 model-fma");
  const auto eigen_model = choose_gemm(on(kAllMicro, "eigen,model"));
  CHECK(eigen_model.library == GemmLibrary::Eigen);
  CHECK(eigen_model.bf16 == MicroKernelId::ModelBf16Dot);
  const auto fma_then_dot = choose_gemm(on(kAllMicro, "avx512-fma,avx512-bf16-dot"));
  CHECK(fma_then_dot.f32 == MicroKernelId::Avx512Fma);
  CHECK(fma_then_dot.f16 == MicroKernelId::Avx512Fma);
  CHECK(fma_then_dot.bf16 == MicroKernelId::Avx512Bf16Dot);
  const auto widen = choose_gemm(on(kAllMicro, "widen"));
  CHECK_FALSE(widen.f16.has_value());
  CHECK_FALSE(widen.bf16.has_value());
  CHECK(choose_gemm(on(kAvx2Micro, "avx2-fma")).f32 == MicroKernelId::Avx2Fma);
  // A kernel the CPU cannot run is an error naming those it can; so are two libraries.
  check_choice_error(on(kAvx2Micro, "avx512-bf16-dot"),
                     {"MG_GEMM=avx512-bf16-dot", "lacks the instructions of the avx512-bf16-dot microkernel",
                      "kernels it runs: avx2-fma, model, widen"});
  check_choice_error(on(kAllMicro, "eigen,openblas"), {"MG_GEMM=eigen,openblas", "'openblas'", "one at most"});
  check_choice_error(on(kAllMicro, "model,fast"), {"'fast'", "avx512-bf16-dot, avx512-fma, avx2-fma, model"});
}

namespace {

// C = op(A) op(B) by plain loops in f64 over the operands' values, with each element's sum of
// |products|: the scale of any accumulation error.
struct Reference {
  std::vector<double> c, abs_sum;
};

Reference reference_gemm(const Tensor& a, const Tensor& b, const GemmShape& s) {
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  Reference r;
  for (std::int64_t t = 0; t < s.batch; ++t) {
    const double* A = av.data() + t * s.m * s.k;
    const double* B = bv.data() + t * s.k * s.n;
    for (std::int64_t i = 0; i < s.m; ++i)
      for (std::int64_t j = 0; j < s.n; ++j) {
        double sum = 0.0, abs_sum = 0.0;
        for (std::int64_t p = 0; p < s.k; ++p) {
          const double product = (s.transpose_a ? A[p * s.m + i] : A[i * s.k + p]) *
                                 (s.transpose_b ? B[j * s.k + p] : B[p * s.n + j]);
          sum += product;
          abs_sum += std::fabs(product);
        }
        r.c.push_back(sum);
        r.abs_sum.push_back(abs_sum);
      }
  }
  return r;
}

// One GEMM on `library` against the reference. Any order of k additions, each rounding by at most
// `unit` (2^-24 for f32, 2^-53 for f64), plus the one rounding of the result, stays within
// (k + 1) * unit * sum|products| of the exact value (Higham, Accuracy and Stability, 3.1): the bound
// grows with the accumulation length k, and the f64 reference is exact to far below it.
void check_library(GemmLibrary library, DType dtype, const GemmShape& s, std::uint64_t seed) {
  const double unit = dtype == DType::F64 ? 0x1p-53 : 0x1p-24;
  const std::string what = fmt::format("{}, {}, batch {}, m {}, n {}, k {}, transpose_a {}, transpose_b {}",
                                       library == GemmLibrary::Eigen ? "Eigen" : "OpenBLAS", dtype_name(dtype), s.batch,
                                       s.m, s.n, s.k, s.transpose_a, s.transpose_b);
  INFO(what);
  Generator generator(seed);
  const Tensor a = randn({s.batch, s.transpose_a ? s.k : s.m, s.transpose_a ? s.m : s.k}, generator).to(dtype);
  const Tensor b = randn({s.batch, s.transpose_b ? s.n : s.k, s.transpose_b ? s.k : s.n}, generator).to(dtype);
  Tensor c = full({s.batch, s.m, s.n}, 7.0, {.dtype = dtype});  // every element must be written
  kernels::cpu::gemm_on(library, a, b, c, s);
  const Reference r = reference_gemm(a, b, s);
  const std::vector<double> got = c.to_vector<double>();
  REQUIRE(got.size() == r.c.size());
  std::size_t outside = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - r.c[i]) <= static_cast<double>(s.k + 1) * unit * r.abs_sum[i])) ++outside;
  CHECK(outside == 0);
}

}  // namespace

TEST_CASE("gemm choice: Eigen and OpenBLAS both meet the f32 and f64 GEMM contract") {
  std::vector<GemmLibrary> libraries{GemmLibrary::Eigen};
  if (kernels::cpu::gemm_choice_inputs().have_openblas)
    libraries.push_back(GemmLibrary::OpenBlas);
  else
    MESSAGE("OpenBLAS half skipped: this build has no OpenBLAS");
  // The MLP's GEMMs at batch 128 (forward NT, dW = dY^T X as TN, dX = dY W as NN), odd sizes, a batch of
  // 3, a long accumulation, and every layout.
  struct Case {
    std::int64_t batch, m, n, k;
  };
  const std::vector<Case> cases{{1, 128, 256, 784}, {1, 256, 784, 128}, {1, 128, 10, 256}, {1, 1, 1, 1},
                                {1, 17, 7, 33},     {3, 5, 9, 65},      {1, 3, 2, 4099}};
  std::uint64_t seed = 0;
  for (GemmLibrary library : libraries)
    for (DType dtype : {DType::F32, DType::F64})
      for (const Case& c : cases)
        for (int layout = 0; layout < 4; ++layout)
          check_library(library, dtype,
                        {.batch = c.batch,
                         .m = c.m,
                         .n = c.n,
                         .k = c.k,
                         .transpose_a = (layout & 1) != 0,
                         .transpose_b = (layout & 2) != 0},
                        ++seed);
}

TEST_CASE("gemm choice: asking for OpenBLAS in a build without it is an error") {
  if (kernels::cpu::gemm_choice_inputs().have_openblas) {
    MESSAGE("skipped: this build has OpenBLAS");
    return;
  }
  Tensor c = zeros({2, 2});
  check_error(
      [&] {
        kernels::cpu::gemm_on(GemmLibrary::OpenBlas, ones({2, 2}), ones({2, 2}), c, {.m = 2, .n = 2, .k = 2});
      },
      "kernels::cpu::gemm_on");
}
