// exp, log, tanh, sigmoid and the exact GELU over arrays of floats at vector speed: the CPU's fast
// path for the scalar functors of kernels/functors.h, which stay the definition (and what f64 and
// the CUDA kernels compute).
//
// Why: libm's expf/tanhf are scalar calls, 3-10 ns per element; a char-LSTM step spent about a third
// of its time in them. These use Eigen's packet math (AVX-512, AVX2 or SSE, as the build targets),
// 0.2-0.6 ns per element, with libm taking over outside the range where Eigen's versions are exact
// enough (exp beyond [-87, 88], where Eigen's overflows early and flushes subnormal results; log of
// zero, negatives, subnormals, inf and NaN).
//
// Accuracy, against f64 over sweeps of inputs (tests/test_vector_math.cpp): every result within
// kVectorMathUlps units in the last place of the correctly rounded f32 value (measured worst: exp
// 4.5, log 0.9, tanh 4.8, sigmoid 5.3, erf 5.5 ulp; libm's are within 1). So an f16 or bf16 result,
// rounded once from these, is the correctly rounded value or, within a few f32 ulps of a rounding
// boundary, its neighbour.
//
//   x, y, g: arrays of n floats; y may be x (in place). Special values are those of the scalar
//   functors: exp(-inf) = 0, exp(inf) = inf, log(0) = -inf, log(-1) = NaN, NaN stays NaN.
#pragma once

#include <cstdint>

#include "kernels/functors.h"

namespace mg::kernels::cpu::vector_math {

inline constexpr double kVectorMathUlps = 6;

void exp(const float* x, float* y, std::int64_t n);
void log(const float* x, float* y, std::int64_t n);
void tanh(const float* x, float* y, std::int64_t n);
void sigmoid(const float* x, float* y, std::int64_t n);  // 1 / (1 + exp(-x))
void gelu(const float* x, float* y, std::int64_t n);     // x * Phi(x) = x/2 * (1 + erf(x / sqrt 2))
// dx = g * (Phi(x) + x * phi(x)): functors::GeluGrad over arrays (g may be y).
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
