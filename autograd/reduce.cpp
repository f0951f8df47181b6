// Reductions: sum, mean, max (and argmax, max_with_indices), over everything or along one dim.
// They accumulate in f32 (f64 for f64) and round once into the input's dtype (kernels/reduce.h).
#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "kernels/index.h"
#include "kernels/reduce.h"

namespace mg {

namespace {

using kernels::ReduceOp;
using kernels::ReduceShape;

// How a reduction along `dim` views the input, and the shape of its result.
struct Plan {
  ReduceShape view;
  Shape out_shape;  // as requested (keepdim or not)
  Shape kept_shape;  // with the reduced dim kept as 1: what backward broadcasts from
};

Plan plan_all(const Tensor& x) { return {{1, x.numel(), 1}, {}, Shape(x.shape().size(), 1)}; }

Plan plan_dim(const Tensor& x, std::int64_t dim, bool keepdim, Op op) {
  const auto d = static_cast<std::size_t>(normalize_dim(dim, x.shape().size(), qualified_name(op)));
  Plan plan{{product(x.shape(), 0, d), x.shape()[d], product(x.shape(), d + 1, x.shape().size())},
            x.shape(),
            x.shape()};
  plan.kept_shape[d] = 1;
  if (keepdim)
    plan.out_shape[d] = 1;
  else
    plan.out_shape.erase(plan.out_shape.begin() + static_cast<std::ptrdiff_t>(d));
  return plan;
}

Tensor sum_or_mean(const Tensor& x_in, const Plan& plan, ReduceOp kind, Op op) {
  const OpSpan span(op);
  const Tensor x = autocast_input(op, x_in);
  Tensor out = Tensor::empty(plan.out_shape, check::like(x));
  kernels::reduce(kind, x, plan.view, out);
  const double scale = kind == ReduceOp::Mean ? 1.0 / static_cast<double>(plan.view.n) : 1.0;
  // d sum / dx = 1 and d mean / dx = 1/n for every element that was reduced.
  record(op, {x}, out, [x_shape = x.shape(), kept = plan.kept_shape, scale](const Tensor& g, const auto&) {
    Tensor spread = broadcast_to(reshape(g, kept), x_shape);
    return Grads{scale == 1.0 ? spread : mul(spread, scale)};
  });
  return out;
}

// The gradient of a max goes to the position of the first maximum (saved as i32 indices).
ValuesIndices max_along(const Tensor& x_in, const Plan& plan, Op op) {
  const OpSpan span(op);
  const Tensor x = autocast_input(op, x_in);
  Tensor out = Tensor::empty(plan.out_shape, check::like(x));
  Tensor indices = Tensor::empty(plan.out_shape, {.dtype = DType::I32, .device = x.device()});
  kernels::reduce(ReduceOp::Max, x, plan.view, out, &indices);
  record(op, {x}, out, [x_shape = x.shape(), view = plan.view, indices = Saved(indices)](const Tensor& g, const auto&) {
    Tensor dx = Tensor::empty(x_shape, check::like(g));
    kernels::scatter_along_dim(g, indices, view, dx);
    return Grads{dx};
  });
  return {out, indices};
}

// The max of every element. Its gradient is shared evenly by the elements equal to it (by the NaNs,
// when it is NaN), as PyTorch's x.max() shares it: saves x and the max.
Tensor max_of_all(const Tensor& x_in) {
  const OpSpan span(Op::Max);
  const Tensor x = autocast_input(Op::Max, x_in);
  Tensor out = Tensor::empty({}, check::like(x));
  kernels::reduce(ReduceOp::Max, x, plan_all(x).view, out);
  record(Op::Max, {x}, out, [x = Saved(x), out = Saved(out)](const Tensor& g, const auto&) {
    Tensor dx = Tensor::empty(x.get().shape(), check::like(g));
    kernels::share_among_ties(g, x, out, dx);
    return Grads{dx};
  });
  return out;
}

Tensor argmax_along(const Tensor& x, const Plan& plan) {
  const OpSpan span(Op::Argmax);
  Tensor values = Tensor::empty(plan.out_shape, check::like(x));
  Tensor indices = Tensor::empty(plan.out_shape, {.dtype = DType::I32, .device = x.device()});
  kernels::reduce(ReduceOp::Max, x, plan.view, values, &indices);
  return indices;
}

}  // namespace

Tensor sum(const Tensor& x) {
  check::floating(Op::Sum, x);
  return sum_or_mean(x, plan_all(x), ReduceOp::Sum, Op::Sum);
}

Tensor sum(const Tensor& x, std::int64_t dim, bool keepdim) {
  check::floating(Op::Sum, x);
  return sum_or_mean(x, plan_dim(x, dim, keepdim, Op::Sum), ReduceOp::Sum, Op::Sum);
}

Tensor mean(const Tensor& x) {
  check::floating(Op::Mean, x);
  check::not_empty(Op::Mean, x);
  return sum_or_mean(x, plan_all(x), ReduceOp::Mean, Op::Mean);
}

Tensor mean(const Tensor& x, std::int64_t dim, bool keepdim) {
  check::floating(Op::Mean, x);
  Plan plan = plan_dim(x, dim, keepdim, Op::Mean);
  MG_CHECK(plan.view.n > 0, "{}: dim {} of shape {} is empty; the mean of nothing is undefined", Op::Mean, dim,
           x.shape());
  return sum_or_mean(x, plan, ReduceOp::Mean, Op::Mean);
}

Tensor max(const Tensor& x) {
  check::floating(Op::Max, x);
  check::not_empty(Op::Max, x);
  return max_of_all(x);
}

Tensor max(const Tensor& x, std::int64_t dim, bool keepdim) { return max_with_indices(x, dim, keepdim).values; }

ValuesIndices max_with_indices(const Tensor& x, std::int64_t dim, bool keepdim) {
  check::floating(Op::Max, x);
  Plan plan = plan_dim(x, dim, keepdim, Op::Max);
  MG_CHECK(plan.view.n > 0, "{}: dim {} of shape {} is empty; the max of nothing is undefined", Op::Max, dim,
           x.shape());
  return max_along(x, plan, Op::Max);
}

Tensor argmax(const Tensor& x) {
  check::floating(Op::Argmax, x);
  check::not_empty(Op::Argmax, x);
  return argmax_along(x, plan_all(x));
}

Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim) {
  check::floating(Op::Argmax, x);
  Plan plan = plan_dim(x, dim, keepdim, Op::Argmax);
  MG_CHECK(plan.view.n > 0, "{}: dim {} of shape {} is empty", Op::Argmax, dim, x.shape());
  return argmax_along(x, plan);
}

}  // namespace mg
