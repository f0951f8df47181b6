// The machine a benchmark ran on, for the first lines of its output: the CPU's model name and what
// multiplies f32 matrices on the CPU, and why (kernels/cpu/blas_choice.h). A CPU timing means little
// without both: the same build runs OpenBLAS's AVX-512 kernels on one machine and Eigen on another.
#pragma once

#include <fmt/format.h>

#include <string>

#include "kernels/gemm.h"

namespace bench {

// Two lines, "cpu: <model>" and "CPU GEMM: <library, kernels and why>". Makes the GEMM choice if no
// GEMM has yet, so a bad MG_GEMM throws mg::Error here, before anything is timed.
inline std::string machine_lines() {
  return fmt::format("cpu: {}\nCPU GEMM: {}", mg::kernels::cpu::cpu_model(), mg::kernels::cpu::gemm_backend());
}

}  // namespace bench
