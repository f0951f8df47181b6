// The choice between OpenBLAS and Eigen for the CPU's f32/f64 GEMM: the rule, why, and its tests are
// described in kernels/cpu/blas_choice.h. This file holds the rule (choose_gemm, pure) and the one
// place that reads this process's inputs to it (gemm_choice).
#include "kernels/cpu/blas_choice.h"

#include <Eigen/Core>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <tuple>
#include <utility>
#ifdef MG_WITH_OPENBLAS
#include <cblas.h>
#endif

#include "core/error.h"
#include "kernels/gemm.h"

namespace mg::kernels::cpu {

namespace {

bool same_name(std::string_view a, std::string_view b) {
  return std::ranges::equal(a, b, [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  });
}

// OpenBLAS 0.3.21's x86 cores (driver/others/dynamic.c) by the vector width of their SGEMM kernels.
constexpr std::array<std::pair<std::string_view, VectorWidth>, 26> kOpenBlasCores{{
    {"Katmai", VectorWidth::Sse},        {"Coppermine", VectorWidth::Sse},
    {"Northwood", VectorWidth::Sse},     {"Prescott", VectorWidth::Sse},
    {"Banias", VectorWidth::Sse},        {"Atom", VectorWidth::Sse},
    {"Core2", VectorWidth::Sse},         {"Penryn", VectorWidth::Sse},
    {"Dunnington", VectorWidth::Sse},    {"Nehalem", VectorWidth::Sse},
    {"Athlon", VectorWidth::Sse},        {"Opteron", VectorWidth::Sse},
    {"Opteron_SSE3", VectorWidth::Sse},  {"Barcelona", VectorWidth::Sse},
    {"Nano", VectorWidth::Sse},          {"Bobcat", VectorWidth::Sse},
    {"Sandybridge", VectorWidth::Avx},   {"Bulldozer", VectorWidth::Avx},
    {"Piledriver", VectorWidth::Avx},    {"Steamroller", VectorWidth::Avx},
    {"Excavator", VectorWidth::Avx},     {"Haswell", VectorWidth::Avx2},
    {"Zen", VectorWidth::Avx2},          {"SkylakeX", VectorWidth::Avx512},
    {"Cooperlake", VectorWidth::Avx512}, {"SapphireRapids", VectorWidth::Avx512},
}};

VectorWidth widest_supported(const CpuFeatures& cpu) {
  if (cpu.avx512f) return VectorWidth::Avx512;
  if (cpu.avx2) return VectorWidth::Avx2;
  if (cpu.avx) return VectorWidth::Avx;
  return VectorWidth::Sse;
}

// "Eigen 3.4.0 AVX-512": the width its GEMM runs at here, the narrower of its build's and the CPU's.
std::string eigen_line(const GemmChoiceInputs& in) {
  if (!in.cpu.x86) return fmt::format("Eigen {}", in.eigen_version);
  return fmt::format("Eigen {} {}", in.eigen_version,
                     vector_width_name(std::min(in.eigen_width, widest_supported(in.cpu))));
}

std::string openblas_line(const GemmChoiceInputs& in) {
  return fmt::format("OpenBLAS {} {}", in.openblas_version, in.openblas_core);
}

}  // namespace

std::string_view vector_width_name(VectorWidth width) {
  switch (width) {
    case VectorWidth::Sse:
      return "SSE";
    case VectorWidth::Avx:
      return "AVX";
    case VectorWidth::Avx2:
      return "AVX2";
    case VectorWidth::Avx512:
      return "AVX-512";
  }
  return "?";
}

std::optional<VectorWidth> openblas_kernel_width(std::string_view core) {
  for (const auto& [name, width] : kOpenBlasCores)
    if (same_name(name, core)) return width;
  return std::nullopt;
}

namespace {

// The library rule of blas_choice.h; `value` is MG_GEMM's library, or empty.
std::pair<GemmLibrary, std::string> choose_library(const GemmChoiceInputs& in, const std::string& value) {
  // 1. The user's word, when given.
  if (!value.empty()) {
    if (value == "eigen") return {GemmLibrary::Eigen, fmt::format("{} (MG_GEMM=eigen)", eigen_line(in))};
    MG_CHECK(value == "openblas",
             "MG_GEMM={}: unknown GEMM library; allowed values are eigen and openblas (or leave MG_GEMM unset "
             "and mixgrad chooses)",
             value);
    MG_CHECK(in.have_openblas,
             "MG_GEMM=openblas, but this build of mixgrad has no OpenBLAS (MG_BLAS=OFF, or libopenblas-dev was "
             "not found when CMake ran); allowed here: MG_GEMM=eigen, or leave it unset");
    return {GemmLibrary::OpenBlas, fmt::format("{} (one thread; MG_GEMM=openblas)", openblas_line(in))};
  }
  // 2. Nothing to choose from.
  if (!in.have_openblas) return {GemmLibrary::Eigen, fmt::format("{} (this build has no OpenBLAS)", eigen_line(in))};
  // 3. Off x86: OpenBLAS's own detection.
  if (!in.cpu.x86) return {GemmLibrary::OpenBlas, fmt::format("{} (one thread)", openblas_line(in))};
  // 4. On x86: OpenBLAS's kernels must be AVX or wider, and at least as wide as Eigen's.
  const VectorWidth cpu_width = widest_supported(in.cpu);
  const VectorWidth eigen_width = std::min(in.eigen_width, cpu_width);
  const std::optional<VectorWidth> kernel_width = openblas_kernel_width(in.openblas_core);
  const std::string cpu = fmt::format("this {} CPU", vector_width_name(cpu_width));
  if (!kernel_width)
    return {GemmLibrary::Eigen,
            fmt::format("{} (OpenBLAS {} picked its '{}' kernels, whose vector width mixgrad does not know, on {}; "
                        "MG_GEMM=openblas forces them)",
                        eigen_line(in), in.openblas_version, in.openblas_core, cpu)};
  if (*kernel_width == VectorWidth::Sse)
    return {GemmLibrary::Eigen, fmt::format("{} (OpenBLAS {} would run its generic {} kernels on {}; "
                                            "MG_GEMM=openblas forces it)",
                                            eigen_line(in), in.openblas_version, in.openblas_core, cpu)};
  if (*kernel_width < eigen_width)
    return {GemmLibrary::Eigen,
            fmt::format("{} (OpenBLAS {} would run its {} {} kernels, narrower than Eigen's on {}; "
                        "MG_GEMM=openblas forces it)",
                        eigen_line(in), in.openblas_version, vector_width_name(*kernel_width), in.openblas_core, cpu)};
  return {GemmLibrary::OpenBlas,
          fmt::format("{} ({} kernels, one thread)", openblas_line(in), vector_width_name(*kernel_width))};
}

// MG_GEMM's kernel names (blas_choice.h), and what each sets.
struct KernelWord {
  std::string_view word;
  std::optional<MicroKernelId> f32, f16, bf16;  // nullopt: leaves that dtype's choice alone
  bool widen = false;  // sets f16 and bf16 to "widen"
};
const std::array<KernelWord, 5> kKernelWords{{
    {"avx512-bf16-dot", std::nullopt, std::nullopt, MicroKernelId::Avx512Bf16Dot},
    {"avx512-fma", MicroKernelId::Avx512Fma, MicroKernelId::Avx512Fma, MicroKernelId::Avx512Fma},
    {"avx2-fma", MicroKernelId::Avx2Fma, MicroKernelId::Avx2Fma, MicroKernelId::Avx2Fma},
    {"model", MicroKernelId::ModelFma, MicroKernelId::ModelFma, MicroKernelId::ModelBf16Dot},
    {"widen", std::nullopt, std::nullopt, std::nullopt, true},
}};

std::string kernel_name(std::optional<MicroKernelId> id, std::string_view otherwise) {
  return std::string(id ? microkernel_name(*id) : otherwise);
}

std::string runnable_words(const MicroCpu& cpu) {
  std::string words;
  for (const KernelWord& kernel : kKernelWords) {
    const std::optional<MicroKernelId> id = kernel.bf16 ? kernel.bf16 : kernel.f16;
    if (id && !cpu_runs(cpu, *id)) continue;
    words += words.empty() ? "" : ", ";
    words += kernel.word;
  }
  return words;
}

}  // namespace

GemmChoice choose_gemm(const GemmChoiceInputs& in) {
  // MG_GEMM: a library and kernels, comma-separated (an empty MG_GEMM counts as unset, as `MG_GEMM= cmd` means).
  std::string library;
  std::vector<const KernelWord*> kernels;
  if (in.mg_gemm) {
    std::string_view rest = *in.mg_gemm;
    while (!rest.empty()) {
      const std::string_view word = rest.substr(0, rest.find(','));
      rest.remove_prefix(std::min(rest.size(), word.size() + 1));
      const auto known = std::ranges::find(kKernelWords, word, &KernelWord::word);
      if (known != kKernelWords.end()) {
        kernels.push_back(&*known);
        continue;
      }
      MG_CHECK(library.empty() && (word == "eigen" || word == "openblas"),
               "MG_GEMM={}: '{}' is not one of the allowed values; allowed values are eigen and openblas (the "
               "f32/f64 library, one at most) and the microkernels avx512-bf16-dot, avx512-fma, avx2-fma, model "
               "and widen, comma-separated (e.g. MG_GEMM=openblas,model); or leave MG_GEMM unset and mixgrad chooses",
               *in.mg_gemm, word);
      library = word;
    }
  }
  GemmChoice choice;
  std::tie(choice.library, choice.description) = choose_library(in, library);
  // The microkernels: AVX-512's where the CPU has them, then the user's words in order. AVX2's FMA
  // kernel is not chosen by itself: measured on this project's Zen 4 with OpenBLAS's AVX2 (Haswell)
  // kernels forced, the MLP's mixed_float16 step took 3.83 ms on avx2-fma against 2.22 ms widened
  // for OpenBLAS (docs/cpu-gemm.md), so a CPU without AVX-512 widens.
  const MicroCpu& cpu = in.micro;
  const std::optional<MicroKernelId> fma = cpu.avx512f ? std::optional(MicroKernelId::Avx512Fma) : std::nullopt;
  choice.f16 = fma;
  // bf16 on vdpbf16ps only where it outruns the FMA (MicroCpu::bf16_dot_pays): on a Xeon whose
  // vdpbf16ps did 0.48x the FMA's multiply-adds, bf16 GEMMs ran at 79-91 GFLOP/s on it and at
  // 126-152 on avx512-fma (n = 128 to 1024, one thread, bench/matmul; docs/cpu-gemm.md).
  choice.bf16 = cpu.avx512_bf16 && cpu.bf16_dot_pays ? std::optional(MicroKernelId::Avx512Bf16Dot) : fma;
  // f32 on the FMA kernel too where the CPU has AVX-512, unless MG_GEMM names a library: at 1.2-1.4x
  // the GFLOP/s of Eigen's AVX-512 GEMM on a Zen 5 (n = 256 to 2048, bench/matmul_vs_torch), 1.07-1.3x
  // OpenBLAS's AVX-512 kernels on a Zen 4 (docs/results/cpu-bench.md), and the GPT's fp32 step 12%
  // faster. It is also one chain per element in a fixed order, the same bits on any thread count.
  if (library.empty()) choice.f32 = fma;
  for (const KernelWord* kernel : kernels) {
    for (std::optional<MicroKernelId> id : {kernel->f32, kernel->f16, kernel->bf16})
      MG_CHECK(!id || cpu_runs(cpu, *id),
               "MG_GEMM={}: this CPU lacks the instructions of the {} microkernel; kernels it runs: {}", *in.mg_gemm,
               kernel->word, runnable_words(cpu));
    if (kernel->widen) choice.f16 = choice.bf16 = std::nullopt;
    if (kernel->f32) choice.f32 = kernel->f32;
    if (kernel->f16) choice.f16 = kernel->f16;
    if (kernel->bf16) choice.bf16 = kernel->bf16;
  }
  choice.microkernels = fmt::format("f16 {}, bf16 {}{}", kernel_name(choice.f16, "widen"),
                                    kernel_name(choice.bf16, "widen"),
                                    choice.f32 ? ", f32 " + kernel_name(choice.f32, "") : "");
  return choice;
}

GemmChoiceInputs gemm_choice_inputs() {
  GemmChoiceInputs in;
  if (const char* mg_gemm = std::getenv("MG_GEMM")) in.mg_gemm = mg_gemm;
#ifdef MG_WITH_OPENBLAS
  in.have_openblas = true;
  in.openblas_core = openblas_get_corename();
  // openblas_get_config() is the loaded library's "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...".
  const std::string_view config = openblas_get_config();
  const std::string_view after_name = config.substr(std::min(config.size(), config.find(' ') + 1));
  in.openblas_version = after_name.substr(0, after_name.find(' '));
#endif
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  in.cpu = {.x86 = true,
            .avx = __builtin_cpu_supports("avx") != 0,
            .avx2 = __builtin_cpu_supports("avx2") != 0,
            .avx512f = __builtin_cpu_supports("avx512f") != 0};
#else
  in.cpu = {.x86 = false};
#endif
  in.micro = micro_cpu();
#if defined(EIGEN_VECTORIZE_AVX512)
  in.eigen_width = VectorWidth::Avx512;
#elif defined(EIGEN_VECTORIZE_AVX2)
  in.eigen_width = VectorWidth::Avx2;
#elif defined(EIGEN_VECTORIZE_AVX)
  in.eigen_width = VectorWidth::Avx;
#else
  in.eigen_width = VectorWidth::Sse;
#endif
  in.eigen_version = fmt::format("{}.{}.{}", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION);
  return in;
}

const GemmChoice& gemm_choice() {
  // A function-local static: initialised once, by the first caller, even with several threads; if
  // choose_gemm throws, the next call tries again (and throws the same error).
  static const GemmChoice choice = choose_gemm(gemm_choice_inputs());
  return choice;
}

std::string gemm_backend() {
  const GemmChoice& choice = gemm_choice();
  return fmt::format("{}; microkernels: {}", choice.description, choice.microkernels);
}

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (!line.starts_with("model name")) continue;
    const std::size_t value = line.find_first_not_of(" \t", line.find(':') + 1);
    if (line.find(':') != std::string::npos && value != std::string::npos) return line.substr(value);
  }
  return "unknown (no \"model name\" in /proc/cpuinfo)";
}

}  // namespace mg::kernels::cpu
