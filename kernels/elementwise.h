// Elementwise kernels of one, two and three inputs, with NumPy broadcasting of the inputs to `out`.
//
// Requires (checked by the ops before they get here): inputs and out on one device, floating
// dtypes equal to out's (Where's mask: i32 or any dtype that converts exactly into out's compute
// type), inputs broadcastable to out's shape.
// Guarantees: every element of out is written; math in f32 (f64 for f64), rounded once on store.
// `out` may be the same tensor as an input of the same shape (in-place use).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/backends.h"
#include "kernels/pointwise.h"

namespace mg::kernels {

// One enumerator per unit of kernels/pointwise.h: the differentiable ops, then tensor-scalar arithmetic.
#define MG_UNARY_ENUMERATOR(Unit, ...) Unit,
enum class UnaryOp : std::uint8_t {
  MG_POINTWISE_OPS(MG_UNARY_ENUMERATOR) MG_POINTWISE_OPS_WITH_PARAMETERS(MG_UNARY_ENUMERATOR)
      MG_SCALAR_OPS(MG_UNARY_ENUMERATOR)
};
#undef MG_UNARY_ENUMERATOR

enum class BinaryOp : std::uint8_t { Add, Sub, Mul, Div, Pow, Maximum, Minimum };

enum class TernaryOp : std::uint8_t {
  Where,  // (mask, a, b): mask != 0 ? a : b
  DivisorGrad,  // (g, quotient, divisor): the divisor's gradient of div and rdiv
  PowBaseGrad,  // (g, base, exponent)
  PowExponentGrad,  // (g, base, exponent)
  MaximumGrad,  // (g, x, y): x's share of g in maximum(x, y); swap x and y for y's
  MinimumGrad,  // (g, x, y): the same for minimum
};

// The scalar operands of the *Scalar ops: `a` is the scalar (the exponent of PowScalar); Clamp
// takes its bounds as a = min and b = max, LeakyRelu its negative slope as a.
struct Scalars {
  double a = 0.0;
  double b = 0.0;
};

MG_KERNELS(void unary(UnaryOp op, const Tensor& x, Tensor& out, Scalars scalars = {});
           // A unit's backward, dx = grad(g, saved) (kernels/pointwise.h): `saved` is what the unit's `saves`
           // names (x or y; for Saves::Nothing, pass g). g, saved and dx have one shape and dtype. Refused for
           // a UnaryOp whose unit has no backward of this form (Copy, AddScalar, ..., RDivScalar).
           void unary_grad(UnaryOp op, const Tensor& g, const Tensor& saved, Tensor& dx, Scalars scalars = {});
           void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
           void ternary(TernaryOp op, const Tensor& x, const Tensor& y, const Tensor& z, Tensor& out);)

}  // namespace mg::kernels
