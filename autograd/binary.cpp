// Elementwise ops of two tensors, with NumPy broadcasting, forward and backward side by side:
// arithmetic, pow, maximum / minimum, where.
//
// Broadcasting in backward: an input that was repeated to the output's shape receives the sum of
// the gradient over the repeated dims (sum_to), so every gradient has its input's shape.
#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "core/factory.h"
#include "kernels/elementwise.h"

namespace mg {

namespace {

using kernels::BinaryOp;
using kernels::TernaryOp;

// Checks two operands and computes op(a, b) into a new tensor of the broadcast shape.
Tensor binary_forward(BinaryOp kind, Op op, const Tensor& a, const Tensor& b) {
  check::same_device(op, {a, b});
  check::floating(op, a);
  check::floating(op, b);
  check::same_dtype(op, a, b);
  Tensor out = Tensor::empty(broadcast_shapes(a.shape(), b.shape(), qualified_name(op)), check::like(a));
  kernels::binary(kind, a, b, out);
  return out;
}

// A fused backward formula of three tensors (kernels/pointwise.h), computed at g's shape and rounded once.
Tensor ternary_grad(TernaryOp kind, const Tensor& g, const Tensor& y, const Tensor& z) {
  Tensor out = Tensor::empty(g.shape(), check::like(g));
  kernels::ternary(kind, g, y, z, out);
  return out;
}

// The gradient for input i, reduced to its shape, or nothing when input i needs none.
Tensor grad_for(const std::vector<bool>& needs_grad, std::size_t i, const Shape& shape, auto&& compute) {
  return needs_grad[i] ? sum_to(compute(), shape) : Tensor();
}

// Each input gets the share of g its *Grad functor gives: all of it where it was picked, half on a tie
// (PyTorch's rule). The functor is symmetric: b's share is the same formula with a and b swapped.
// Saves both inputs.
Tensor pick_larger_or_smaller(Op op, BinaryOp kind, TernaryOp grad_kind, const Tensor& a_in, const Tensor& b_in) {
  const OpSpan span(op);
  auto [a, b] = autocast_inputs(op, a_in, b_in);
  Tensor out = binary_forward(kind, op, a, b);
  record(op, {a, b}, out, [a = Saved(a), b = Saved(b), grad_kind](const Tensor& g, const auto& needs) {
    return Grads{grad_for(needs, 0, a.get().shape(), [&] { return ternary_grad(grad_kind, g, a, b); }),
                 grad_for(needs, 1, b.get().shape(), [&] { return ternary_grad(grad_kind, g, b, a); })};
  });
  return out;
}

}  // namespace

Tensor add(const Tensor& a_in, const Tensor& b_in) {
  const OpSpan span(Op::Add);
  auto [a, b] = autocast_inputs(Op::Add, a_in, b_in);
  Tensor out = binary_forward(BinaryOp::Add, Op::Add, a, b);
  record(Op::Add, {a, b}, out, [a_shape = a.shape(), b_shape = b.shape()](const Tensor& g, const auto& needs) {
    return Grads{grad_for(needs, 0, a_shape, [&] { return g; }), grad_for(needs, 1, b_shape, [&] { return g; })};
  });
  return out;
}

Tensor sub(const Tensor& a_in, const Tensor& b_in) {
  const OpSpan span(Op::Sub);
  auto [a, b] = autocast_inputs(Op::Sub, a_in, b_in);
  Tensor out = binary_forward(BinaryOp::Sub, Op::Sub, a, b);
  record(Op::Sub, {a, b}, out, [a_shape = a.shape(), b_shape = b.shape()](const Tensor& g, const auto& needs) {
    return Grads{grad_for(needs, 0, a_shape, [&] { return g; }), grad_for(needs, 1, b_shape, [&] { return neg(g); })};
  });
  return out;
}

// d(a*b) = b da + a db: saves both inputs.
Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  const OpSpan span(Op::Mul);
  auto [a, b] = autocast_inputs(Op::Mul, a_in, b_in);
  Tensor out = binary_forward(BinaryOp::Mul, Op::Mul, a, b);
  record(Op::Mul, {a, b}, out, [a = Saved(a), b = Saved(b)](const Tensor& g, const auto& needs) {
    return Grads{grad_for(needs, 0, a.get().shape(), [&] { return mul(g, b); }),
                 grad_for(needs, 1, b.get().shape(), [&] { return mul(g, a); })};
  });
  return out;
}

// d(a/b) = da / b - (a/b) db / b: saves b and the output.
Tensor div(const Tensor& a_in, const Tensor& b_in) {
  const OpSpan span(Op::Div);
  auto [a, b] = autocast_inputs(Op::Div, a_in, b_in);
  Tensor out = binary_forward(BinaryOp::Div, Op::Div, a, b);
  record(Op::Div, {a, b}, out,
         [a_shape = a.shape(), b = Saved(b), out = Saved(out)](const Tensor& g, const auto& needs) {
           return Grads{grad_for(needs, 0, a_shape, [&] { return div(g, b); }),
                        grad_for(needs, 1, b.get().shape(),
                                 [&] { return ternary_grad(TernaryOp::DivisorGrad, g, out, b); })};
         });
  return out;
}

// d(b^e) = e b^(e-1) db + b^e log(b) de: saves both inputs.
Tensor pow(const Tensor& base_in, const Tensor& exponent_in) {
  const OpSpan span(Op::Pow);
  auto [base, exponent] = autocast_inputs(Op::Pow, base_in, exponent_in);
  Tensor out = binary_forward(BinaryOp::Pow, Op::Pow, base, exponent);
  record(Op::Pow, {base, exponent}, out,
         [base = Saved(base), exponent = Saved(exponent)](const Tensor& g, const auto& needs) {
           return Grads{grad_for(needs, 0, base.get().shape(),
                                 [&] { return ternary_grad(TernaryOp::PowBaseGrad, g, base, exponent); }),
                        grad_for(needs, 1, exponent.get().shape(),
                                 [&] { return ternary_grad(TernaryOp::PowExponentGrad, g, base, exponent); })};
         });
  return out;
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  return pick_larger_or_smaller(Op::Maximum, BinaryOp::Maximum, TernaryOp::MaximumGrad, a, b);
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  return pick_larger_or_smaller(Op::Minimum, BinaryOp::Minimum, TernaryOp::MinimumGrad, a, b);
}

// The gradient flows to a where the mask selects a, to b elsewhere.
Tensor where(const Tensor& mask_in, const Tensor& a_in, const Tensor& b_in) {
  const OpSpan span(Op::Where);
  auto [a, b] = autocast_inputs(Op::Where, a_in, b_in);  // the mask selects: it is never autocast
  constexpr Op op = Op::Where;
  // A bool mask (PyTorch's, from a comparison or a file) is read as i32, 0 or 1: the kernel's own.
  const Tensor mask = mask_in.defined() && mask_in.dtype() == DType::BOOL ? cast(mask_in, DType::I32) : mask_in;
  check::same_device(op, {mask, a, b});
  check::floating(op, a);
  check::same_dtype(op, a, b);
  // Any mask the kernel reads exactly: i32 (bool as i32), or floating (f64 only with f64 values, whose compute type it is).
  MG_CHECK(mask.dtype() == DType::I32 || (is_floating(mask.dtype()) && !is_coded(mask.dtype()) &&
                                          (mask.dtype() != DType::F64 || a.dtype() == DType::F64)),
           "{}: the mask must be i32, bool or floating (f64 only with f64 values), got {} with {} values", op,
           mask.dtype(), a.dtype());
  Shape shape = broadcast_shapes(broadcast_shapes(mask.shape(), a.shape(), qualified_name(op)), b.shape(),
                                 qualified_name(op));
  Tensor out = Tensor::empty(shape, check::like(a));
  kernels::ternary(TernaryOp::Where, mask, a, b, out);
  record(op, {mask, a, b}, out,
         [mask = Saved(mask), a_shape = a.shape(), b_shape = b.shape()](const Tensor& g, const auto& needs) {
           Tensor zero = zeros({}, check::like(g));
           return Grads{Tensor(), grad_for(needs, 1, a_shape, [&] { return where(mask, g, zero); }),
                        grad_for(needs, 2, b_shape, [&] { return where(mask, zero, g); })};
         });
  return out;
}

}  // namespace mg
