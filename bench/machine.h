// The machine a benchmark ran on, for the first lines of its output: the CPU's model name and what
// multiplies f32 matrices on the CPU, and why (kernels/cpu/blas_choice.h). A CPU timing means little
// without both: the same build runs OpenBLAS's AVX-512 kernels on one machine and Eigen on another.
#pragma once

#include <fmt/format.h>

#include <fstream>
#include <string>

#include "kernels/gemm.h"

namespace bench {

// The "model name" of the first processor in /proc/cpuinfo ("Intel(R) Xeon(R) Processor @ 2.80GHz").
inline std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (!line.starts_with("model name")) continue;
    const std::size_t value = line.find_first_not_of(" \t", line.find(':') + 1);
    if (line.find(':') != std::string::npos && value != std::string::npos) return line.substr(value);
  }
  return "unknown (no \"model name\" in /proc/cpuinfo)";
}

// Two lines, "cpu: <model>" and "CPU GEMM: <library, kernels and why>". Makes the GEMM choice if no
// GEMM has yet, so a bad MG_GEMM throws mg::Error here, before anything is timed.
inline std::string machine_lines() {
  return fmt::format("cpu: {}\nCPU GEMM: {}", cpu_model(), mg::kernels::cpu::gemm_backend());
}

}  // namespace bench
