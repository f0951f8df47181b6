// CPU elementwise kernels: out = f(inputs...) with NumPy broadcasting, for one, two or three inputs.
//
// How the loop works (one function, elementwise_loop, serves every op):
//   1. Plan: each input gets a stride per output dim (0 where it is broadcast). Neighbouring dims
//      that are contiguous for every operand are merged, so same-shape ops become one flat loop
//      and a bias add becomes [rows] x [cols] with the bias's row stride 0.
//   2. The innermost dim is walked in chunks of kChunk elements. Each input chunk is converted to
//      the compute type C (f32, or f64 for f64) into a small buffer (a broadcast input is filled
//      with its single value), the functor runs over plain arrays, which the compiler vectorises,
//      and the result chunk is rounded to out's dtype on store.
// Run its tests: build/tests/test_ops_elementwise.
#include <array>
#include <cassert>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/functors.h"

namespace mg::kernels::cpu {

namespace {

constexpr std::int64_t kChunk = 256;  // elements per buffer: 4 buffers of f64 stay within 8 KiB of L1

template <std::size_t N>
struct LoopPlan {
  std::vector<std::int64_t> sizes;                        // merged dims, outermost first
  std::vector<std::array<std::int64_t, N + 1>> strides;   // per dim: out's stride, then each input's
};

template <std::size_t N>
LoopPlan<N> make_plan(const Shape& out_shape, const std::array<const Tensor*, N>& inputs) {
  const std::size_t rank = out_shape.size();
  // Element strides per operand for every output dim (right-aligned broadcasting).
  std::vector<std::array<std::int64_t, N + 1>> full(rank);
  for (std::size_t k = 0; k <= N; ++k) {
    const Shape& shape = k == 0 ? out_shape : inputs[k - 1]->shape();
    std::int64_t stride = 1;
    for (std::size_t i = 0; i < rank; ++i) {
      std::size_t d = rank - 1 - i;
      bool present = i < shape.size();
      std::int64_t size = present ? shape[shape.size() - 1 - i] : 1;
      full[d][k] = (size == 1) ? 0 : stride;
      stride *= size;
    }
  }
  LoopPlan<N> plan;
  for (std::size_t d = 0; d < rank; ++d) {
    if (out_shape[d] == 1) continue;  // a size-1 dim moves nothing
    if (!plan.sizes.empty()) {
      // Merge into the previous dim when, for every operand, stepping the previous dim once equals
      // stepping this one across its whole length.
      auto& prev = plan.strides.back();
      bool mergeable = true;
      for (std::size_t k = 0; k <= N; ++k) mergeable &= prev[k] == full[d][k] * out_shape[d];
      if (mergeable) {
        plan.sizes.back() *= out_shape[d];
        prev = full[d];
        continue;
      }
    }
    plan.sizes.push_back(out_shape[d]);
    plan.strides.push_back(full[d]);
  }
  if (plan.sizes.empty()) {  // a scalar, or all sizes 1
    plan.sizes.push_back(1);
    plan.strides.push_back({});
  }
  return plan;
}

// Converts `count` elements of an operand into the compute-type buffer. A broadcast operand
// (stride 0) repeats its single element.
template <class C>
void load_chunk(const char* base, DType dtype, std::int64_t stride, std::int64_t count, C* buffer) {
  if (stride == 0) {
    C value;
    convert(base, dtype, &value, dtype_of<C>(), 1);
    for (std::int64_t i = 0; i < count; ++i) buffer[i] = value;
  } else {
    convert(base, dtype, buffer, dtype_of<C>(), count);
  }
}

// out = f(inputs...) elementwise; C is the compute type.
template <class C, std::size_t N, class F>
void elementwise_loop(Tensor& out, const std::array<const Tensor*, N>& inputs, const F& f) {
  if (out.numel() == 0) return;
  LoopPlan<N> plan = make_plan(out.shape(), inputs);
  const std::size_t rank = plan.sizes.size();
  const std::int64_t inner = plan.sizes.back();
  const auto& inner_stride = plan.strides.back();

  std::array<char*, N + 1> base{};
  std::array<std::size_t, N + 1> element_size{};
  base[0] = static_cast<char*>(out.data_ptr());
  element_size[0] = dtype_size(out.dtype());
  for (std::size_t k = 0; k < N; ++k) {
    base[k + 1] = static_cast<char*>(inputs[k]->data_ptr());
    element_size[k + 1] = dtype_size(inputs[k]->dtype());
  }

  alignas(64) C in[N][kChunk];
  alignas(64) C result[kChunk];
  std::vector<std::int64_t> index(rank, 0);  // odometer over the outer dims
  std::array<std::int64_t, N + 1> offset{};  // element offset of the current row per operand
  const std::int64_t rows = out.numel() / inner;
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int64_t start = 0; start < inner; start += kChunk) {
      std::int64_t count = std::min(kChunk, inner - start);
      // An operand already in the compute type and contiguous is read (or, for out, written) in
      // place; the others go through the buffers.
      std::array<const C*, N> x{};
      for (std::size_t k = 0; k < N; ++k) {
        const char* ptr = base[k + 1] + (offset[k + 1] + start * inner_stride[k + 1]) * element_size[k + 1];
        if (inputs[k]->dtype() == dtype_of<C>() && inner_stride[k + 1] == 1) {
          x[k] = reinterpret_cast<const C*>(ptr);
        } else {
          load_chunk<C>(ptr, inputs[k]->dtype(), inner_stride[k + 1], count, in[k]);
          x[k] = in[k];
        }
      }
      char* target = base[0] + (offset[0] + start) * element_size[0];
      C* y = out.dtype() == dtype_of<C>() ? reinterpret_cast<C*>(target) : result;
      for (std::int64_t i = 0; i < count; ++i) {
        if constexpr (N == 1) y[i] = f(x[0][i]);
        else if constexpr (N == 2) y[i] = f(x[0][i], x[1][i]);
        else y[i] = f(x[0][i], x[1][i], x[2][i]);
      }
      if (y == result) convert(result, dtype_of<C>(), target, out.dtype(), count);
    }
    // Advance the odometer over the outer dims (all but the last).
    for (std::size_t d = rank - 1; d-- > 0;) {
      for (std::size_t k = 0; k <= N; ++k) offset[k] += plan.strides[d][k];
      if (++index[d] < plan.sizes[d]) break;
      for (std::size_t k = 0; k <= N; ++k) offset[k] -= plan.strides[d][k] * plan.sizes[d];
      index[d] = 0;
    }
  }
}

// Runs the loop with the compute type of out's dtype.
template <std::size_t N, class F>
void run(Tensor& out, const std::array<const Tensor*, N>& inputs, const F& f, const char* op) {
  for (const Tensor* input : inputs) assert(input->device() == out.device() && input->dim() <= out.dim());
  visit_floating(out.dtype(), op, [&](auto zero) {
    using C = compute_t<decltype(zero)>;
    elementwise_loop<C>(out, inputs, f);
  });
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, Tensor& out, Scalars s) {
  namespace fn = functors;
  std::array<const Tensor*, 1> in{&x};
  switch (op) {
    case UnaryOp::Copy: return run(out, in, fn::Copy{}, "copy");
    case UnaryOp::Neg: return run(out, in, fn::Neg{}, "neg");
    case UnaryOp::Exp: return run(out, in, fn::Exp{}, "exp");
    case UnaryOp::Log: return run(out, in, fn::Log{}, "log");
    case UnaryOp::Sqrt: return run(out, in, fn::Sqrt{}, "sqrt");
    case UnaryOp::Abs: return run(out, in, fn::Abs{}, "abs");
    case UnaryOp::Tanh: return run(out, in, fn::Tanh{}, "tanh");
    case UnaryOp::Sigmoid: return run(out, in, fn::Sigmoid{}, "sigmoid");
    case UnaryOp::Relu: return run(out, in, fn::Relu{}, "relu");
    case UnaryOp::Gelu: return run(out, in, fn::Gelu{}, "gelu");
    case UnaryOp::AddScalar: return run(out, in, fn::AddScalar{s.a}, "add");
    case UnaryOp::MulScalar: return run(out, in, fn::MulScalar{s.a}, "mul");
    case UnaryOp::DivScalar: return run(out, in, fn::DivScalar{s.a}, "div");
    case UnaryOp::PowScalar: return run(out, in, fn::PowScalar{s.a}, "pow");
    case UnaryOp::RDivScalar: return run(out, in, fn::RDivScalar{s.a}, "div");
    case UnaryOp::Clamp: return run(out, in, fn::Clamp{s.a, s.b}, "clamp");
  }
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out, Scalars s) {
  namespace fn = functors;
  std::array<const Tensor*, 2> in{&a, &b};
  switch (op) {
    case BinaryOp::Add: return run(out, in, fn::Add{}, "add");
    case BinaryOp::Sub: return run(out, in, fn::Sub{}, "sub");
    case BinaryOp::Mul: return run(out, in, fn::Mul{}, "mul");
    case BinaryOp::Div: return run(out, in, fn::Div{}, "div");
    case BinaryOp::Pow: return run(out, in, fn::Pow{}, "pow");
    case BinaryOp::ReluGrad: return run(out, in, fn::ReluGrad{}, "relu backward");
    case BinaryOp::AbsGrad: return run(out, in, fn::AbsGrad{}, "abs backward");
    case BinaryOp::TanhGrad: return run(out, in, fn::TanhGrad{}, "tanh backward");
    case BinaryOp::SigmoidGrad: return run(out, in, fn::SigmoidGrad{}, "sigmoid backward");
    case BinaryOp::SqrtGrad: return run(out, in, fn::SqrtGrad{}, "sqrt backward");
    case BinaryOp::GeluGrad: return run(out, in, fn::GeluGrad{}, "gelu backward");
    case BinaryOp::ClampGrad: return run(out, in, fn::ClampGrad{s.a, s.b}, "clamp backward");
    case BinaryOp::PowScalarGrad: return run(out, in, fn::PowScalarGrad{s.a}, "pow backward");
  }
}

void ternary(TernaryOp op, const Tensor& x, const Tensor& y, const Tensor& z, Tensor& out) {
  namespace fn = functors;
  std::array<const Tensor*, 3> in{&x, &y, &z};
  switch (op) {
    case TernaryOp::Where: return run(out, in, fn::Where{}, "where");
    case TernaryOp::DivisorGrad: return run(out, in, fn::DivisorGrad{}, "div backward");
    case TernaryOp::PowBaseGrad: return run(out, in, fn::PowBaseGrad{}, "pow backward");
    case TernaryOp::PowExponentGrad: return run(out, in, fn::PowExponentGrad{}, "pow backward");
  }
}

}  // namespace mg::kernels::cpu
