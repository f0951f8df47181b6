// kernels/cpu/vector_math.h: exp, log and sigmoid from Eigen's packet math, with libm for the inputs
// outside their accurate range; tanh and GELU (forward and gradient) from this file's own packet
// code, below. Tests: build/tests/test_vector_math; special values: build/tests/test_ops_activation.
#include "kernels/cpu/vector_math.h"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "kernels/pointwise.h"

// GCC 12.1-12.2 reports "'__Y' is used uninitialized" inside its own AVX-512 intrinsics (pmin, pfloor,
// pcast, the shift) where the packet code below inlines them: GCC bug 105593, by design there (fixed
// in 12.3); the project's CMakeLists.txt silences the "may be" form of the same report.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12 && __GNUC_MINOR__ < 3
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace mg::kernels::cpu::vector_math {

namespace {

namespace ei = Eigen::internal;
using Packet = ei::packet_traits<float>::type;  // 16 floats with AVX-512, 8 with AVX2, 4 with SSE
// A packet type as a template argument loses its vector attributes, harmlessly (the same warning
// Eigen's own headers silence).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
using PacketI = ei::unpacket_traits<Packet>::integer_packet;  // as many int32s
constexpr std::int64_t kLanes = ei::unpacket_traits<Packet>::size;
#pragma GCC diagnostic pop

constexpr std::int64_t kBlock = 256;
constexpr std::int64_t kPadding = 16;  // floats per AVX-512 register: a block is padded to whole registers
static_assert(kPadding % kLanes == 0);

// The block buffers: aligned and a whole number of registers long, so that every element runs through
// the packet (vector) path. Unaligned or ragged maps would send a few elements at either end through
// Eigen's scalar path (libm), and an element's result would then depend on where it sits in memory;
// this way it depends on its input alone.
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
void blockwise(const float* a, const float* b, float* y, std::int64_t n, Vector vector, InRange in_range,
               Scalar scalar) {
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
      if (!in_range(in_a[i])) [[unlikely]]
        out[i] = scalar(in_a[i], b ? in_b[i] : 0.0f);
    std::copy(out, out + m, y + start);
  }
}

// y = f(a) or f(a, b) over a whole block with a packet function of this file: no element needs libm.
template <class PacketFn>
void packets(const float* a, const float* b, float* y, std::int64_t n, PacketFn f) {
  blockwise(
      a, b, y, n,
      [&](Block out, Block in_a, Block in_b) {
        for (std::int64_t i = 0; i < out.size(); i += kLanes)
          ei::pstore(out.data() + i, f(ei::pload<Packet>(in_a.data() + i), ei::pload<Packet>(in_b.data() + i)));
      },
      always, [](float v, float) { return v; });
}

// ---- The packet code of tanh and GELU.
//
// Eigen's packet tanh and erf are rational approximations within 5-6 f32 ulps, and GELU's
// 1 + erf(x / sqrt 2) cancels for x < -1, leaving a result that is accurate only relative to |x|.
// The functions below are within 1 (tanh) to 4 (GELU's tails) ulps of every element's own value (the
// bounds in vector_math.h), at about twice the cost of Eigen's (tanh 0.64 against 0.38 ns per element,
// GELU 1.2 against 0.46, its gradient 1.2 against 0.90, with AVX-512 on an AMD EPYC): both branches
// of each are computed for every lane. Their polynomials were fitted for this file (weighted least
// squares iterated to minimax, Lawson's method, against mpmath), each to well below an f32 ulp of
// relative error over its interval; the rounding of the f32 evaluation is what is left.

Packet splat(float value) { return ei::pset1<Packet>(value); }

// c[0] + x (c[1] + x (c[2] + ...)): Horner's rule, with fused multiply-adds where the CPU has them.
template <std::size_t N>
Packet polynomial(Packet x, const float (&c)[N]) {
  Packet y = splat(c[N - 1]);
  for (std::size_t k = N - 1; k-- > 0;) y = ei::pmadd(y, x, splat(c[k]));
  return y;
}

// 2^64 exp(a + b), where b is a correction much smaller than a (|b| < 2^-9 |a|): the rounding of a + b
// would cost |a + b| 2^-24 of relative error (8 ulps at a = -64); added after the reduction below, b
// costs nothing. With m the integer nearest (a + b) / ln 2, a - m ln 2 is computed exactly, r is the
// rest, and exp(r) for |r| <= ln 2 / 2 is 1 + r P(r), P of degree 5 (relative error 2e-9).
// The result is scaled by 2^64 so that it stays a normal float for a + b down to -130, where exp is
// far below the normals: a caller multiplies by 2^-64 last, rounding once, to a subnormal where the
// result is one. 2^(m + 64) is made from its bits: a + b must be within [-130, 43].
Packet exp_of_sum_times_2_64(Packet a, Packet b) {
  static constexpr float kExpP[] = {1.0f,
                                    0.4999999403953552f,
                                    0.16666430234909058f,
                                    0.04166800528764725f,
                                    0.008374184370040894f,
                                    0.0013843619963154197f};
  const Packet m = ei::pfloor(ei::pmadd(ei::padd(a, b), splat(1.44269504088896341f), splat(0.5f)));
  // ln 2 = 0.693359375 - 2.12194440e-4: the first part has 9 significant bits, so m times it is exact,
  // and so is its difference with a (both are multiples of a's ulp, and the difference is below 0.5).
  Packet r = ei::pmadd(m, splat(-0.693359375f), a);
  r = ei::pmadd(m, splat(2.12194440e-4f), r);
  r = ei::padd(r, b);
  const PacketI biased = ei::padd(ei::pcast<Packet, PacketI>(m), ei::pset1<PacketI>(127 + 64));
  const Packet power = ei::preinterpret<Packet>(ei::plogical_shift_left<23>(biased));  // 2^(m + 64)
  return ei::pmul(ei::pmadd(r, polynomial(r, kExpP), splat(1.0f)), power);
}

const float kTwoToMinus64 = 0x1p-64f;

// tanh(x), within 1 ulp:
//   |x| < 1   x + x^3 P(x^2), P of degree 6 (relative error 5e-9): no cancellation near 0;
//   |x| >= 1  1 - 2 / (exp(2|x|) + 1), with the sign of x: 2 / (e + 1) < 0.24, so the subtraction adds
//             at most a third of exp's relative error; past |x| = 9.01 the result rounds to 1.
// NaN stays NaN; +-inf give +-1; -0 stays -0, and subnormals stay themselves.
Packet tanh_packet(Packet x) {
  static constexpr float kTanhP[] = {-0.33333295583724976f,   0.13332344591617584f,   -0.05387980118393898f,
                                     0.021486656740307808f,   -0.007946104742586613f, 0.002301363507285714f,
                                     -0.00035845168167725205f};
  const Packet a = ei::pabs(x), x2 = ei::pmul(x, x);
  const Packet small = ei::pmadd(ei::pmul(x, x2), polynomial(x2, kTanhP), x);
  const Packet doubled = ei::pmul(splat(2.0f), ei::pmin(a, splat(9.5f)));
  const Packet e = ei::pmul(exp_of_sum_times_2_64(doubled, ei::pzero(x)), splat(kTwoToMinus64));  // exact
  const Packet large = ei::psub(splat(1.0f), ei::pdiv(splat(2.0f), ei::padd(e, splat(1.0f))));
  // tanh has the sign of x: that of `large` is set here, and so is -0's (the sum in `small` is +0).
  const Packet y = ei::por(ei::pselect(ei::pcmp_lt(a, splat(1.0f)), small, large), ei::pand(x, splat(-0.0f)));
  return ei::pselect(ei::pcmp_eq(x, x), y, x);  // NaN: every comparison above was false
}

// The parts of the normal CDF Phi(x) and the Gaussian exp(-x^2 / 2) that GELU and its gradient use,
// each within about 1 ulp of its own value whatever the sign of x:
//   |x| < 0.675   Phi = 0.5 + x S(x^2), S of degree 4 (relative error 4e-10; Phi >= 0.25, so the sum
//                 loses at most a quarter ulp);
//   |x| >= 0.675  the upper tail Q(t) = 1 - Phi(t), t = |x|, is exp(-t^2 / 2) R(t) with
//                 R(t) = 1 / (sqrt(2 pi) (t + G(t))), G a rational function of degree 4 / 5 (relative
//                 error 2e-9 on [0.675, 15]; G is below half of t + G, which halves its rounding errors,
//                 and tends to 1 / t: R is Mills' ratio over sqrt(2 pi)). Phi is Q(t) for x < 0, with no
//                 cancellation (1 + erf(x / sqrt 2) cancels there), and 1 - Q(t) for x > 0.
// exp(-t^2 / 2) is computed without rounding t^2: t = h + l with h holding t's first 12 bits, so h^2 is
// exact and t^2 / 2 = h^2 / 2 + l (t + h) / 2, the second part the correction of exp_of_sum_times_2_64.
// It is kept scaled by 2^64, so that the products with it round once, to a subnormal where the result
// is one (x Q(x) is below the normals past x = -13). Past |x| = 15, where exp(-x^2 / 2) is far below
// f32's subnormals, it is 0: so x exp(-x^2 / 2) is inf * 0 = NaN at x = +-inf.
struct Gaussian {
  Packet center;  // |x| < 0.675
  Packet center_cdf;  // Phi(x) there
  Packet scaled_density;  // exp(-x^2 / 2) 2^64
  Packet tail_ratio;  // R(|x|) = Q(|x|) / exp(-x^2 / 2)
  Packet center_gelu;  // x Phi(x) there, as x / 2 + x^2 S(x^2): x / 2 is exact
};
Gaussian gaussian(Packet x) {
  static constexpr float kCenterS[] = {0.3989422917366028f, -0.0664902850985527f, 0.009972461499273777f,
                                       -0.0011820245999842882f, 0.00010396163270343095f};
  static constexpr float kTailP[] = {0.7978900956717683f, 0.5679944095612983f, 0.20423685308554776f,
                                     0.04073716736860749f, 0.004009309585346261f};
  static constexpr float kTailQ[] = {1.0f,
                                     1.1673480994760401f,
                                     0.6508798775513228f,
                                     0.21216886048470662f,
                                     0.04074026030444642f,
                                     0.004009261237278344f};
  const Packet magnitude = ei::pabs(x), t = ei::pmin(magnitude, splat(15.0f));
  const Packet high = ei::pand(t, ei::pset1frombits<Packet>(0xfffff000u));  // t's first 12 bits
  const Packet low = ei::psub(t, high);
  const Packet density = exp_of_sum_times_2_64(ei::pmul(splat(-0.5f), ei::pmul(high, high)),
                                               ei::pmul(splat(-0.5f), ei::pmul(low, ei::padd(t, high))));
  const Packet x_s = ei::pmul(x, polynomial(ei::pmul(x, x), kCenterS));
  return {ei::pcmp_lt(t, splat(0.675f)), ei::padd(x_s, splat(0.5f)),
          ei::pselect(ei::pcmp_le(magnitude, splat(15.0f)), density, ei::pzero(x)),
          ei::pdiv(splat(static_cast<float>(functors::kInvSqrt2Pi)),
                   ei::padd(t, ei::pdiv(polynomial(t, kTailP), polynomial(t, kTailQ)))),
          // x^2 S has the sign of x^2, x / 2 that of x and the larger magnitude: the sign bit of x
          // only keeps gelu(-0) (and of negative subnormals) -0, which the sum of -0 and +0 is not.
          ei::por(ei::pmadd(x, x_s, ei::pmul(x, splat(0.5f))), ei::pand(x, splat(-0.0f)))};
}

// x Phi(x): x / 2 + x^2 S(x^2) in the center, x Q(|x|) below it, x (1 - Q(x)) above. NaN stays NaN (x is a
// factor); gelu(inf) = inf, and gelu(-inf) = -inf * 0 = NaN, as PyTorch's x / 2 (1 + erf(x / sqrt 2)).
Packet gelu_packet(Packet x) {
  const Gaussian n = gaussian(x);
  const Packet scaled_tail = ei::pmul(n.tail_ratio, n.scaled_density);  // Q(|x|) 2^64
  const Packet lower = ei::pmul(ei::pmul(ei::pmul(x, n.tail_ratio), n.scaled_density), splat(kTwoToMinus64));
  const Packet upper = ei::pmul(x, ei::psub(splat(1.0f), ei::pmul(scaled_tail, splat(kTwoToMinus64))));
  const Packet tail = ei::pselect(ei::pcmp_lt(x, ei::pzero(x)), lower, upper);
  return ei::pselect(n.center, n.center_gelu, tail);
}

// g (Phi(x) + x phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi): in the tails exp(-x^2 / 2) (R(|x|) + x / sqrt(2 pi))
// below 0, and 1 + exp(-x^2 / 2) (x / sqrt(2 pi) - R(x)) above. At x = +-inf x phi(x) is inf * 0, NaN, and so
// is the gradient, as PyTorch's (the rule of vector_math.h); NaN stays NaN.
Packet gelu_grad_packet(Packet x, Packet g) {
  const Gaussian n = gaussian(x);
  const Packet x_over_sqrt_2pi = ei::pmul(x, splat(static_cast<float>(functors::kInvSqrt2Pi)));
  const Packet negative = ei::pcmp_lt(x, ei::pzero(x));
  const Packet signed_ratio = ei::pselect(negative, n.tail_ratio, ei::pnegate(n.tail_ratio));
  const Packet tail = ei::padd(ei::pselect(negative, ei::pzero(x), splat(1.0f)),
                               ei::pmul(ei::pmul(n.scaled_density, ei::padd(signed_ratio, x_over_sqrt_2pi)),
                                        splat(kTwoToMinus64)));
  const Packet center = ei::padd(n.center_cdf,
                                 ei::pmul(ei::pmul(x_over_sqrt_2pi, n.scaled_density), splat(kTwoToMinus64)));
  return ei::pmul(g, ei::pselect(n.center, center, tail));
}

}  // namespace

void exp(const float* x, float* y, std::int64_t n) {
  // Below -104 libm's expf is 0 (exp(-103.98) is half the smallest subnormal): answered here, not by a
  // call per element. A masked softmax's rows are half -inf (the causal mask), and each was a call.
  blockwise(
      x, nullptr, y, n, [](Block out, Block in, Block) { out = in.exp(); }, exp_in_range,
      [](float v, float) { return v < -104.0f ? 0.0f : std::exp(v); });
}

void log(const float* x, float* y, std::int64_t n) {
  blockwise(
      x, nullptr, y, n, [](Block out, Block in, Block) { out = in.log(); }, log_in_range,
      [](float v, float) { return std::log(v); });
}

void tanh(const float* x, float* y, std::int64_t n) {
  packets(x, nullptr, y, n, [](Packet v, Packet) { return tanh_packet(v); });
}

void sigmoid(const float* x, float* y, std::int64_t n) {
  // 1 / (1 + exp(-x)), as functors::Sigmoid, with exp's range on -x: below x = -88.7 libm's exp(-x)
  // is inf and y is 0 (the functor's value there, not the subnormal sigmoid).
  blockwise(
      x, nullptr, y, n, [](Block out, Block in, Block) { out = 1.0f / (1.0f + (-in).exp()); },
      [](float v) { return exp_in_range(-v); }, [](float v, float) { return 1.0f / (1.0f + std::exp(-v)); });
}

void gelu(const float* x, float* y, std::int64_t n) {
  packets(x, nullptr, y, n, [](Packet v, Packet) { return gelu_packet(v); });
}

void gelu_grad(const float* g, const float* x, float* y, std::int64_t n) {
  packets(x, g, y, n, [](Packet v, Packet grad) { return gelu_grad_packet(v, grad); });
}

}  // namespace mg::kernels::cpu::vector_math
