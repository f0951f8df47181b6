// The math of every elementwise op, written once.
//
// Each functor is a scalar function of the compute type C (float for f32/f16/bf16, double for
// f64). The CPU loop (kernels/cpu/elementwise.cpp) calls them over chunks of converted values; the
// CUDA kernels call the same functors per thread, which is why they are MG_HOST_DEVICE. Values are
// computed in C and rounded to the storage dtype only on store.
//
// The *Grad functors are the backward formulas, fused so that an f16 gradient is rounded once
// instead of once per intermediate: g is the incoming gradient, x the saved input, y the saved output.
#pragma once

#include <cmath>

#include "core/host_device.h"

namespace mg::functors {

inline constexpr double kInvSqrt2 = 0.70710678118654752440;   // 1/sqrt(2)
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2 pi)

// ---- unary: y = f(x), with up to two scalar parameters a, b
struct Copy { template <class C> MG_HOST_DEVICE C operator()(C x) const { return x; } };
struct Neg { template <class C> MG_HOST_DEVICE C operator()(C x) const { return -x; } };
struct Exp { template <class C> MG_HOST_DEVICE C operator()(C x) const { return std::exp(x); } };
struct Log { template <class C> MG_HOST_DEVICE C operator()(C x) const { return std::log(x); } };
struct Sqrt { template <class C> MG_HOST_DEVICE C operator()(C x) const { return std::sqrt(x); } };
struct Abs { template <class C> MG_HOST_DEVICE C operator()(C x) const { return std::fabs(x); } };
struct Tanh { template <class C> MG_HOST_DEVICE C operator()(C x) const { return std::tanh(x); } };
struct Sigmoid {
  template <class C> MG_HOST_DEVICE C operator()(C x) const { return C(1) / (C(1) + std::exp(-x)); }
};
struct Relu {  // NaN passes through (it is not < 0), as in PyTorch: a NaN is never hidden
  template <class C> MG_HOST_DEVICE C operator()(C x) const { return x < C(0) ? C(0) : x; }
};
// The exact GELU, x * Phi(x) with the normal CDF Phi (PyTorch's default, approximate="none").
// Phi(x) = erfc(-x / sqrt 2) / 2, not (1 + erf(x / sqrt 2)) / 2, which cancels for x < -1 and leaves the
// left tail accurate only relative to |x|. gelu(-inf) = -inf * 0 is NaN, as in PyTorch.
struct Gelu {
  template <class C> MG_HOST_DEVICE C operator()(C x) const {
    return C(0.5) * x * std::erfc(-x * C(kInvSqrt2));
  }
};
struct AddScalar {
  double a;
  template <class C> MG_HOST_DEVICE C operator()(C x) const { return x + C(a); }
};
struct MulScalar {
  double a;
  template <class C> MG_HOST_DEVICE C operator()(C x) const { return x * C(a); }
};
struct PowScalar {
  double a;
  template <class C> MG_HOST_DEVICE C operator()(C x) const { return std::pow(x, C(a)); }
};
struct DivScalar {
  double a;
  template <class C> MG_HOST_DEVICE C operator()(C x) const { return x / C(a); }
};
// a / x: the scalar-divided-by-tensor case (a - x is AddScalar after Neg).
struct RDivScalar {
  double a;
  template <class C> MG_HOST_DEVICE C operator()(C x) const { return C(a) / x; }
};
// x * sigmoid(x) (SiLU, "swish"), in one expression so that f16 is rounded once.
struct Silu {
  template <class C> MG_HOST_DEVICE C operator()(C x) const { return x / (C(1) + std::exp(-x)); }
};
// x for x > 0, a * x otherwise (a: the negative slope); NaN stays NaN.
struct LeakyRelu {
  double a;
  template <class C> MG_HOST_DEVICE C operator()(C x) const { return x > C(0) ? x : x * C(a); }
};
// min(max(x, a), b); NaN stays NaN.
struct Clamp {
  double a, b;
  template <class C> MG_HOST_DEVICE C operator()(C x) const { return x < C(a) ? C(a) : (x > C(b) ? C(b) : x); }
};

// ---- binary: z = f(a, b) after broadcasting
struct Add { template <class C> MG_HOST_DEVICE C operator()(C a, C b) const { return a + b; } };
struct Sub { template <class C> MG_HOST_DEVICE C operator()(C a, C b) const { return a - b; } };
struct Mul { template <class C> MG_HOST_DEVICE C operator()(C a, C b) const { return a * b; } };
struct Div { template <class C> MG_HOST_DEVICE C operator()(C a, C b) const { return a / b; } };
struct Pow { template <class C> MG_HOST_DEVICE C operator()(C a, C b) const { return std::pow(a, b); } };
// The larger (smaller) of a and b; NaN if either is NaN; a on ties, so maximum(-0, +0) is -0 (as PyTorch).
struct Maximum {
  template <class C> MG_HOST_DEVICE C operator()(C a, C b) const { return (a < b || b != b) ? b : a; }
};
struct Minimum {
  template <class C> MG_HOST_DEVICE C operator()(C a, C b) const { return (a > b || b != b) ? b : a; }
};

// ---- backward formulas: dx = f(g, saved)
struct ReluGrad {  // saved x: the gradient passes where x > 0 or x is NaN (0 at the kink, as PyTorch)
  template <class C> MG_HOST_DEVICE C operator()(C g, C x) const { return x <= C(0) ? C(0) : g; }
};
struct AbsGrad {  // saved x: g * sign(x), with sign(0) = 0
  template <class C> MG_HOST_DEVICE C operator()(C g, C x) const {
    return x > C(0) ? g : (x < C(0) ? -g : C(0));
  }
};
// saved y = tanh(x): g * (1 - y^2), as (1 - y)(1 + y). Near |y| = 1, where 1 - y^2 is small, 1 - y is
// exact and the product rounds twice: within about 1 ulp of 1 - y^2 for the given y whether or not
// the compiler fuses y * y into the subtraction (it does at -O2, not at -O1; unfused, 1 - y * y
// loses the low bits of y^2 and doubled the error of the worst element).
struct TanhGrad {
  template <class C> MG_HOST_DEVICE C operator()(C g, C y) const { return g * ((C(1) - y) * (C(1) + y)); }
};
struct SigmoidGrad {  // saved y = sigmoid(x): g * y * (1 - y)
  template <class C> MG_HOST_DEVICE C operator()(C g, C y) const { return g * y * (C(1) - y); }
};
struct SqrtGrad {  // saved y = sqrt(x): g / (2 y)
  template <class C> MG_HOST_DEVICE C operator()(C g, C y) const { return g / (C(2) * y); }
};
// saved x: g * (Phi(x) + x * phi(x)), Phi as in Gelu. NaN at x = NaN, and at x = +-inf, where x phi(x)
// is inf * 0: PyTorch's value there, and never a finite one (kernels/cpu/vector_math.h, the rule).
struct GeluGrad {
  template <class C> MG_HOST_DEVICE C operator()(C g, C x) const {
    C cdf = C(0.5) * std::erfc(-x * C(kInvSqrt2));
    C pdf = C(kInvSqrt2Pi) * std::exp(C(-0.5) * x * x);
    return g * (cdf + x * pdf);
  }
};
struct SiluGrad {  // saved x: g * s * (1 + x * (1 - s)) with s = sigmoid(x)
  template <class C> MG_HOST_DEVICE C operator()(C g, C x) const {
    C s = C(1) / (C(1) + std::exp(-x));
    return g * s * (C(1) + x * (C(1) - s));
  }
};
struct LeakyReluGrad {  // saved x: g where x > 0, a * g elsewhere (at 0 too, as PyTorch)
  double a;
  template <class C> MG_HOST_DEVICE C operator()(C g, C x) const { return x > C(0) ? g : g * C(a); }
};
struct ClampGrad {  // saved x: the gradient passes where a <= x <= b
  double a, b;
  template <class C> MG_HOST_DEVICE C operator()(C g, C x) const { return (x >= C(a) && x <= C(b)) ? g : C(0); }
};
struct PowScalarGrad {  // saved x: g * a * x^(a-1); 0 for a == 0 (not 0 * 0^-1 = NaN at x = 0)
  double a;
  template <class C> MG_HOST_DEVICE C operator()(C g, C x) const {
    return a == 0.0 ? C(0) : g * C(a) * std::pow(x, C(a) - C(1));
  }
};

// ---- ternary: out = f(x, y, z) after broadcasting
struct Where {  // the mask is loaded as C: non-zero selects a
  template <class C> MG_HOST_DEVICE C operator()(C mask, C a, C b) const { return mask != C(0) ? a : b; }
};
// d(a/b)/db for div and rdiv, from the saved quotient q = a/b: -g q / b. One rounding, so an f16
// gradient under a loss scale does not overflow in an intermediate g * q.
struct DivisorGrad {
  template <class C> MG_HOST_DEVICE C operator()(C g, C quotient, C divisor) const { return -g * quotient / divisor; }
};
// d(b^e)/db = e b^(e-1), taken as 0 where e == 0 (PyTorch's convention).
struct PowBaseGrad {
  template <class C> MG_HOST_DEVICE C operator()(C g, C base, C exponent) const {
    return exponent == C(0) ? C(0) : g * exponent * std::pow(base, exponent - C(1));
  }
};
// d(b^e)/de = b^e log b, taken as 0 where b == 0 and e >= 0 (the limit, instead of 0 * -inf).
struct PowExponentGrad {
  template <class C> MG_HOST_DEVICE C operator()(C g, C base, C exponent) const {
    return (base == C(0) && exponent >= C(0)) ? C(0) : g * std::pow(base, exponent) * std::log(base);
  }
};

// The share of g that goes to x in maximum(x, y): all of it where x wins, none where y wins, half on a
// tie; where either is NaN neither wins, so both get all of it (PyTorch's formula, NaN case included).
// The other input's share is the same functor with x and y swapped.
struct MaximumGrad {
  template <class C> MG_HOST_DEVICE C operator()(C g, C x, C y) const {
    return x == y ? g * C(0.5) : (x < y ? C(0) : g);
  }
};
struct MinimumGrad {  // as MaximumGrad, for minimum(x, y)
  template <class C> MG_HOST_DEVICE C operator()(C g, C x, C y) const {
    return x == y ? g * C(0.5) : (x > y ? C(0) : g);
  }
};

}  // namespace mg::functors
