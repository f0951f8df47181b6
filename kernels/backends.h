// One declaration a kernel. The kernel layer has one entry point per kernel and two backends that
// implement it with one signature:
//
//   mg::kernels::f        the entry point (kernels/dispatch.cpp): checks the arguments, then calls
//   mg::kernels::cpu::f   the CPU backend (kernels/cpu/), or
//   mg::kernels::cuda::f  the CUDA backend (kernels/cuda/, in builds with MG_WITH_CUDA),
//
// whichever owns the output's device (MG_ROUTE, kernels/route.h). A family's header writes each
// signature once: MG_KERNELS(declarations) declares them in all three namespaces, MG_BACKENDS(...)
// in the two backends only (where the entry point takes other arguments: fp8_quantize returns its
// codes, cpu::fp8_quantize writes them). What one backend alone has (the CPU's BLAS choice, a GPU's
// GEMM rung) is declared in its own namespace.
#pragma once

#define MG_BACKENDS(...) \
  namespace cpu { \
  __VA_ARGS__ \
  } \
  namespace cuda { \
  __VA_ARGS__ \
  }

#define MG_KERNELS(...) __VA_ARGS__ MG_BACKENDS(__VA_ARGS__)
