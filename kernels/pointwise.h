// The pointwise ops, one unit each: the math of every elementwise op, forward and backward side by
// side, written once for the CPU loop and the CUDA kernels.
//
// A unit is a struct of scalar functions of the compute type C (float for f32/f16/bf16, double for
// f64), MG_HOST_DEVICE so that the CUDA kernels call the same code per thread that the CPU loop
// (kernels/cpu/elementwise.cpp) calls over chunks. Values are computed in C and rounded to the
// storage dtype only on store; a backward formula is one function of (g, saved), so an f16 gradient
// is rounded once instead of once per intermediate:
//
//   struct Silu {
//     static constexpr Saves saves = Saves::Input;          // what backward reads: x, y or nothing
//     C operator()(C x) const;                               // forward: y = silu(x)
//     C grad(C g, C x) const;                                // backward: dx = g * silu'(x)
//   };
//
// plus one row in MG_POINTWISE_OPS below. From that row come the kernels' UnaryOp enumerator and
// dispatch (kernels/elementwise.h, elementwise_table.h), and autograd's Op enumerator, cast-table
// row and the differentiable function mg::silu itself (autograd/cast_policy.h, autograd/unary.cpp).
// Backward runs g and the saved tensor through the elementwise loop like any op of two inputs
// (kernels::unary_grad); there is no double backward, so grad needs no derivative of its own.
// So adding a pointwise op with its gradient is this file (the unit and its row) and its declaration
// in autograd/ops.h; no .cu file changes.
#pragma once

#include <cmath>

#include "core/host_device.h"

// ---- the lists
//
// X(Unit, name, cast policy, why): the differentiable ops of one tensor. `name` is the function
// (mg::name) and what errors print; the policy says what autocast does with its input
// (autograd/cast_policy.h explains the five): kernels/ reads the first two columns, autograd/ all four.
// The function mg::name(x) is generated (autograd/unary.cpp).
#define MG_POINTWISE_OPS(X) \
  X(Exp, exp, Float32, "exp(x) overflows f16 for x > 11.1") \
  X(Log, log, Float32, "log near 0 needs the small inputs f16 flushes to zero") \
  X(Neg, neg, InputDtype, "exact in any dtype") \
  X(Sqrt, sqrt, InputDtype, "its result has half its input's exponent: it cannot leave the range") \
  X(Abs, abs, InputDtype, "exact in any dtype") \
  X(Tanh, tanh, InputDtype, "bounded by 1, computed in f32 and rounded once") \
  X(Sigmoid, sigmoid, InputDtype, "bounded by 1, computed in f32 and rounded once") \
  X(Relu, relu, InputDtype, "selects values, computes none") \
  X(Gelu, gelu, InputDtype, "close to x or to 0, computed in f32 and rounded once") \
  X(Silu, silu, InputDtype, "close to x or to 0, computed in f32 and rounded once (as gelu)")

// The same, for ops with scalar parameters (the unit's members a, b): their functions, which check
// the parameters, are written out in autograd/unary.cpp.
#define MG_POINTWISE_OPS_WITH_PARAMETERS(X) \
  X(Clamp, clamp, InputDtype, "selects values, computes none") \
  X(LeakyRelu, leaky_relu, InputDtype, "x or a small multiple of it, computed in f32 and rounded once")

// X(Unit, name): tensor-scalar arithmetic. Not ops of their own: mg::add(x, 2.0) is Op::Add, and
// its backward is written in autograd/unary.cpp.
#define MG_SCALAR_OPS(X) \
  X(Copy, copy) \
  X(AddScalar, add) \
  X(MulScalar, mul) \
  X(DivScalar, div) \
  X(PowScalar, pow) \
  X(RDivScalar, div)

namespace mg::functors {

// What a unit's backward reads besides g: its input x, its output y, or nothing.
enum class Saves { Input, Output, Nothing };

inline constexpr double kInvSqrt2 = 0.70710678118654752440;  // 1/sqrt(2)
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2 pi)

// ---- differentiable ops of one tensor: y = f(x) and dx = grad(g, saved), with up to two scalar
//      parameters a, b

struct Exp {  // dx = g y
  static constexpr Saves saves = Saves::Output;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return std::exp(x);
  }
  template <class C>
  MG_HOST_DEVICE C grad(C g, C y) const {
    return g * y;
  }
};
struct Log {  // dx = g / x
  static constexpr Saves saves = Saves::Input;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return std::log(x);
  }
  template <class C>
  MG_HOST_DEVICE C grad(C g, C x) const {
    return g / x;
  }
};
struct Neg {  // dx = -g
  static constexpr Saves saves = Saves::Nothing;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return -x;
  }
  template <class C>
  MG_HOST_DEVICE C grad(C g, C) const {
    return -g;
  }
};
struct Sqrt {  // dx = g / (2 y)
  static constexpr Saves saves = Saves::Output;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return std::sqrt(x);
  }
  template <class C>
  MG_HOST_DEVICE C grad(C g, C y) const {
    return g / (C(2) * y);
  }
};
struct Abs {  // dx = g sign(x), with sign(0) = 0
  static constexpr Saves saves = Saves::Input;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return std::fabs(x);
  }
  template <class C>
  MG_HOST_DEVICE C grad(C g, C x) const {
    return x > C(0) ? g : (x < C(0) ? -g : C(0));
  }
};
// min(max(x, a), b); NaN stays NaN. The gradient passes where a <= x <= b, the bounds included: PyTorch's
// clamp_backward for scalar bounds, where(min <= x && x <= max, grad, 0), in 1.13 and 2.x alike
// (tests/parity/test_parity.cpp holds the bounds by hand).
struct Clamp {
  double a, b;
  static constexpr Saves saves = Saves::Input;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return x < C(a) ? C(a) : (x > C(b) ? C(b) : x);
  }
  template <class C>
  MG_HOST_DEVICE C grad(C g, C x) const {
    return (x >= C(a) && x <= C(b)) ? g : C(0);
  }
};
// dx = g (1 - y^2), as (1 - y)(1 + y). Near |y| = 1, where 1 - y^2 is small, 1 - y is exact and the
// product rounds twice: within about 1 ulp of 1 - y^2 for the given y whether or not the compiler
// fuses y * y into the subtraction (it does at -O2, not at -O1; unfused, 1 - y * y loses the low bits
// of y^2 and doubled the error of the worst element).
struct Tanh {
  static constexpr Saves saves = Saves::Output;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return std::tanh(x);
  }
  template <class C>
  MG_HOST_DEVICE C grad(C g, C y) const {
    return g * ((C(1) - y) * (C(1) + y));
  }
};
struct Sigmoid {  // dx = g y (1 - y)
  static constexpr Saves saves = Saves::Output;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return C(1) / (C(1) + std::exp(-x));
  }
  template <class C>
  MG_HOST_DEVICE C grad(C g, C y) const {
    return g * y * (C(1) - y);
  }
};
// NaN passes through (it is not < 0), as in PyTorch: a NaN is never hidden. The gradient passes where
// x > 0 or x is NaN (0 at the kink, as PyTorch).
struct Relu {
  static constexpr Saves saves = Saves::Input;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return x < C(0) ? C(0) : x;
  }
  template <class C>
  MG_HOST_DEVICE C grad(C g, C x) const {
    return x <= C(0) ? C(0) : g;
  }
};
// The exact GELU, x * Phi(x) with the normal CDF Phi (PyTorch's default, approximate="none").
// Phi(x) = erfc(-x / sqrt 2) / 2, not (1 + erf(x / sqrt 2)) / 2, which cancels for x < -1 and leaves the
// left tail accurate only relative to |x|. gelu(-inf) = -inf * 0 is NaN, as in PyTorch.
// dx = g (Phi(x) + x phi(x)): NaN at x = NaN, and at x = +-inf, where x phi(x) is inf * 0: PyTorch's
// value there, and never a finite one (kernels/cpu/vector_math.h, the rule).
struct Gelu {
  static constexpr Saves saves = Saves::Input;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return C(0.5) * x * std::erfc(-x * C(kInvSqrt2));
  }
  template <class C>
  MG_HOST_DEVICE C grad(C g, C x) const {
    C cdf = C(0.5) * std::erfc(-x * C(kInvSqrt2));
    C pdf = C(kInvSqrt2Pi) * std::exp(C(-0.5) * x * x);
    return g * (cdf + x * pdf);
  }
};
// x * sigmoid(x) (SiLU, "swish"), in one expression so that f16 is rounded once.
// dx = g s (1 + x (1 - s)) with s = sigmoid(x).
struct Silu {
  static constexpr Saves saves = Saves::Input;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return x / (C(1) + std::exp(-x));
  }
  template <class C>
  MG_HOST_DEVICE C grad(C g, C x) const {
    C s = C(1) / (C(1) + std::exp(-x));
    return g * s * (C(1) + x * (C(1) - s));
  }
};
// x for x > 0, a * x otherwise (a: the negative slope); NaN stays NaN. dx = g where x > 0, a g
// elsewhere (at 0 too, as PyTorch).
struct LeakyRelu {
  double a;
  static constexpr Saves saves = Saves::Input;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return x > C(0) ? x : x * C(a);
  }
  template <class C>
  MG_HOST_DEVICE C grad(C g, C x) const {
    return x > C(0) ? g : g * C(a);
  }
};

// ---- tensor-scalar arithmetic: y = f(x) with the scalar a
struct Copy {
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return x;
  }
};
struct AddScalar {
  double a;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return x + C(a);
  }
};
struct MulScalar {
  double a;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return x * C(a);
  }
};
struct DivScalar {
  double a;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return x / C(a);
  }
};
// x^a; dx = g a x^(a-1), and 0 for a == 0 (not 0 * 0^-1 = NaN at x = 0).
struct PowScalar {
  double a;
  static constexpr Saves saves = Saves::Input;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return std::pow(x, C(a));
  }
  template <class C>
  MG_HOST_DEVICE C grad(C g, C x) const {
    return a == 0.0 ? C(0) : g * C(a) * std::pow(x, C(a) - C(1));
  }
};
// a / x: the scalar-divided-by-tensor case (a - x is AddScalar after Neg). Its gradient is
// DivisorGrad's, below, from the saved output.
struct RDivScalar {
  double a;
  template <class C>
  MG_HOST_DEVICE C operator()(C x) const {
    return C(a) / x;
  }
};

// A unit's backward as a functor of two inputs (g, saved), the shape the elementwise loops call.
template <class Unit>
struct Backward {
  Unit unit;
  template <class C>
  MG_HOST_DEVICE C operator()(C g, C saved) const {
    return unit.grad(g, saved);
  }
};

// ---- binary: z = f(a, b) after broadcasting, each followed by its gradient formulas where the
//      gradient is not a plain op (autograd/binary.cpp: add's is g, mul's g * b, ...)
struct Add {
  template <class C>
  MG_HOST_DEVICE C operator()(C a, C b) const {
    return a + b;
  }
};
struct Sub {
  template <class C>
  MG_HOST_DEVICE C operator()(C a, C b) const {
    return a - b;
  }
};
struct Mul {
  template <class C>
  MG_HOST_DEVICE C operator()(C a, C b) const {
    return a * b;
  }
};
struct Div {
  template <class C>
  MG_HOST_DEVICE C operator()(C a, C b) const {
    return a / b;
  }
};
// d(a/b)/db for div and rdiv, from the saved quotient q = a/b: -g q / b. One rounding, so an f16
// gradient under a loss scale does not overflow in an intermediate g * q.
struct DivisorGrad {
  template <class C>
  MG_HOST_DEVICE C operator()(C g, C quotient, C divisor) const {
    return -g * quotient / divisor;
  }
};

struct Pow {
  template <class C>
  MG_HOST_DEVICE C operator()(C a, C b) const {
    return std::pow(a, b);
  }
};
// d(b^e)/db = e b^(e-1), taken as 0 where e == 0 (PyTorch's convention).
struct PowBaseGrad {
  template <class C>
  MG_HOST_DEVICE C operator()(C g, C base, C exponent) const {
    return exponent == C(0) ? C(0) : g * exponent * std::pow(base, exponent - C(1));
  }
};
// d(b^e)/de = b^e log b, taken as 0 where b == 0 and e >= 0 (the limit, instead of 0 * -inf).
struct PowExponentGrad {
  template <class C>
  MG_HOST_DEVICE C operator()(C g, C base, C exponent) const {
    return (base == C(0) && exponent >= C(0)) ? C(0) : g * std::pow(base, exponent) * std::log(base);
  }
};

// The larger (smaller) of a and b; NaN if either is NaN; a on ties, so maximum(-0, +0) is -0 (as PyTorch).
struct Maximum {
  template <class C>
  MG_HOST_DEVICE C operator()(C a, C b) const {
    return (a < b || b != b) ? b : a;
  }
};
// The share of g that goes to x in maximum(x, y): all of it where x wins, none where y wins, half on a
// tie; where either is NaN neither wins, so both get all of it (PyTorch's formula, NaN case included).
// The other input's share is the same functor with x and y swapped.
struct MaximumGrad {
  template <class C>
  MG_HOST_DEVICE C operator()(C g, C x, C y) const {
    return x == y ? g * C(0.5) : (x < y ? C(0) : g);
  }
};
struct Minimum {
  template <class C>
  MG_HOST_DEVICE C operator()(C a, C b) const {
    return (a > b || b != b) ? b : a;
  }
};
struct MinimumGrad {  // as MaximumGrad, for minimum(x, y)
  template <class C>
  MG_HOST_DEVICE C operator()(C g, C x, C y) const {
    return x == y ? g * C(0.5) : (x > y ? C(0) : g);
  }
};

// ---- ternary: out = f(x, y, z) after broadcasting
struct Where {  // the mask is loaded as C: non-zero selects a; the gradient is where() again
  template <class C>
  MG_HOST_DEVICE C operator()(C mask, C a, C b) const {
    return mask != C(0) ? a : b;
  }
};

}  // namespace mg::functors
