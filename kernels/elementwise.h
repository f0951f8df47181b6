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

namespace mg::kernels {

enum class UnaryOp : std::uint8_t {
  Copy, Neg, Exp, Log, Sqrt, Abs, Tanh, Sigmoid, Relu, Gelu, Silu,
  AddScalar, MulScalar, DivScalar, PowScalar, RDivScalar, Clamp,  // use Scalars::a (and b for Clamp)
  LeakyRelu,                                                      // Scalars::a: the negative slope
};

enum class BinaryOp : std::uint8_t {
  Add, Sub, Mul, Div, Pow, Maximum, Minimum,
  // backward formulas (kernels/functors.h): first input the gradient, second the saved tensor
  ReluGrad, AbsGrad, TanhGrad, SigmoidGrad, SqrtGrad, GeluGrad, SiluGrad, ClampGrad, PowScalarGrad,
  LeakyReluGrad,  // Scalars::a: the negative slope
};

enum class TernaryOp : std::uint8_t {
  Where,            // (mask, a, b): mask != 0 ? a : b
  DivisorGrad,      // (g, quotient, divisor): the divisor's gradient of div and rdiv
  PowBaseGrad,      // (g, base, exponent)
  PowExponentGrad,  // (g, base, exponent)
  MaximumGrad,      // (g, x, y): x's share of g in maximum(x, y); swap x and y for y's
  MinimumGrad,      // (g, x, y): the same for minimum
};

// The scalar operands of the *Scalar ops: `a` is the scalar (the exponent of PowScalar); Clamp and
// ClampGrad take their bounds as a = min and b = max.
struct Scalars {
  double a = 0.0;
  double b = 0.0;
};

void unary(UnaryOp op, const Tensor& x, Tensor& out, Scalars scalars = {});
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out, Scalars scalars = {});
void ternary(TernaryOp op, const Tensor& x, const Tensor& y, const Tensor& z, Tensor& out);

namespace cpu {
void unary(UnaryOp op, const Tensor& x, Tensor& out, Scalars scalars);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out, Scalars scalars);
void ternary(TernaryOp op, const Tensor& x, const Tensor& y, const Tensor& z, Tensor& out);
}  // namespace cpu

// The CUDA backend (kernels/cuda/), in builds with MG_WITH_CUDA: same contract, tensors on one GPU.
namespace cuda {
void unary(UnaryOp op, const Tensor& x, Tensor& out, Scalars scalars);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out, Scalars scalars);
void ternary(TernaryOp op, const Tensor& x, const Tensor& y, const Tensor& z, Tensor& out);
}  // namespace cuda

}  // namespace mg::kernels
