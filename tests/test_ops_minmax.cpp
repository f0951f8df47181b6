// The larger and the smaller: elementwise maximum / minimum (autograd/binary.cpp) and the reductions
// min, argmin, max_with_indices, min_with_indices (autograd/reduce.cpp, reduce_dims.cpp). Values by
// hand and against loops, PyTorch 1.13's gradients on ties (half each) and NaN, the index of the
// first extremum, f64 gradchecks away from ties, and errors that name the op the caller used.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// [2, 3, 4] values with no ties (as tests/test_ops_reduce.cpp's).
Tensor distinct_values(bool requires_grad = true) {
  std::vector<double> v;
  for (int i = 0; i < 24; ++i) v.push_back(((i * 7) % 24) * 0.1 - 1.2 + 0.01 * (i % 3));
  return f64(v, {2, 3, 4}, requires_grad);
}

// Each line of x along dim: its smallest value and that value's first position, by plain loops.
struct Extremes {
  std::vector<double> values, positions;
};
Extremes line_minimums(const Tensor& x, std::int64_t dim) {
  const auto d = static_cast<std::size_t>(dim < 0 ? dim + x.dim() : dim);
  std::int64_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < d; ++i) outer *= x.shape()[i];
  for (std::size_t i = d + 1; i < x.shape().size(); ++i) inner *= x.shape()[i];
  const std::int64_t n = x.shape()[d];
  const std::vector<double> v = x.to_vector<double>();
  Extremes out;
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      std::int64_t best = 0;
      for (std::int64_t j = 1; j < n; ++j)
        if (v[static_cast<std::size_t>((o * n + j) * inner + i)] <
            v[static_cast<std::size_t>((o * n + best) * inner + i)])
          best = j;
      out.values.push_back(v[static_cast<std::size_t>((o * n + best) * inner + i)]);
      out.positions.push_back(static_cast<double>(best));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("maximum and minimum: values with broadcasting, NaN and signed zeros as PyTorch") {
  const Tensor a = from_vector({1, 5, -2, 4, 0, 3}, {2, 3}), b = tensor({2, 2, 2});
  Tensor hi = maximum(a, b), lo = minimum(a, b);
  CHECK(hi.shape() == Shape{2, 3});
  check_values(hi, {2, 5, 2, 4, 2, 3}, 0, 0);
  check_values(lo, {1, 2, -2, 2, 0, 2}, 0, 0);
  check_values(maximum(from_vector({1, 4}, {2, 1}), tensor({0, 2, 5})), {1, 2, 5, 4, 4, 5}, 0, 0);  // [2,1] x [3]
  // NaN in either input gives NaN (torch.maximum propagates it, unlike fmax).
  check_values(maximum(tensor({kNaN, 1, 2}), tensor({1, kNaN, 3})), {kNaN, kNaN, 3});
  check_values(minimum(tensor({kNaN, 1, 2}), tensor({1, kNaN, 3})), {kNaN, kNaN, 2});
  // On a tie the first input's value: torch.maximum(-0., 0.) is -0. and torch.maximum(0., -0.) is 0.
  CHECK(std::signbit(maximum(tensor({-0.0}), tensor({0.0})).item()));
  CHECK_FALSE(std::signbit(maximum(tensor({0.0}), tensor({-0.0})).item()));
  CHECK(std::signbit(minimum(tensor({-0.0}), tensor({0.0})).item()));
  CHECK_FALSE(std::signbit(minimum(tensor({0.0}), tensor({-0.0})).item()));
  // f16 and bf16 pick one of the inputs: exact.
  for (DType dtype : {DType::F16, DType::BF16}) {
    const Tensor x = uniform_in({5, 7}, dtype, 1, -2, 2), y = uniform_in({7}, dtype, 2, -2, 2);
    const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
    std::vector<double> larger, smaller;
    for (std::size_t i = 0; i < xv.size(); ++i) {
      larger.push_back(std::max(xv[i], yv[i % 7]));
      smaller.push_back(std::min(xv[i], yv[i % 7]));
    }
    CHECK(maximum(x, y).dtype() == dtype);
    check_values(maximum(x, y), larger, 0, 0);
    check_values(minimum(x, y), smaller, 0, 0);
  }
}

TEST_CASE("maximum and minimum: the gradient as PyTorch's, half each on ties, both with NaN; gradcheck") {
  // torch 1.13: a = [1, 2, 3, nan, 1], b = [1, 3, 2, 1, nan]; maximum(a, b).backward(ones) gives
  // a.grad = [0.5, 0, 1, 1, 1], b.grad = [0.5, 1, 0, 1, 1]; minimum swaps the middle two.
  Tensor a = f64({1, 2, 3, kNaN, 1}, {5}), b = f64({1, 3, 2, 1, kNaN}, {5});
  backward(sum(maximum(a, b)));
  check_values(a.grad(), {0.5, 0, 1, 1, 1}, 0, 0);
  check_values(b.grad(), {0.5, 1, 0, 1, 1}, 0, 0);
  a.zero_grad();
  b.zero_grad();
  backward(sum(minimum(a, b)));
  check_values(a.grad(), {0.5, 1, 0, 1, 1}, 0, 0);
  check_values(b.grad(), {0.5, 0, 1, 1, 1}, 0, 0);
  // A broadcast input sums its shares over the repeated dims: b = 2 ties with a's first column.
  Tensor wide = f64({2, 1, 3, 2, 5, 0}, {3, 2}), column = f64({2}, {1});
  backward(sum(maximum(wide, column)));
  check_values(wide.grad(), {0.5, 0, 1, 0.5, 1, 0}, 0, 0);
  check_values(column.grad(), {0.5 + 1 + 0.5 + 1}, 0, 0);
  for (auto op : {maximum, minimum}) {
    check_gradients("maximum/minimum broadcast", [op](const std::vector<Tensor>& in) { return op(in[0], in[1]); },
                    {f64({-1.5, 0.3, 2.2, 0.9, -0.4, 1.1}, {2, 3}), f64({0.1, 0.6, -0.7}, {3})});
  }
}

TEST_CASE("maximum and minimum: promote under autocast; bad shapes and dtypes") {
  {
    Autocast autocast(DType::F16);
    CHECK(maximum(uniform_in({2}, DType::F16, 3), uniform_in({2}, DType::F32, 4)).dtype() == DType::F32);
  }
  check_error([] { maximum(ones({2, 3}), ones({4})); }, "mg::maximum: shapes [2, 3] and [4] cannot be broadcast");
  check_error([] { minimum(ones({2}), ones({2}, {.dtype = DType::F16})); },
              "mg::minimum: inputs have different dtypes");
  check_error([] { maximum(tensor({1}, {.dtype = DType::I32}), tensor({1}, {.dtype = DType::I32})); },
              "mg::maximum: needs a floating-point tensor");
}

TEST_CASE("min and argmin: everything and along dims, first minimum, NaN, gradients") {
  const Tensor x = from_vector({3, 1, 4, 1, 5, 0}, {2, 3});
  CHECK(min(x).item() == 0.0);
  CHECK(min(x).shape() == Shape{});
  check_values(min(x, 0), {1, 1, 0}, 0, 0);
  check_values(min(x, 1, true), {1, 0}, 0, 0);
  CHECK(min(x, 1, true).shape() == Shape{2, 1});
  CHECK(argmin(x).item() == 5.0);
  CHECK(argmin(x).dtype() == DType::I32);
  check_values(argmin(x, 1), {1, 2}, 0, 0);
  check_values(argmin(tensor({2, 1, 1, 3})), {1}, 0, 0);  // ties: the first, as PyTorch
  check_values(argmin(tensor({3, 1, 1, kNaN})), {3}, 0, 0);  // torch.argmin: NaN counts as the smallest
  check_values(min(from_vector({1, kNaN, 3, 0}, {2, 2}), 0), {1, kNaN});
  const Tensor values = distinct_values(false);
  for (std::int64_t dim : {0, 1, 2, -1}) {
    INFO("dim " << dim);
    const Extremes expected = line_minimums(values, dim);
    check_values(min(values, dim), expected.values, 0, 0);
    check_values(argmin(values, dim), expected.positions, 0, 0);
    check_gradients("min along dim", [dim](const std::vector<Tensor>& in) { return min(in[0], dim); },
                    {distinct_values()});
  }
  check_gradients("min all", [](const std::vector<Tensor>& in) { return min(in[0]); }, {distinct_values()});
  // Over everything, ties share the gradient evenly, as max's (torch 1.13: min([1, 0, 0]) gives [0, 0.5, 0.5]).
  Tensor shared = f64({1, 0, 0}, {3});
  backward(min(shared));
  check_values(shared.grad(), {0, 0.5, 0.5}, 0, 0);
  // Ties along a dim: the gradient goes to the first minimum, as PyTorch's torch.min(x, dim).
  Tensor tied = f64({1, 0, 0, 2, 2, 5}, {2, 3});
  backward(sum(min(tied, 1)));
  check_values(tied.grad(), {0, 1, 0, 1, 0, 0}, 0, 0);
  CHECK_FALSE(argmin(from_vector({1, 2}, {2}, {.requires_grad = true})).requires_grad());
  check_error([] { min(zeros({0})); }, "mg::min: the tensor is empty");
  check_error([] { min(zeros({2, 0}), 1); }, "mg::min: dim 1 of shape [2, 0] is empty");
  check_error([] { min(ones({2}), 1); }, "mg::min: dim 1 is out of range");
  check_error([] { argmin(zeros({0})); }, "mg::argmin: the tensor is empty");
  check_error([] { argmin(ones({2, 3}), -3); }, "mg::argmin: dim -3 is out of range");
  check_error([] { min(tensor({1, 2}, {.dtype = DType::I32})); }, "mg::min: needs a floating-point tensor");
}

TEST_CASE("max_with_indices and min_with_indices: torch.max(x, dim) and torch.min(x, dim)") {
  // torch 1.13: torch.max([[1, 3, 3], [2, 2, 0]], 1) = values [3, 2], indices [1, 0], the gradient
  // to those positions; torch.min([[1, 0, 0], [2, 2, nan]], 1) = values [0, nan], indices [1, 2].
  Tensor x = f64({1, 3, 3, 2, 2, 0}, {2, 3});
  auto [values, indices] = max_with_indices(x, 1);
  check_values(values, {3, 2}, 0, 0);
  CHECK(indices.dtype() == DType::I32);
  check_values(indices, {1, 0}, 0, 0);
  backward(sum(values));
  check_values(x.grad(), {0, 1, 0, 1, 0, 0}, 0, 0);
  Tensor y = f64({1, 0, 0, 2, 2, kNaN}, {2, 3});
  auto [low, where_low] = min_with_indices(y, 1);
  check_values(low, {0, kNaN});
  check_values(where_low, {1, 2}, 0, 0);
  backward(sum(low));
  check_values(y.grad(), {0, 1, 0, 0, 0, 1}, 0, 0);
  // Along every dim, keepdim both ways: the values are max / min's and the indices argmax / argmin's.
  const Tensor v = distinct_values(false);
  for (std::int64_t dim : {0, 1, 2, -2}) {
    for (bool keepdim : {false, true}) {
      INFO("dim " << dim << ", keepdim " << keepdim);
      const ValuesIndices high = max_with_indices(v, dim, keepdim), small = min_with_indices(v, dim, keepdim);
      CHECK(high.values.shape() == max(v, dim, keepdim).shape());
      CHECK(high.indices.shape() == high.values.shape());
      check_values(high.values, max(v, dim, keepdim).to_vector<double>(), 0, 0);
      check_values(high.indices, argmax(v, dim, keepdim).to_vector<double>(), 0, 0);
      check_values(small.values, min(v, dim, keepdim).to_vector<double>(), 0, 0);
      check_values(small.indices, argmin(v, dim, keepdim).to_vector<double>(), 0, 0);
    }
    check_gradients("max_with_indices",
                    [dim](const std::vector<Tensor>& in) { return max_with_indices(in[0], dim).values; },
                    {distinct_values()});
    check_gradients("min_with_indices",
                    [dim](const std::vector<Tensor>& in) { return min_with_indices(in[0], dim, true).values; },
                    {distinct_values()});
  }
  for (DType dtype : {DType::F16, DType::BF16}) {  // selected values: exact in any dtype
    const Tensor h = uniform_in({4, 9}, dtype, 5, -3, 3);
    const auto [hv, hi] = min_with_indices(h, 1);
    CHECK(hv.dtype() == dtype);
    const Extremes expected = line_minimums(h, 1);
    check_values(hv, expected.values, 0, 0);
    check_values(hi, expected.positions, 0, 0);
  }
  check_error([] { max_with_indices(zeros({2, 0}), 1); }, "mg::max: dim 1 of shape [2, 0] is empty");
  check_error([] { min_with_indices(ones({2, 3}), 2); }, "mg::min: dim 2 is out of range");
}
