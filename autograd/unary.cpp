// Elementwise ops of one tensor, and tensor-scalar arithmetic, forward and backward side by side.
//
// Each backward is one fused kernel call (kernels/functors.h, the *Grad functors) or one op, and
// each op names what it saves: the input x or the output y, whichever the derivative needs.
#include "amp/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"

namespace mg {

namespace {

using kernels::BinaryOp;
using kernels::Scalars;
using kernels::UnaryOp;

Tensor unary_forward(UnaryOp kind, const char* op, const Tensor& x, Scalars scalars = {}) {
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
void record_fused(const char* op, const Tensor& x, Tensor& out, BinaryOp grad_kind, const Tensor& saved,
                  Scalars scalars = {}) {
  record(op, {x}, out, [grad_kind, saved = Saved(saved), scalars](const Tensor& g, const auto&) {
    return Grads{fused_grad(grad_kind, g, saved, scalars)};
  });
}

}  // namespace

Tensor neg(const Tensor& x_in) {
  const Tensor x = amp::autocast_input("neg", x_in);
  Tensor y = unary_forward(UnaryOp::Neg, "mg::neg", x);
  record("neg", {x}, y, [](const Tensor& g, const auto&) { return Grads{neg(g)}; });
  return y;
}

Tensor exp(const Tensor& x_in) {
  const Tensor x = amp::autocast_input("exp", x_in);  // dy = y dx: saves y
  Tensor y = unary_forward(UnaryOp::Exp, "mg::exp", x);
  record("exp", {x}, y, [y = Saved(y)](const Tensor& g, const auto&) { return Grads{mul(g, y)}; });
  return y;
}

Tensor log(const Tensor& x_in) {
  const Tensor x = amp::autocast_input("log", x_in);  // dy = dx / x: saves x
  Tensor y = unary_forward(UnaryOp::Log, "mg::log", x);
  record("log", {x}, y, [x = Saved(x)](const Tensor& g, const auto&) { return Grads{div(g, x)}; });
  return y;
}

Tensor sqrt(const Tensor& x_in) {
  const Tensor x = amp::autocast_input("sqrt", x_in);  // dy = dx / (2y): saves y
  Tensor y = unary_forward(UnaryOp::Sqrt, "mg::sqrt", x);
  record_fused("sqrt", x, y, BinaryOp::SqrtGrad, y);
  return y;
}

Tensor abs(const Tensor& x_in) {
  const Tensor x = amp::autocast_input("abs", x_in);  // dy = sign(x) dx: saves x
  Tensor y = unary_forward(UnaryOp::Abs, "mg::abs", x);
  record_fused("abs", x, y, BinaryOp::AbsGrad, x);
  return y;
}

Tensor clamp(const Tensor& x_in, double min, double max) {
  const Tensor x = amp::autocast_input("clamp", x_in);  // passes where min <= x <= max: saves x
  MG_CHECK(!(min > max), "mg::clamp: min {} is greater than max {}", min, max);
  Tensor y = unary_forward(UnaryOp::Clamp, "mg::clamp", x, {min, max});
  record_fused("clamp", x, y, BinaryOp::ClampGrad, x, {min, max});
  return y;
}

Tensor tanh(const Tensor& x_in) {
  const Tensor x = amp::autocast_input("tanh", x_in);  // dy = (1 - y^2) dx: saves y
  Tensor y = unary_forward(UnaryOp::Tanh, "mg::tanh", x);
  record_fused("tanh", x, y, BinaryOp::TanhGrad, y);
  return y;
}

Tensor sigmoid(const Tensor& x_in) {
  const Tensor x = amp::autocast_input("sigmoid", x_in);  // dy = y (1 - y) dx: saves y
  Tensor y = unary_forward(UnaryOp::Sigmoid, "mg::sigmoid", x);
  record_fused("sigmoid", x, y, BinaryOp::SigmoidGrad, y);
  return y;
}

Tensor relu(const Tensor& x_in) {
  const Tensor x = amp::autocast_input("relu", x_in);  // passes where x > 0: saves x
  Tensor y = unary_forward(UnaryOp::Relu, "mg::relu", x);
  record_fused("relu", x, y, BinaryOp::ReluGrad, x);
  return y;
}

Tensor gelu(const Tensor& x_in) {
  const Tensor x = amp::autocast_input("gelu", x_in);  // dy = (Phi(x) + x phi(x)) dx: saves x
  Tensor y = unary_forward(UnaryOp::Gelu, "mg::gelu", x);
  record_fused("gelu", x, y, BinaryOp::GeluGrad, x);
  return y;
}

Tensor add(const Tensor& x_in, double scalar) {
  const Tensor x = amp::autocast_input("add", x_in);
  Tensor y = unary_forward(UnaryOp::AddScalar, "mg::add", x, {scalar});
  record("add", {x}, y, [](const Tensor& g, const auto&) { return Grads{g}; });
  return y;
}

// Both delegate; the check first, so that an error names the op the caller used, not mg::add/mg::neg.
Tensor sub(const Tensor& x, double scalar) {
  check::floating("mg::sub", x);
  return add(x, -scalar);
}

Tensor rsub(double scalar, const Tensor& x) {
  check::floating("mg::sub", x);
  return add(neg(x), scalar);
}

Tensor mul(const Tensor& x_in, double scalar) {
  const Tensor x = amp::autocast_input("mul", x_in);
  Tensor y = unary_forward(UnaryOp::MulScalar, "mg::mul", x, {scalar});
  record("mul", {x}, y, [scalar](const Tensor& g, const auto&) { return Grads{mul(g, scalar)}; });
  return y;
}

Tensor div(const Tensor& x_in, double scalar) {
  const Tensor x = amp::autocast_input("div", x_in);
  Tensor y = unary_forward(UnaryOp::DivScalar, "mg::div", x, {scalar});
  record("div", {x}, y, [scalar](const Tensor& g, const auto&) { return Grads{div(g, scalar)}; });
  return y;
}

Tensor rdiv(double scalar, const Tensor& x_in) {
  const Tensor x = amp::autocast_input("rdiv", x_in);  // d(s/x) = -(s/x) / x dx: saves x and y
  Tensor y = unary_forward(UnaryOp::RDivScalar, "mg::div", x, {scalar});
  record("rdiv", {x}, y, [x = Saved(x), y = Saved(y)](const Tensor& g, const auto&) {
    Tensor dx = Tensor::empty(g.shape(), check::like(g));
    kernels::ternary(kernels::TernaryOp::DivisorGrad, g, y, x, dx);  // rounded once, as div's
    return Grads{dx};
  });
  return y;
}

Tensor pow(const Tensor& x_in, double exponent) {
  const Tensor x = amp::autocast_input("pow", x_in);  // dy = p x^(p-1) dx: saves x
  Tensor y = unary_forward(UnaryOp::PowScalar, "mg::pow", x, {exponent});
  record_fused("pow", x, y, BinaryOp::PowScalarGrad, x, {exponent});
  return y;
}

}  // namespace mg
