// Elementwise ops of one tensor, and tensor-scalar arithmetic, forward and backward side by side.
//
// Each backward is one fused kernel call (kernels/functors.h, the *Grad functors) or one op, and
// each op names what it saves: the input x or the output y, whichever the derivative needs.
#include <cmath>

#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"

namespace mg {

namespace {

using kernels::BinaryOp;
using kernels::Scalars;
using kernels::UnaryOp;

Tensor unary_forward(UnaryOp kind, Op op, const Tensor& x, Scalars scalars = {}) {
  check::floating(op, x);
  Tensor out = Tensor::empty(x.shape(), check::like(x));
  kernels::unary(kind, x, out, scalars);
  return out;
}

// dx = f(g, saved) with one of the fused backward functors.
Tensor fused_grad(BinaryOp kind, const Tensor& g, const Tensor& saved, Scalars scalars = {}) {
  Tensor dx = Tensor::empty(g.shape(), check::like(g));
  kernels::binary(kind, g, saved, dx, scalars);
  return dx;
}

// Records an op whose backward is a fused functor of (g, saved).
void record_fused(Op op, const Tensor& x, Tensor& out, BinaryOp grad_kind, const Tensor& saved,
                  Scalars scalars = {}) {
  record(op, {x}, out, [grad_kind, saved = Saved(saved), scalars](const Tensor& g, const auto&) {
    return Grads{fused_grad(grad_kind, g, saved, scalars)};
  });
}

}  // namespace

Tensor neg(const Tensor& x_in) {
  const Tensor x = autocast_input(Op::Neg, x_in);
  Tensor y = unary_forward(UnaryOp::Neg, Op::Neg, x);
  record(Op::Neg, {x}, y, [](const Tensor& g, const auto&) { return Grads{neg(g)}; });
  return y;
}

Tensor exp(const Tensor& x_in) {
  const Tensor x = autocast_input(Op::Exp, x_in);  // dy = y dx: saves y
  Tensor y = unary_forward(UnaryOp::Exp, Op::Exp, x);
  record(Op::Exp, {x}, y, [y = Saved(y)](const Tensor& g, const auto&) { return Grads{mul(g, y)}; });
  return y;
}

Tensor log(const Tensor& x_in) {
  const Tensor x = autocast_input(Op::Log, x_in);  // dy = dx / x: saves x
  Tensor y = unary_forward(UnaryOp::Log, Op::Log, x);
  record(Op::Log, {x}, y, [x = Saved(x)](const Tensor& g, const auto&) { return Grads{div(g, x)}; });
  return y;
}

Tensor sqrt(const Tensor& x_in) {
  const Tensor x = autocast_input(Op::Sqrt, x_in);  // dy = dx / (2y): saves y
  Tensor y = unary_forward(UnaryOp::Sqrt, Op::Sqrt, x);
  record_fused(Op::Sqrt, x, y, BinaryOp::SqrtGrad, y);
  return y;
}

Tensor abs(const Tensor& x_in) {
  const Tensor x = autocast_input(Op::Abs, x_in);  // dy = sign(x) dx: saves x
  Tensor y = unary_forward(UnaryOp::Abs, Op::Abs, x);
  record_fused(Op::Abs, x, y, BinaryOp::AbsGrad, x);
  return y;
}

Tensor clamp(const Tensor& x_in, double min, double max) {
  const Tensor x = autocast_input(Op::Clamp, x_in);  // passes where min <= x <= max: saves x
  MG_CHECK(!(min > max), "{}: min {} is greater than max {}", Op::Clamp, min, max);
  Tensor y = unary_forward(UnaryOp::Clamp, Op::Clamp, x, {min, max});
  record_fused(Op::Clamp, x, y, BinaryOp::ClampGrad, x, {min, max});
  return y;
}

Tensor tanh(const Tensor& x_in) {
  const Tensor x = autocast_input(Op::Tanh, x_in);  // dy = (1 - y^2) dx: saves y
  Tensor y = unary_forward(UnaryOp::Tanh, Op::Tanh, x);
  record_fused(Op::Tanh, x, y, BinaryOp::TanhGrad, y);
  return y;
}

Tensor sigmoid(const Tensor& x_in) {
  const Tensor x = autocast_input(Op::Sigmoid, x_in);  // dy = y (1 - y) dx: saves y
  Tensor y = unary_forward(UnaryOp::Sigmoid, Op::Sigmoid, x);
  record_fused(Op::Sigmoid, x, y, BinaryOp::SigmoidGrad, y);
  return y;
}

Tensor relu(const Tensor& x_in) {
  const Tensor x = autocast_input(Op::Relu, x_in);  // passes where x > 0: saves x
  Tensor y = unary_forward(UnaryOp::Relu, Op::Relu, x);
  record_fused(Op::Relu, x, y, BinaryOp::ReluGrad, x);
  return y;
}

Tensor gelu(const Tensor& x_in) {
  const Tensor x = autocast_input(Op::Gelu, x_in);  // dy = (Phi(x) + x phi(x)) dx: saves x
  Tensor y = unary_forward(UnaryOp::Gelu, Op::Gelu, x);
  record_fused(Op::Gelu, x, y, BinaryOp::GeluGrad, x);
  return y;
}

Tensor silu(const Tensor& x_in) {
  const Tensor x = autocast_input(Op::Silu, x_in);  // dy = s (1 + x (1 - s)) dx with s = sigmoid(x): saves x
  Tensor y = unary_forward(UnaryOp::Silu, Op::Silu, x);
  record_fused(Op::Silu, x, y, BinaryOp::SiluGrad, x);
  return y;
}

Tensor leaky_relu(const Tensor& x_in, double negative_slope) {
  const Tensor x = autocast_input(Op::LeakyRelu, x_in);  // dy = dx where x > 0, slope dx elsewhere: saves x
  MG_CHECK(std::isfinite(negative_slope), "{}: negative_slope must be finite, got {}", Op::LeakyRelu, negative_slope);
  Tensor y = unary_forward(UnaryOp::LeakyRelu, Op::LeakyRelu, x, {negative_slope});
  record_fused(Op::LeakyRelu, x, y, BinaryOp::LeakyReluGrad, x, {negative_slope});
  return y;
}

Tensor add(const Tensor& x_in, double scalar) {
  const Tensor x = autocast_input(Op::Add, x_in);
  Tensor y = unary_forward(UnaryOp::AddScalar, Op::Add, x, {scalar});
  record(Op::Add, {x}, y, [](const Tensor& g, const auto&) { return Grads{g}; });
  return y;
}

// Both delegate; the check first, so that an error names the op the caller used, not mg::add/mg::neg.
Tensor sub(const Tensor& x, double scalar) {
  check::floating(Op::Sub, x);
  return add(x, -scalar);
}

Tensor rsub(double scalar, const Tensor& x) {
  check::floating(Op::Sub, x);
  return add(neg(x), scalar);
}

Tensor mul(const Tensor& x_in, double scalar) {
  const Tensor x = autocast_input(Op::Mul, x_in);
  Tensor y = unary_forward(UnaryOp::MulScalar, Op::Mul, x, {scalar});
  record(Op::Mul, {x}, y, [scalar](const Tensor& g, const auto&) { return Grads{mul(g, scalar)}; });
  return y;
}

Tensor div(const Tensor& x_in, double scalar) {
  const Tensor x = autocast_input(Op::Div, x_in);
  Tensor y = unary_forward(UnaryOp::DivScalar, Op::Div, x, {scalar});
  record(Op::Div, {x}, y, [scalar](const Tensor& g, const auto&) { return Grads{div(g, scalar)}; });
  return y;
}

Tensor rdiv(double scalar, const Tensor& x_in) {
  const Tensor x = autocast_input(Op::RDiv, x_in);  // d(s/x) = -(s/x) / x dx: saves x and y
  Tensor y = unary_forward(UnaryOp::RDivScalar, Op::RDiv, x, {scalar});
  record(Op::RDiv, {x}, y, [x = Saved(x), y = Saved(y)](const Tensor& g, const auto&) {
    Tensor dx = Tensor::empty(g.shape(), check::like(g));
    kernels::ternary(kernels::TernaryOp::DivisorGrad, g, y, x, dx);  // rounded once, as div's
    return Grads{dx};
  });
  return y;
}

Tensor pow(const Tensor& x_in, double exponent) {
  const Tensor x = autocast_input(Op::Pow, x_in);  // dy = p x^(p-1) dx: saves x
  Tensor y = unary_forward(UnaryOp::PowScalar, Op::Pow, x, {exponent});
  record_fused(Op::Pow, x, y, BinaryOp::PowScalarGrad, x, {exponent});
  return y;
}

}  // namespace mg
