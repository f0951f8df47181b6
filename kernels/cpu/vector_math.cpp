// kernels/cpu/vector_math.h: Eigen's vectorised exp/log/tanh/erf on float arrays, with libm for the
// inputs outside their accurate range. Tests: build/tests/test_vector_math.
#include "kernels/cpu/vector_math.h"

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/functors.h"

namespace mg::kernels::cpu::vector_math {

namespace {

constexpr std::int64_t kBlock = 256;
constexpr std::int64_t kPadding = 16;  // floats per AVX-512 register: a block is padded to whole registers

// The block buffers: aligned and a whole number of registers long, so that Eigen runs every element
// through its packet (vector) path. Unaligned or ragged maps would send a few elements at either end
// through its scalar path (libm), and an element's result would then depend on where it sits in
// memory; this way it depends on its input alone.
using Block = Eigen::Map<Eigen::ArrayXf, Eigen::Aligned64>;

// Eigen's exp is accurate to 4.5 ulp on [-87, 88]; beyond, its result overflows before f32 does
// (at ~88.4 instead of ~88.72) and it does not produce subnormals. libm takes those inputs (and NaN).
bool exp_in_range(float x) { return x >= -87.0f && x <= 88.0f; }
// Eigen's log clamps subnormal inputs to the smallest normal; zero, negatives, inf and NaN go to libm too.
bool log_in_range(float x) { return x >= std::numeric_limits<float>::min() && x <= std::numeric_limits<float>::max(); }
bool always(float) { return true; }

// y = f(a[, b]) block by block: the block's inputs are copied into aligned, zero-padded buffers,
// vector(out, in_a, in_b) computes the whole padded block, scalar(a, b) replaces the elements whose a is
// outside in_range, and the block is copied to y last (so y may be an input).
template <class Vector, class InRange, class Scalar>
void blockwise(const float* a, const float* b, float* y, std::int64_t n, Vector vector, InRange in_range, Scalar scalar) {
  alignas(64) float in_a[kBlock], in_b[kBlock], out[kBlock];
  for (std::int64_t start = 0; start < n; start += kBlock) {
    const std::int64_t m = std::min(kBlock, n - start), padded = (m + kPadding - 1) / kPadding * kPadding;
    std::copy(a + start, a + start + m, in_a);
    std::fill(in_a + m, in_a + padded, 0.0f);
    if (b) {
      std::copy(b + start, b + start + m, in_b);
      std::fill(in_b + m, in_b + padded, 0.0f);
    }
    vector(Block(out, padded), Block(in_a, padded), Block(in_b, padded));
    for (std::int64_t i = 0; i < m; ++i)
      if (!in_range(in_a[i])) [[unlikely]] out[i] = scalar(in_a[i], b ? in_b[i] : 0.0f);
    std::copy(out, out + m, y + start);
  }
}

}  // namespace

void exp(const float* x, float* y, std::int64_t n) {
  blockwise(
      x, nullptr, y, n, [](Block out, Block in, Block) { out = in.exp(); }, exp_in_range,
      [](float v, float) { return std::exp(v); });
}

void log(const float* x, float* y, std::int64_t n) {
  blockwise(
      x, nullptr, y, n, [](Block out, Block in, Block) { out = in.log(); }, log_in_range,
      [](float v, float) { return std::log(v); });
}

void tanh(const float* x, float* y, std::int64_t n) {
  // Eigen's tanh saturates to +-1 past |x| = 7.9 and passes NaN: no input needs libm.
  blockwise(
      x, nullptr, y, n, [](Block out, Block in, Block) { out = in.tanh(); }, always, [](float v, float) { return v; });
}

void sigmoid(const float* x, float* y, std::int64_t n) {
  // 1 / (1 + exp(-x)), as functors::Sigmoid, with exp's range on -x: below x = -88.7 libm's exp(-x)
  // is inf and y is 0 (the functor's value there, not the subnormal sigmoid).
  blockwise(
      x, nullptr, y, n, [](Block out, Block in, Block) { out = 1.0f / (1.0f + (-in).exp()); },
      [](float v) { return exp_in_range(-v); }, [](float v, float) { return 1.0f / (1.0f + std::exp(-v)); });
}

void gelu(const float* x, float* y, std::int64_t n) {
  const float inv_sqrt2 = static_cast<float>(functors::kInvSqrt2);
  // Eigen's erf saturates to +-1 past |x| = 4 and passes NaN: no input needs libm.
  blockwise(
      x, nullptr, y, n, [&](Block out, Block in, Block) { out = 0.5f * in * (1.0f + (in * inv_sqrt2).erf()); },
      always, [](float v, float) { return v; });
}

void gelu_grad(const float* g, const float* x, float* y, std::int64_t n) {
  const float inv_sqrt2 = static_cast<float>(functors::kInvSqrt2);
  const float inv_sqrt2pi = static_cast<float>(functors::kInvSqrt2Pi);
  // The density exp(-x^2 / 2) needs exp's range on -x^2/2, so x is the first input here (its
  // fix-up computes the whole scalar formula), g the second.
  blockwise(
      x, g, y, n,
      [&](Block out, Block in_x, Block in_g) {
        out = in_g * (0.5f * (1.0f + (in_x * inv_sqrt2).erf()) + in_x * inv_sqrt2pi * (-0.5f * in_x.square()).exp());
      },
      [](float v) { return exp_in_range(-0.5f * v * v); },
      // |x| > 13.1: the density term is below 2^-120 and Phi(x) is 0 or 1 in f32.
      [](float v, float grad) { return v > 0 ? grad : 0.0f * grad; });
}

}  // namespace mg::kernels::cpu::vector_math
