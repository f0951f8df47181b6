// What multiplies matrices on the CPU, decided once per process: which library multiplies f64
// matrices (and f32 ones on a CPU without AVX-512), OpenBLAS or Eigen (the rule below), and which of
// mixgrad's own microkernels multiplies f16, bf16 and f32 ones (kernels/cpu/microkernel.h; the rule
// at the end).
//
// Why a decision at all: OpenBLAS's DYNAMIC_ARCH build picks its kernels from the CPU's family and
// model numbers when the library loads. On a CPU it does not know (seen: a VM whose CPU calls itself
// "Intel(R) Xeon(R) Processor", with AVX-512) it falls back to its generic Prescott kernels (SSE3),
// and the MLP's training step takes about 4x as long as with Eigen's GEMM built with -march=native,
// the CNN's 2x (docs/results/cpu-bench.md). OpenBLAS reads OPENBLAS_CORETYPE in a library
// constructor, before main, so mixgrad cannot correct that choice; it can only decline to use it.
//
// The rule (choose_gemm, a pure function of its inputs, so a test can hand it any core and any CPU):
//   1. MG_GEMM=eigen or MG_GEMM=openblas forces that library. Any other non-empty value is an
//      mg::Error, and so is MG_GEMM=openblas in a build without OpenBLAS.
//   2. A build without OpenBLAS (MG_BLAS=OFF, or libopenblas-dev missing) runs Eigen.
//   3. Off x86 OpenBLAS's own detection is trusted (this table knows only its x86 cores).
//   4. On x86, OpenBLAS runs when the vector width of the kernels it picked (openblas_kernel_width:
//      SkylakeX = AVX-512, Haswell = AVX2, Sandybridge = AVX, Prescott = generic SSE, ...) is AVX or
//      wider and at least as wide as Eigen's, the narrower of what Eigen was compiled for and what
//      the CPU has. Otherwise Eigen runs:
//        - generic SSE kernels never run by themselves;
//        - narrower kernels than Eigen's do not run either (Haswell's AVX2 on an AVX-512 CPU, with
//          Eigen built for AVX-512);
//        - a core name missing from the table leaves its width unknown, so Eigen runs, whose
//          width is known when it is compiled.
//      Measured on an AVX-512 Xeon, MLP training step (docs/results/cpu-bench.md): Eigen's AVX-512
//      GEMM and OpenBLAS's SkylakeX kernels are within about 10% of each other; OpenBLAS's AVX2
//      Haswell kernels are 7-11% slower than Eigen's AVX-512 GEMM; its Prescott kernels about 4x
//      slower. So a wrong "Eigen" costs little and a wrong "OpenBLAS" costs a lot.
//
// Why a table and not a timing probe (time both GEMMs once, keep the faster): the table gives the
// same answer on every run on one machine. Eigen and OpenBLAS add in different orders, so a probe
// that flipped between runs on a busy 2-core machine would change results in their last bits from
// one run to the next (a resumed run would no longer match an uninterrupted one). The table is also
// testable without a clock and costs nothing at start-up. Its weakness is a core name it does not
// know (a newer OpenBLAS): in a -march=native build that costs about the equal-width difference
// above, and gemm_backend() says what happened.
//
// The microkernels, rule choose_gemm also applies:
//   bf16: avx512-bf16-dot where the CPU has AVX512_BF16 and its vdpbf16ps outruns the FMA (AMD's;
//         MicroCpu::bf16_dot_pays), else avx512-fma, else "widen";
//   f16:  avx512-fma, else "widen";
//   f32:  avx512-fma, else the library above; the library also where MG_GEMM names one (eigen,
//         openblas) and no kernel for f32. The FMA kernel ran at 1.2-1.4x Eigen's AVX-512 GEMM on a
//         Zen 5 and 1.07-1.3x OpenBLAS's AVX-512 kernels on a Zen 4 (docs/cpu-gemm.md).
// (avx2-fma runs only when MG_GEMM names it: on an AVX2 CPU it was slower than widening for
// OpenBLAS's AVX2 kernels, blas_choice.cpp.)
// "widen" is the path without a microkernel: both operands widened to f32 in a pass of their own and
// multiplied by the library. MG_GEMM takes, besides a library, comma-separated, a kernel that replaces
// the choice for every dtype it can multiply (a later one wins for the dtypes both can):
//   avx512-bf16-dot (bf16), avx512-fma and avx2-fma (f32, f16, bf16), model (the instruction models
//   of microkernel.h, scalar code that runs anywhere: model-bf16-dot for bf16, model-fma for f32 and
//   f16), widen (f16, bf16).
// e.g. MG_GEMM=openblas,model. A kernel this CPU cannot run is an mg::Error naming those it can.
//
// Tests: build/tests/test_gemm_choice. Benchmarks print the choice in their header (bench/machine.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/cpu/microkernel.h"
#include "kernels/gemm.h"  // GemmLibrary

namespace mg::kernels::cpu {

// The x86 vector instruction set a GEMM kernel is written for, narrowest first.
enum class VectorWidth : std::uint8_t { Sse, Avx, Avx2, Avx512 };
std::string_view vector_width_name(VectorWidth width);  // "SSE", "AVX", "AVX2", "AVX-512"

// What the CPU running this process supports (__builtin_cpu_supports on x86).
struct CpuFeatures {
  bool x86 = true;  // false: not an x86 CPU, the other fields mean nothing
  bool avx = false;
  bool avx2 = false;
  bool avx512f = false;
};

// Everything the choice depends on (gemm_choice_inputs() reads this process's).
struct GemmChoiceInputs {
  std::optional<std::string> mg_gemm;  // the MG_GEMM environment variable; nullopt when unset
  bool have_openblas = false;  // this build links OpenBLAS
  std::string openblas_core;  // openblas_get_corename(): "SkylakeX", "Haswell", "Prescott", ...
  std::string openblas_version;  // "0.3.21"
  CpuFeatures cpu;
  MicroCpu micro;  // the instructions of the microkernels (micro_cpu())
  VectorWidth eigen_width = VectorWidth::Sse;  // what Eigen was compiled for (EIGEN_VECTORIZE_*)
  std::string eigen_version;  // "3.4.0"
};

struct GemmChoice {
  GemmLibrary library = GemmLibrary::Eigen;
  // What runs and why, in one line: "OpenBLAS 0.3.21 SkylakeX (AVX-512 kernels, one thread)", or
  // "Eigen 3.4.0 AVX-512 (OpenBLAS 0.3.21 would run its generic Prescott kernels on this AVX-512
  // CPU; MG_GEMM=openblas forces it)".
  std::string description;
  // The microkernel of each dtype, or nullopt for "widen" (f16, bf16) and the library (f32).
  std::optional<MicroKernelId> f32, f16, bf16;
  std::string microkernels;  // "f16 avx512-fma, bf16 avx512-bf16-dot"
};

// The vector width of an x86 OpenBLAS core's GEMM kernels (names as openblas_get_corename() gives
// them, any case), or nullopt for a name the table does not know.
std::optional<VectorWidth> openblas_kernel_width(std::string_view core);

// The rule above. Requires nothing else of the inputs; throws mg::Error for a bad MG_GEMM.
GemmChoice choose_gemm(const GemmChoiceInputs& inputs);

// This process's inputs: MG_GEMM, the loaded OpenBLAS's core and version, the CPU's features, and
// what Eigen was compiled for.
GemmChoiceInputs gemm_choice_inputs();

// The choice for this process, choose_gemm(gemm_choice_inputs()): made at the first call (the first
// f32/f64 GEMM, or gemm_backend()), then kept. Thread-safe. A bad MG_GEMM throws mg::Error on every
// call, so every GEMM fails with the same message.
const GemmChoice& gemm_choice();

}  // namespace mg::kernels::cpu
