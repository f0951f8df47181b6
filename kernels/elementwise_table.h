// Which functor (kernels/pointwise.h) computes each elementwise op: the one table from the op enums
// of kernels/elementwise.h to the math, shared by the CPU loop and the CUDA kernels. The unary rows
// are made from the lists MG_POINTWISE_OPS and MG_SCALAR_OPS, so a new unit needs no line here.
//
//   visit_unary(UnaryOp::Exp, scalars, [&](auto functor, const char* name) { ... functor(x) ... });
//
// calls the lambda with the functor (carrying the op's scalars) and the op's name for messages.
#pragma once

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/pointwise.h"

namespace mg::kernels {

// A unit with its scalars: Clamp{min, max}, LeakyRelu{slope}, MulScalar{a}, Exp{}.
template <class Unit>
constexpr Unit with_scalars(Scalars s) {
  if constexpr (requires { Unit{s.a, s.b}; })
    return Unit{s.a, s.b};
  else if constexpr (requires { Unit{s.a}; })
    return Unit{s.a};
  else
    return Unit{};
}

template <class Fn>
void visit_unary(UnaryOp op, Scalars s, Fn&& fn) {
  switch (op) {
#define MG_UNARY_CASE(Unit, name, ...) \
  case UnaryOp::Unit: \
    return fn(with_scalars<functors::Unit>(s), #name);
    MG_POINTWISE_OPS(MG_UNARY_CASE)
    MG_POINTWISE_OPS_WITH_PARAMETERS(MG_UNARY_CASE)
    MG_SCALAR_OPS(MG_UNARY_CASE)
#undef MG_UNARY_CASE
  }
}

// A unit's backward as a functor of (g, saved), functors::Backward<functors::Silu>, named "silu
// backward". A UnaryOp whose unit has no `grad` (Copy, AddScalar, ...) is an error.
template <class Unit, class Fn>
void visit_backward(Unit unit, const char* name, Fn&& fn) {
  if constexpr (requires(float g) { unit.grad(g, g); }) {
    fn(functors::Backward<Unit>{unit}, name);
  } else {
    throw Error(fmt::format("mg::kernels::unary_grad: {} has no backward formula of (g, saved)", name));
  }
}

template <class Fn>
void visit_unary_grad(UnaryOp op, Scalars s, Fn&& fn) {
  switch (op) {
#define MG_UNARY_GRAD_CASE(Unit, name, ...) \
  case UnaryOp::Unit: \
    return visit_backward(with_scalars<functors::Unit>(s), #name " backward", fn);
    MG_POINTWISE_OPS(MG_UNARY_GRAD_CASE)
    MG_POINTWISE_OPS_WITH_PARAMETERS(MG_UNARY_GRAD_CASE)
    MG_SCALAR_OPS(MG_UNARY_GRAD_CASE)
#undef MG_UNARY_GRAD_CASE
  }
}

template <class Fn>
void visit_binary(BinaryOp op, Fn&& fn) {
  namespace f = functors;
  switch (op) {
    case BinaryOp::Add:
      return fn(f::Add{}, "add");
    case BinaryOp::Sub:
      return fn(f::Sub{}, "sub");
    case BinaryOp::Mul:
      return fn(f::Mul{}, "mul");
    case BinaryOp::Div:
      return fn(f::Div{}, "div");
    case BinaryOp::Pow:
      return fn(f::Pow{}, "pow");
    case BinaryOp::Maximum:
      return fn(f::Maximum{}, "maximum");
    case BinaryOp::Minimum:
      return fn(f::Minimum{}, "minimum");
  }
}

template <class Fn>
void visit_ternary(TernaryOp op, Fn&& fn) {
  namespace f = functors;
  switch (op) {
    case TernaryOp::Where:
      return fn(f::Where{}, "where");
    case TernaryOp::DivisorGrad:
      return fn(f::DivisorGrad{}, "div backward");
    case TernaryOp::PowBaseGrad:
      return fn(f::PowBaseGrad{}, "pow backward");
    case TernaryOp::PowExponentGrad:
      return fn(f::PowExponentGrad{}, "pow backward");
    case TernaryOp::MaximumGrad:
      return fn(f::MaximumGrad{}, "maximum backward");
    case TernaryOp::MinimumGrad:
      return fn(f::MinimumGrad{}, "minimum backward");
  }
}

}  // namespace mg::kernels
