// Elementwise ops of one tensor, and tensor-scalar arithmetic, forward and backward side by side.
//
// The pointwise ops are made from their units (kernels/pointwise.h): each one's forward is
// kernels::unary, its backward one fused kernel of (g, saved), kernels::unary_grad, with the unit's
// own formula, and it saves what its unit names (x, y or nothing). The ops with no parameter are
// generated from their rows; clamp and leaky_relu check their parameters first. The scalar
// arithmetic below (add(x, 2.0), ...) is made of the same kernels, its backward written out.
#include <cmath>

#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"

namespace mg {

namespace {

using functors::Saves;
using kernels::Scalars;
using kernels::UnaryOp;

Tensor unary_forward(UnaryOp kind, Op op, const Tensor& x, Scalars scalars = {}) {
  check::floating(op, x);
  Tensor out = Tensor::empty(x.shape(), check::like(x));
  kernels::unary(kind, x, out, scalars);
  return out;
}

// dx = grad(g, saved), the unit's backward formula, rounded once.
Tensor unit_grad(UnaryOp kind, const Tensor& g, const Tensor& saved, Scalars scalars) {
  Tensor dx = Tensor::empty(g.shape(), check::like(g));
  kernels::unary_grad(kind, g, saved, dx, scalars);
  return dx;
}

// The op of a unit: autocast per its row, y = unit(x), and a backward that saves what the unit
// names. (A unit that saves nothing gets g in the saved slot; its formula ignores it.)
template <class Unit>
Tensor pointwise(Op op, UnaryOp kind, const Tensor& x_in, Scalars scalars = {}) {
  const OpSpan span(op);
  const Tensor x = autocast_input(op, x_in);
  Tensor y = unary_forward(kind, op, x, scalars);
  if constexpr (Unit::saves == Saves::Nothing) {
    record(op, {x}, y, [kind, scalars](const Tensor& g, const auto&) { return Grads{unit_grad(kind, g, g, scalars)}; });
  } else {
    const Tensor& saved = Unit::saves == Saves::Input ? x : y;
    record(op, {x}, y, [kind, saved = Saved(saved), scalars](const Tensor& g, const auto&) {
      return Grads{unit_grad(kind, g, saved, scalars)};
    });
  }
  return y;
}

}  // namespace

// mg::exp, mg::log, mg::neg, ..., mg::silu: one function per row of MG_POINTWISE_OPS.
#define MG_POINTWISE_FUNCTION(Unit, name, ...) \
  Tensor name(const Tensor& x) { return pointwise<functors::Unit>(Op::Unit, UnaryOp::Unit, x); }
MG_POINTWISE_OPS(MG_POINTWISE_FUNCTION)
#undef MG_POINTWISE_FUNCTION

Tensor clamp(const Tensor& x, double min, double max) {
  MG_CHECK(!(min > max), "{}: min {} is greater than max {}", Op::Clamp, min, max);
  return pointwise<functors::Clamp>(Op::Clamp, UnaryOp::Clamp, x, {min, max});
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  MG_CHECK(std::isfinite(negative_slope), "{}: negative_slope must be finite, got {}", Op::LeakyRelu, negative_slope);
  return pointwise<functors::LeakyRelu>(Op::LeakyRelu, UnaryOp::LeakyRelu, x, {negative_slope});
}

Tensor add(const Tensor& x_in, double scalar) {
  const OpSpan span(Op::Add);
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
  const OpSpan span(Op::Mul);
  const Tensor x = autocast_input(Op::Mul, x_in);
  Tensor y = unary_forward(UnaryOp::MulScalar, Op::Mul, x, {scalar});
  record(Op::Mul, {x}, y, [scalar](const Tensor& g, const auto&) { return Grads{mul(g, scalar)}; });
  return y;
}

Tensor div(const Tensor& x_in, double scalar) {
  const OpSpan span(Op::Div);
  const Tensor x = autocast_input(Op::Div, x_in);
  Tensor y = unary_forward(UnaryOp::DivScalar, Op::Div, x, {scalar});
  record(Op::Div, {x}, y, [scalar](const Tensor& g, const auto&) { return Grads{div(g, scalar)}; });
  return y;
}

Tensor rdiv(double scalar, const Tensor& x_in) {
  const OpSpan span(Op::RDiv);
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
  const OpSpan span(Op::Pow);
  const Tensor x = autocast_input(Op::Pow, x_in);  // dy = p x^(p-1) dx: saves x
  Tensor y = unary_forward(UnaryOp::PowScalar, Op::Pow, x, {exponent});
  record(Op::Pow, {x}, y, [x = Saved(x), exponent](const Tensor& g, const auto&) {
    return Grads{unit_grad(UnaryOp::PowScalar, g, x, {exponent})};
  });
  return y;
}

}  // namespace mg
