// broadcast_to and sum_to: each is the other's backward.
//
// broadcast_to repeats size-1 (and missing leading) dims; sum_to adds the repeated copies back
// together. Every broadcasting op uses sum_to in its backward to give each input a gradient of
// its own shape.
#include "autograd/check.h"
#include "autograd/ops.h"
#include "kernels/copy.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"

namespace mg {

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  constexpr Op op = Op::BroadcastTo;
  const OpSpan span(op);
  check::floating(op, x);
  check_shape(shape, qualified_name(op));
  MG_CHECK(broadcast_shapes(x.shape(), shape, qualified_name(op)) == shape, "{}: shape {} cannot be broadcast to {}",
           op, x.shape(), shape);
  if (x.shape() == shape) return x;
  Tensor out = Tensor::empty(shape, check::like(x));
  kernels::unary(kernels::UnaryOp::Copy, x, out);
  record(op, {x}, out, [x_shape = x.shape()](const Tensor& g, const auto&) { return Grads{sum_to(g, x_shape)}; });
  return out;
}

// Sums dim by dim in f32 (f64 for f64) and rounds once at the end, so an f16 gradient summed over
// a batch of 512 is not rounded 512 times.
Tensor sum_to(const Tensor& x, const Shape& shape) {
  constexpr Op op = Op::SumTo;
  const OpSpan span(op);
  check::floating(op, x);
  MG_CHECK(shape.size() <= x.shape().size() && broadcast_shapes(shape, x.shape(), qualified_name(op)) == x.shape(),
           "{}: shape {} cannot be summed to {}: it must broadcast to the tensor's shape", op, x.shape(), shape);
  if (x.shape() == shape) return x;
  const DType accumulate = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const std::size_t lead = x.shape().size() - shape.size();

  // First the leading dims that `shape` lacks: [1, their product, the rest].
  Shape current(x.shape().begin() + static_cast<std::ptrdiff_t>(lead), x.shape().end());
  Tensor sum = Tensor::empty(current, {.dtype = accumulate, .device = x.device()});
  kernels::reduce(kernels::ReduceOp::Sum, x, {1, product(x.shape(), 0, lead), numel(current)}, sum);
  // Then every dim that is 1 in `shape` but not in the tensor.
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1 || current[d] == 1) continue;
    kernels::ReduceShape view{product(current, 0, d), current[d], product(current, d + 1, current.size())};
    current[d] = 1;
    Tensor reduced = Tensor::empty(current, {.dtype = accumulate, .device = x.device()});
    kernels::reduce(kernels::ReduceOp::Sum, sum, view, reduced);
    sum = reduced;
  }
  Tensor out = Tensor::empty(shape, check::like(x));
  kernels::cast(sum, out);
  record(op, {x}, out, [x_shape = x.shape()](const Tensor& g, const auto&) { return Grads{broadcast_to(g, x_shape)}; });
  return out;
}

}  // namespace mg
