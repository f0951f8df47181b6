// exp, log, tanh, sigmoid and the exact GELU over arrays of floats at vector speed: the CPU's fast
// path for the scalar functors of kernels/pointwise.h, which stay the definition (and what f64 and
// the CUDA kernels compute).
//
// Why: libm's expf/tanhf/erff are scalar calls, 3-10 ns per element; a char-LSTM step spent about a
// third of its time in them. These run on packets (AVX-512, AVX2 or SSE, as the build targets), at
// 0.4-1.4 ns per element:
//   exp, log, sigmoid  Eigen's packet math, with libm taking over outside the range where Eigen's
//                      versions are exact enough (exp beyond [-87, 88], where Eigen's overflows early
//                      and flushes subnormal results; log of zero, negatives, subnormals, inf and NaN).
//   tanh, gelu,        packet code of vector_math.cpp (Eigen's tanh and erf are within 5-6 ulps, and
//   gelu_grad          GELU's 1 + erf(x / sqrt 2) cancels for x < -1): a polynomial near 0 and
//                      1 - 2 / (exp(2|x|) + 1) beyond for tanh; for GELU, Phi(x) from a polynomial near
//                      0 and from exp(-x^2 / 2) R(|x|), R rational, in both tails, exp(-x^2 / 2) without
//                      rounding x^2. No element needs libm.
//
// Accuracy, element by element, against f64 over sweeps of inputs (tests/test_vector_math.cpp): every
// result within the bound below in units in the last place of its own correctly rounded f32 value.
//   exp, log, sigmoid  kVectorMathUlps (measured worst: exp 4.5, log 0.9, sigmoid 5.3)
//   tanh               kTanhUlps       (measured worst: 0.88; PyTorch's, Sleef's, is within 1)
//   gelu               kGeluUlps       (measured worst: 3.7, its left tail included, down to
//                                       the subnormal results near x = -14)
//   gelu_grad          kGeluUlps of the larger of its terms Phi(x) and x phi(x) (3.7)
// (measured with AVX-512, and the same with AVX2; with SSE2 alone, no fused multiply-adds, as in a
// build without MG_NATIVE: tanh 1.03, gelu 3.84).
// So an f16 or bf16 result, rounded once from these, is the correctly rounded value or, within a few
// f32 ulps of a rounding boundary, its neighbour. Per element on ordinary inputs (normal samples),
// against PyTorch 1.13 (tests/parity, the "per element" rows): tanh and its gradient within twice
// PyTorch's error, GELU and its gradient far within it (PyTorch's erf has an absolute error of 1e-7,
// which its left tail and the gradient's zero at x = -0.75 turn into hundreds of ulps).
//
// Special values, the rule (tests/test_ops_activation.cpp checks it on every backend): a NaN input
// gives a NaN output and a NaN gradient, always. At +-inf every function gives PyTorch 1.13's value,
// never a finite value where PyTorch has NaN: exp(-inf) = 0, exp(inf) = inf, log(0) = -inf,
// log(-1) = NaN, tanh(+-inf) = +-1, sigmoid(+-inf) = 1 or 0, gelu(inf) = inf, and gelu(-inf) and
// GELU's gradient at +-inf are NaN (-inf * Phi(-inf) and x phi(x) are inf * 0 there, which is NaN).
// A NaN that disappeared in backward would hide an overflow from the GradScaler.
//
//   x, y, g: arrays of n floats; y may be x (in place).
#pragma once

#include <cstdint>

#include "kernels/pointwise.h"

namespace mg::kernels::cpu::vector_math {

inline constexpr double kVectorMathUlps = 6;
inline constexpr double kTanhUlps = 1.5;
inline constexpr double kGeluUlps = 4.5;

void exp(const float* x, float* y, std::int64_t n);
void log(const float* x, float* y, std::int64_t n);
void tanh(const float* x, float* y, std::int64_t n);
void sigmoid(const float* x, float* y, std::int64_t n);  // 1 / (1 + exp(-x))
void gelu(const float* x, float* y, std::int64_t n);  // x * Phi(x) = x/2 * erfc(-x / sqrt 2)
// dx = g * (Phi(x) + x * phi(x)): functors::Gelu::grad over arrays (g may be y).
void gelu_grad(const float* g, const float* x, float* y, std::int64_t n);

// The f64 forms (f64 is for checks, not speed): the scalar functors over the array, so a kernel
// templated on its compute type calls vector_math::exp(x, y, n) for either.
inline void exp(const double* x, double* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = functors::Exp{}(x[i]);
}
inline void tanh(const double* x, double* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = functors::Tanh{}(x[i]);
}
inline void sigmoid(const double* x, double* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = functors::Sigmoid{}(x[i]);
}

}  // namespace mg::kernels::cpu::vector_math
