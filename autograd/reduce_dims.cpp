// Reductions made of other ops: sum and mean over several dims, logsumexp, var and std, and min /
// argmin as the mirror images of max / argmax. Each is built from the recorded ops of reduce.cpp and
// the elementwise ops, so its backward is theirs; std alone records a node, for its gradient at a
// constant line. Math in f32 (f64 for f64), rounded once into the input's dtype.
#include <algorithm>
#include <cmath>

#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "core/factory.h"

namespace mg {

namespace {

// The dims a reduction over `dims` reduces, normalized and in increasing order; every dim when
// `dims` is empty (PyTorch's dim=[]).
std::vector<std::size_t> reduced_dims(const Tensor& x, const std::vector<std::int64_t>& dims, Op op) {
  const std::size_t rank = x.shape().size();
  std::vector<bool> reduced(rank, dims.empty());
  for (std::int64_t dim : dims) {
    const auto d = static_cast<std::size_t>(normalize_dim(dim, rank, qualified_name(op)));
    MG_CHECK(!reduced[d], "{}: dim {} appears more than once in dims {}", op, dim, dims);
    reduced[d] = true;
  }
  std::vector<std::size_t> out;
  for (std::size_t d = 0; d < rank; ++d)
    if (reduced[d]) out.push_back(d);
  return out;
}

// x's shape with the reduced dims set to 1 (keepdim) or removed.
Shape reduced_shape(const Shape& shape, const std::vector<std::size_t>& reduced, bool keepdim) {
  Shape out;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const bool is_reduced = std::find(reduced.begin(), reduced.end(), d) != reduced.end();
    if (!is_reduced)
      out.push_back(shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

std::int64_t reduced_count(const Shape& shape, const std::vector<std::size_t>& reduced) {
  std::int64_t count = 1;
  for (std::size_t d : reduced) count *= shape[d];
  return count;
}

// x with its reduced dims brought together as one dim `dim`, so that one reduction along it
// accumulates every reduced element at once (and rounds once): a reshape (a view) where the reduced
// dims are adjacent, else a permute (a copy) that moves them to the end. A 0-d x becomes [1].
struct Lines {
  Tensor x;
  std::int64_t dim = 0;
};

Lines bring_together(const Tensor& x, const std::vector<std::size_t>& reduced) {
  const Shape& shape = x.shape();
  if (reduced.empty()) return {reshape(x, {1}), 0};  // a 0-d tensor: one line of one element
  const std::int64_t count = reduced_count(shape, reduced);
  if (reduced.back() - reduced.front() + 1 == reduced.size()) {
    Shape merged(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(reduced.front()));
    merged.push_back(count);
    merged.insert(merged.end(), shape.begin() + static_cast<std::ptrdiff_t>(reduced.back()) + 1, shape.end());
    return {reshape(x, merged), static_cast<std::int64_t>(reduced.front())};
  }
  std::vector<std::int64_t> order;
  Shape merged;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (std::find(reduced.begin(), reduced.end(), d) != reduced.end()) continue;
    order.push_back(static_cast<std::int64_t>(d));
    merged.push_back(shape[d]);
  }
  for (std::size_t d : reduced) order.push_back(static_cast<std::int64_t>(d));
  merged.push_back(count);
  return {reshape(permute(x, order), merged), static_cast<std::int64_t>(merged.size()) - 1};
}

Tensor reshaped(const Tensor& x, const Shape& shape) { return x.shape() == shape ? x : reshape(x, shape); }

DType compute_dtype(const Tensor& x) { return x.dtype() == DType::F64 ? DType::F64 : DType::F32; }

// The one dim of a min / argmin, checked here so that errors name the op the caller used.
void check_dim(Op op, const Tensor& x, std::int64_t dim) {
  check::floating(op, x);
  const auto d = static_cast<std::size_t>(normalize_dim(dim, x.shape().size(), qualified_name(op)));
  MG_CHECK(x.shape()[d] > 0, "{}: dim {} of shape {} is empty; the {} of nothing is undefined", op, dim, x.shape(),
           op_name(op));
}

// x in the compute dtype minus its mean over `reduced` (kept as size-1 dims): var's and std's deviations.
Tensor deviations(const Tensor& x_compute, const std::vector<std::int64_t>& dims) {
  return sub(x_compute, mean(x_compute, dims, true));
}

// The checks shared by var and std; returns the divisor max(0, N - correction).
double variance_divisor(Op op, const Tensor& x, const std::vector<std::size_t>& reduced, double correction) {
  const std::int64_t count = reduced_count(x.shape(), reduced);
  MG_CHECK(count > 0, "{}: the reduced dims of shape {} hold no elements; the variance of nothing is undefined", op,
           x.shape());
  MG_CHECK(std::isfinite(correction), "{}: correction must be finite, got {}", op, correction);
  return std::max(0.0, static_cast<double>(count) - correction);
}

// The dims as a list of every reduced dim (for the one-dim ops below, which take them by number).
std::vector<std::int64_t> as_dims(const std::vector<std::size_t>& reduced) { return {reduced.begin(), reduced.end()}; }

}  // namespace

// ---- min and argmin: -max(-x). Negation is exact, so values, ties (the first) and NaN (the first
// NaN wins) are max's, and so is the gradient.

Tensor min(const Tensor& x) {
  check::floating(Op::Min, x);
  check::not_empty(Op::Min, x);
  return neg(max(neg(x)));
}

Tensor min(const Tensor& x, std::int64_t dim, bool keepdim) {
  check_dim(Op::Min, x, dim);
  return neg(max(neg(x), dim, keepdim));
}

ValuesIndices min_with_indices(const Tensor& x, std::int64_t dim, bool keepdim) {
  check_dim(Op::Min, x, dim);
  auto [values, indices] = max_with_indices(neg(x), dim, keepdim);
  return {neg(values), indices};
}

Tensor argmin(const Tensor& x) {
  check::floating(Op::Argmin, x);
  check::not_empty(Op::Argmin, x);
  NoGradGuard no_grad;  // an index has no gradient: the negation need not be recorded
  return argmax(neg(x));
}

Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim) {
  check_dim(Op::Argmin, x, dim);
  NoGradGuard no_grad;
  return argmax(neg(x), dim, keepdim);
}

// ---- sum and mean over several dims: one reduction along the dims brought together.

Tensor sum(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  check::floating(Op::Sum, x);
  const std::vector<std::size_t> reduced = reduced_dims(x, dims, Op::Sum);
  const Lines lines = bring_together(x, reduced);
  return reshaped(sum(lines.x, lines.dim), reduced_shape(x.shape(), reduced, keepdim));
}

Tensor mean(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  check::floating(Op::Mean, x);
  const std::vector<std::size_t> reduced = reduced_dims(x, dims, Op::Mean);
  MG_CHECK(reduced_count(x.shape(), reduced) > 0,
           "{}: dims {} of shape {} hold no elements; the mean of nothing is "
           "undefined",
           Op::Mean, dims, x.shape());
  const Lines lines = bring_together(x, reduced);
  return reshaped(mean(lines.x, lines.dim), reduced_shape(x.shape(), reduced, keepdim));
}

// ---- logsumexp: shift + log(sum(exp(x - shift))), with the shift each line's max, held constant
// (no gradient flows through it, and none is needed: the result does not depend on it).

Tensor logsumexp(const Tensor& x_in, const std::vector<std::int64_t>& dims, bool keepdim) {
  constexpr Op op = Op::LogSumExp;
  const OpSpan span(op);
  const Tensor x = autocast_input(op, x_in);
  check::floating(op, x);
  const std::vector<std::size_t> reduced = reduced_dims(x, dims, op);
  const DType compute = compute_dtype(x);
  const Tensor values = cast(x, compute);
  const Shape kept = reduced_shape(x.shape(), reduced, true);
  Tensor shift;
  {
    NoGradGuard no_grad;
    if (reduced_count(x.shape(), reduced) == 0) {
      shift = zeros(kept, check::like(values));  // the sum of nothing is 0, and its log -inf
    } else {
      shift = values;
      for (std::size_t d : reduced) shift = max(shift, static_cast<std::int64_t>(d), true);
      // An infinite max would make x - max NaN (inf - inf). Clamped to the largest finite value it keeps
      // +inf - shift = +inf and -inf - shift = -inf, so such lines give +inf and -inf as they should.
      const double largest = dtype_max(compute);
      shift = clamp(shift, -largest, largest);
    }
  }
  Tensor out = add(log(sum(exp(sub(values, shift)), as_dims(reduced), true)), shift);
  return cast(reshaped(out, reduced_shape(x.shape(), reduced, keepdim)), x.dtype());
}

// ---- var and std: from the deviations x - mean, never from sum(x^2) - sum(x)^2 / N, which cancels.

Tensor var(const Tensor& x_in, const std::vector<std::int64_t>& dims, VarianceOptions options) {
  constexpr Op op = Op::Var;
  const OpSpan span(op);
  const Tensor x = autocast_input(op, x_in);
  check::floating(op, x);
  const std::vector<std::size_t> reduced = reduced_dims(x, dims, op);
  const double divisor = variance_divisor(op, x, reduced, options.correction);
  const Tensor deviation = deviations(cast(x, compute_dtype(x)), as_dims(reduced));
  // Divided by 0 when N <= correction: inf, or NaN where every deviation is 0, as PyTorch.
  Tensor variance = div(sum(mul(deviation, deviation), as_dims(reduced), options.keepdim), divisor);
  return cast(variance, x.dtype());
}

// The forward is var's, unrecorded, then a square root; the node's backward is
//   dx = g (x - mean) / ((N - correction) std),  0 where std is 0,
// with the deviations recomputed from the saved input (so only x and the small std are kept).
Tensor std(const Tensor& x_in, const std::vector<std::int64_t>& dims, VarianceOptions options) {
  constexpr Op op = Op::Std;
  const OpSpan span(op);
  const Tensor x = autocast_input(op, x_in);
  check::floating(op, x);
  const std::vector<std::size_t> reduced = reduced_dims(x, dims, op);
  const double divisor = variance_divisor(op, x, reduced, options.correction);
  const std::vector<std::int64_t> reduced_list = as_dims(reduced);
  const DType compute = compute_dtype(x);
  Tensor std_kept;  // with the reduced dims kept as 1, in the compute dtype
  {
    NoGradGuard no_grad;
    const Tensor deviation = deviations(cast(x, compute), reduced_list);
    std_kept = sqrt(div(sum(mul(deviation, deviation), reduced_list, true), divisor));
  }
  Tensor out = cast(reshaped(std_kept, reduced_shape(x.shape(), reduced, options.keepdim)), x.dtype());
  record(op, {x}, out,
         [x = Saved(x), std_kept = Saved(std_kept), reduced_list, divisor, compute](const Tensor& g, const auto&) {
           const Tensor g_kept = cast(reshaped(g, std_kept.get().shape()), compute);
           // g / ((N - correction) std) where std != 0 (where's mask: non-zero selects), else 0.
           const Tensor scale = where(std_kept, div(g_kept, mul(std_kept, divisor)), zeros({}, check::like(g_kept)));
           return Grads{cast(mul(deviations(cast(x, compute), reduced_list), scale), x.get().dtype())};
         });
  return out;
}

}  // namespace mg
