// Which functor (kernels/functors.h) computes each elementwise op: the one table from the op enums
// of kernels/elementwise.h to the math, shared by the CPU loop and the CUDA kernels.
//
//   visit_unary(UnaryOp::Exp, scalars, [&](auto functor, const char* name) { ... functor(x) ... });
//
// calls the lambda with the functor (carrying the op's scalars) and the op's name for messages.
#pragma once

#include "kernels/elementwise.h"
#include "kernels/functors.h"

namespace mg::kernels {

template <class Fn>
void visit_unary(UnaryOp op, Scalars s, Fn&& fn) {
  namespace f = functors;
  switch (op) {
    case UnaryOp::Copy: return fn(f::Copy{}, "copy");
    case UnaryOp::Neg: return fn(f::Neg{}, "neg");
    case UnaryOp::Exp: return fn(f::Exp{}, "exp");
    case UnaryOp::Log: return fn(f::Log{}, "log");
    case UnaryOp::Sqrt: return fn(f::Sqrt{}, "sqrt");
    case UnaryOp::Abs: return fn(f::Abs{}, "abs");
    case UnaryOp::Tanh: return fn(f::Tanh{}, "tanh");
    case UnaryOp::Sigmoid: return fn(f::Sigmoid{}, "sigmoid");
    case UnaryOp::Relu: return fn(f::Relu{}, "relu");
    case UnaryOp::Gelu: return fn(f::Gelu{}, "gelu");
    case UnaryOp::Silu: return fn(f::Silu{}, "silu");
    case UnaryOp::AddScalar: return fn(f::AddScalar{s.a}, "add");
    case UnaryOp::MulScalar: return fn(f::MulScalar{s.a}, "mul");
    case UnaryOp::DivScalar: return fn(f::DivScalar{s.a}, "div");
    case UnaryOp::PowScalar: return fn(f::PowScalar{s.a}, "pow");
    case UnaryOp::RDivScalar: return fn(f::RDivScalar{s.a}, "div");
    case UnaryOp::Clamp: return fn(f::Clamp{s.a, s.b}, "clamp");
    case UnaryOp::LeakyRelu: return fn(f::LeakyRelu{s.a}, "leaky_relu");
  }
}

template <class Fn>
void visit_binary(BinaryOp op, Scalars s, Fn&& fn) {
  namespace f = functors;
  switch (op) {
    case BinaryOp::Add: return fn(f::Add{}, "add");
    case BinaryOp::Sub: return fn(f::Sub{}, "sub");
    case BinaryOp::Mul: return fn(f::Mul{}, "mul");
    case BinaryOp::Div: return fn(f::Div{}, "div");
    case BinaryOp::Pow: return fn(f::Pow{}, "pow");
    case BinaryOp::Maximum: return fn(f::Maximum{}, "maximum");
    case BinaryOp::Minimum: return fn(f::Minimum{}, "minimum");
    case BinaryOp::ReluGrad: return fn(f::ReluGrad{}, "relu backward");
    case BinaryOp::AbsGrad: return fn(f::AbsGrad{}, "abs backward");
    case BinaryOp::TanhGrad: return fn(f::TanhGrad{}, "tanh backward");
    case BinaryOp::SigmoidGrad: return fn(f::SigmoidGrad{}, "sigmoid backward");
    case BinaryOp::SqrtGrad: return fn(f::SqrtGrad{}, "sqrt backward");
    case BinaryOp::GeluGrad: return fn(f::GeluGrad{}, "gelu backward");
    case BinaryOp::SiluGrad: return fn(f::SiluGrad{}, "silu backward");
    case BinaryOp::ClampGrad: return fn(f::ClampGrad{s.a, s.b}, "clamp backward");
    case BinaryOp::PowScalarGrad: return fn(f::PowScalarGrad{s.a}, "pow backward");
    case BinaryOp::LeakyReluGrad: return fn(f::LeakyReluGrad{s.a}, "leaky_relu backward");
  }
}

template <class Fn>
void visit_ternary(TernaryOp op, Fn&& fn) {
  namespace f = functors;
  switch (op) {
    case TernaryOp::Where: return fn(f::Where{}, "where");
    case TernaryOp::DivisorGrad: return fn(f::DivisorGrad{}, "div backward");
    case TernaryOp::PowBaseGrad: return fn(f::PowBaseGrad{}, "pow backward");
    case TernaryOp::PowExponentGrad: return fn(f::PowExponentGrad{}, "pow backward");
    case TernaryOp::MaximumGrad: return fn(f::MaximumGrad{}, "maximum backward");
    case TernaryOp::MinimumGrad: return fn(f::MinimumGrad{}, "minimum backward");
  }
}

}  // namespace mg::kernels
