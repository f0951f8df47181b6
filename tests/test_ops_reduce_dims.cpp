// Reductions over several dims and the reductions built from others (autograd/reduce_dims.cpp):
// sum and mean over a list of dims, logsumexp, var and std. Values against plain f64 loops over
// every subset of a 3-D tensor's dims (keepdim both ways) and PyTorch 1.13's numbers, gradients
// with f64 gradchecks, the edge cases PyTorch defines (infinite lines, N - correction <= 0, a
// constant line's std), f16/bf16 rounded once from f32 math, and errors that name the op.
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

using LineFn = double (*)(const std::vector<double>&);

double line_sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double line_mean(const std::vector<double>& v) { return line_sum(v) / static_cast<double>(v.size()); }
double line_logsumexp(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::exp(x);
  return std::log(s);
}
double line_var(const std::vector<double>& v, double correction) {
  const double m = line_mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / std::max(0.0, static_cast<double>(v.size()) - correction);
}

// x reduced over `dims` (empty: all) by plain loops: the elements are grouped by their index with
// the reduced coordinates dropped, in row-major order of what is left, and f applied to each group.
std::vector<double> reduce_reference(const Tensor& x, const std::vector<std::int64_t>& dims,
                                     const std::function<double(const std::vector<double>&)>& f) {
  const Shape& shape = x.shape();
  std::vector<bool> reduced(shape.size(), dims.empty());
  for (std::int64_t d : dims) reduced[static_cast<std::size_t>(d < 0 ? d + x.dim() : d)] = true;
  std::map<std::int64_t, std::vector<double>> groups;
  const std::vector<double> values = x.to_vector<double>();
  for (std::int64_t flat = 0; flat < x.numel(); ++flat) {
    std::int64_t rest = flat, key = 0, stride = 1;
    for (std::size_t d = shape.size(); d-- > 0;) {
      const std::int64_t coordinate = rest % shape[d];
      rest /= shape[d];
      if (!reduced[d]) {
        key += coordinate * stride;
        stride *= shape[d];
      }
    }
    groups[key].push_back(values[static_cast<std::size_t>(flat)]);
  }
  std::vector<double> out;
  for (const auto& [key, group] : groups) out.push_back(f(group));
  return out;
}

Shape reduced_shape(const Shape& shape, const std::vector<std::int64_t>& dims, bool keepdim) {
  Shape out;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    bool is_reduced = dims.empty();
    for (std::int64_t r : dims)
      is_reduced |= static_cast<std::size_t>(r < 0 ? r + static_cast<std::int64_t>(shape.size()) : r) == d;
    if (!is_reduced)
      out.push_back(shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

// Every list of dims of a 3-D tensor worth telling apart: adjacent (a reshape) or not (a permute),
// unordered, negative, one dim, all, and the empty list (all).
const std::vector<std::vector<std::int64_t>> kDimLists = {{0, 1}, {1, 2}, {0, 2}, {2, 0}, {-1, 0}, {1}, {0, 1, 2}, {}};

}  // namespace

TEST_CASE("sum and mean over several dims: every list of dims, keepdim both ways, against f64 loops") {
  const Tensor x = random_f64({3, 4, 5}, -1, 1, 1, false);
  for (const auto& dims : kDimLists) {
    for (bool keepdim : {false, true}) {
      INFO("dims " << fmt::format("{}", dims) << ", keepdim " << keepdim);
      const Tensor s = sum(x, dims, keepdim), m = mean(x, dims, keepdim);
      CHECK(s.shape() == reduced_shape(x.shape(), dims, keepdim));
      CHECK(m.shape() == s.shape());
      check_values(s, reduce_reference(x, dims, line_sum), 1e-14, 1e-14);
      check_values(m, reduce_reference(x, dims, line_mean), 1e-14, 1e-14);
    }
  }
  // A braced list always means dims: {} is every dim (never dim 0), {1} is dim 1.
  const Tensor small = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(sum(small, {}).shape() == Shape{});
  CHECK(sum(small, {}).item() == 21.0);
  CHECK(sum(small, {}, true).shape() == Shape{1, 1});
  check_values(sum(small, {1}), {6, 15});
  check_values(mean(small, {0, 1}, true), {3.5});
  CHECK(sum(from_vector({7}, Shape{}), {}).item() == 7.0);  // a 0-d tensor has nothing to reduce
  check_values(sum(zeros({2, 0, 3}), {0, 1}), {0, 0, 0}, 0, 0);
}

TEST_CASE("sum and mean over several dims: gradcheck, f16 rounded once, bad dims") {
  for (const std::vector<std::int64_t>& dims : {std::vector<std::int64_t>{0, 2}, {1, 2}, {}}) {
    check_gradients("sum over dims", [&](const std::vector<Tensor>& in) { return sum(in[0], dims); },
                    {random_f64({3, 4, 2}, -1, 1, 2)});
    check_gradients("mean over dims keepdim", [&](const std::vector<Tensor>& in) { return mean(in[0], dims, true); },
                    {random_f64({3, 4, 2}, -1, 1, 3)});
  }
  for (DType dtype : {DType::F16, DType::BF16}) {
    INFO("dtype " << dtype_name(dtype));
    const Tensor x = uniform_in({40, 3, 50}, dtype, 4, 0.0, 1.0);  // exact inputs
    for (const std::vector<std::int64_t>& dims : {std::vector<std::int64_t>{0, 2}, {1, 2}}) {
      const std::vector<double> expected = reduce_reference(x, dims, line_sum);
      const Tensor s = sum(x, dims);
      CHECK(s.dtype() == dtype);
      // One rounding on store (0.5 ulp) after 2000 f32 additions of at most 2^-24 * the sum each: the
      // dims reduced one after the other would round twice and could miss by a whole ulp.
      check_values(s, expected, tolerance(dtype, 0.5) + 2000 * 0x1p-24);
    }
  }
  // f16 ones summed over 3000 elements: a running f16 sum stops at 2048.
  CHECK(sum(ones({30, 2, 100}, {.dtype = DType::F16}), {0, 2}).to_vector<double>() == std::vector<double>{3000, 3000});
  check_error([] { sum(ones({2, 3}), {1, 1}); }, "mg::sum: dim 1 appears more than once in dims [1, 1]");
  check_error([] { sum(ones({2, 3}), {1, -1}); }, "mg::sum: dim -1 appears more than once");
  check_error([] { sum(ones({2, 3}), {0, 2}); }, "mg::sum: dim 2 is out of range");
  check_error([] { mean(ones({2, 3}), {0, -3}); }, "mg::mean: dim -3 is out of range");
  check_error([] { mean(zeros({2, 0, 3}), {1, 2}); }, "mg::mean: dims [1, 2] of shape [2, 0, 3] hold no elements");
  check_error([] { sum(tensor({1, 2}, {.dtype = DType::I32}), {0}); }, "mg::sum: needs a floating-point tensor");
}

TEST_CASE("logsumexp: every list of dims against f64 loops, PyTorch's numbers, large values") {
  const Tensor x = random_f64({3, 4, 5}, -3, 3, 5, false);
  for (const auto& dims : kDimLists) {
    for (bool keepdim : {false, true}) {
      INFO("dims " << fmt::format("{}", dims) << ", keepdim " << keepdim);
      const Tensor y = logsumexp(x, dims, keepdim);
      CHECK(y.shape() == reduced_shape(x.shape(), dims, keepdim));
      check_values(y, reduce_reference(x, dims, line_logsumexp), 1e-14, 1e-14);
    }
  }
  // torch 1.13 in f64: torch.logsumexp(x, [0, 1]) and torch.logsumexp(x, 1).
  const Tensor t = f64({1, 2, 3, 4, 5, 7}, {2, 3}, false);
  check_values(logsumexp(t, {0, 1}), {7.1928119148004015}, 1e-15);
  check_values(logsumexp(t, {1}), {3.4076059644443806, 7.169846019556286}, 1e-15);
  // Shifted by the max: exp(1000) overflows even f64, the result does not (f32: 1000 + log 3).
  check_values(logsumexp(tensor({1000, 1000, 1000}), {0}), {1000 + std::log(3.0)}, dtype_eps(DType::F32));
  check_values(logsumexp(tensor({-1000, -1000}), {0}), {-1000 + std::log(2.0)}, dtype_eps(DType::F32));
}

TEST_CASE("logsumexp: infinite and NaN lines and empty reductions as PyTorch; gradients") {
  // torch 1.13: rows [-inf, -inf], [inf, 1], [inf, -inf], [nan, 1], [inf, inf] give -inf, inf, inf, nan, inf.
  for (DType dtype : {DType::F32, DType::F64, DType::F16}) {
    INFO("dtype " << dtype_name(dtype));
    const Tensor x = from_vector({-kInf, -kInf, kInf, 1, kInf, -kInf, kNaN, 1, kInf, kInf}, {5, 2}, {.dtype = dtype});
    check_values(logsumexp(x, {1}), {-kInf, kInf, kInf, kNaN, kInf});
  }
  check_values(logsumexp(zeros({0, 3}), {0}), {-kInf, -kInf, -kInf});  // the log of an empty sum
  // The gradient is softmax along the dims; NaN on the rows that are all -inf or hold +inf (PyTorch's).
  Tensor x = f64({-kInf, -kInf, 1, 2, kInf, 1}, {3, 2});
  backward(sum(logsumexp(x, {1})));
  const double p = 1 / (1 + std::exp(1.0));  // softmax([1, 2])[0]
  check_values(x.grad(), {kNaN, kNaN, p, 1 - p, kNaN, 0}, 1e-15);
  for (const std::vector<std::int64_t>& dims : {std::vector<std::int64_t>{1}, {0, 2}, {}}) {
    check_gradients("logsumexp", [&](const std::vector<Tensor>& in) { return logsumexp(in[0], dims); },
                    {random_f64({2, 3, 4}, -2, 2, 6)});
  }
}

TEST_CASE("logsumexp: f16 and bf16 computed in f32 and rounded once; f32 under autocast; errors") {
  for (DType dtype : {DType::F16, DType::BF16}) {
    INFO("dtype " << dtype_name(dtype));
    const Tensor x = uniform_in({6, 40}, dtype, 7, -8.0, 8.0);
    const Tensor y = logsumexp(x, {1});
    CHECK(y.dtype() == dtype);
    // f32 math (exp and log within a few f32 ulps, a 40-term sum) and one rounding on store.
    check_values(y, reduce_reference(x, {1}, line_logsumexp), tolerance(dtype, 0.5) + tolerance(DType::F32, 64));
  }
  {
    Autocast autocast(DType::F16);
    CHECK(logsumexp(uniform_in({2, 3}, DType::F16, 8), {1}).dtype() == DType::F32);  // on the f32 list
  }
  check_error([] { logsumexp(ones({2, 3}), {2}); }, "mg::logsumexp: dim 2 is out of range");
  check_error([] { logsumexp(ones({2, 3}), {0, 0}); }, "mg::logsumexp: dim 0 appears more than once");
  check_error([] { logsumexp(tensor({1, 2}, {.dtype = DType::I32}), {0}); }, "mg::logsumexp: needs a floating-point");
}

TEST_CASE("var and std: every list of dims, corrections 0, 1 and 2.5, against f64 loops and PyTorch") {
  const Tensor x = random_f64({3, 4, 5}, -2, 2, 9, false);
  for (const auto& dims : kDimLists) {
    for (double correction : {0.0, 1.0, 2.5}) {
      for (bool keepdim : {false, true}) {
        INFO("dims " << fmt::format("{}", dims) << ", correction " << correction << ", keepdim " << keepdim);
        const VarianceOptions options{.correction = correction, .keepdim = keepdim};
        const Tensor v = var(x, dims, options), s = mg::std(x, dims, options);
        CHECK(v.shape() == reduced_shape(x.shape(), dims, keepdim));
        CHECK(s.shape() == v.shape());
        std::vector<double> expected = reduce_reference(x, dims,
                                                        [&](const auto& line) { return line_var(line, correction); });
        check_values(v, expected, 1e-13, 1e-15);
        for (double& e : expected) e = std::sqrt(e);
        check_values(s, expected, 1e-13, 1e-15);
      }
    }
  }
  // torch 1.13 in f64: var(x, 1), var(x, None, correction=0), mg::std(x, 0).
  const Tensor t = f64({1, 2, 3, 4, 5, 7}, {2, 3}, false);
  check_values(var(t, {1}), {1.0, 2.333333333333334}, 1e-15);
  check_values(var(t, {}, {.correction = 0}), {3.8888888888888893}, 1e-15);
  check_values(var(t), {var(t, {0, 1}).item()}, 0, 0);  // the default: every dim, unbiased
  check_values(mg::std(t, {0}), {2.1213203435596424, 2.1213203435596424, 2.8284271247461903}, 1e-15);
}

TEST_CASE("var and std: N - correction <= 0 gives inf or NaN, as PyTorch; a constant line's std has gradient 0") {
  // torch 1.13: var([1]) = nan, var([1, 2], correction=2) = inf, var([1, 2], correction=3) = inf,
  // var([1, 1], correction=3) = nan.
  check_values(var(tensor({1})), {kNaN});
  check_values(var(tensor({1, 2}), {}, {.correction = 2}), {kInf});
  check_values(var(tensor({1, 2}), {}, {.correction = 3}), {kInf});
  check_values(var(tensor({1, 1}), {}, {.correction = 3}), {kNaN});
  check_values(mg::std(tensor({1, 2}), {}, {.correction = 2}), {kInf});
  // torch: mg::std([1, 1, 1]).backward() gives zeros, not 0 / 0.
  Tensor constant = f64({1, 1, 1, 2, 3, 4}, {2, 3});
  backward(sum(mg::std(constant, {1})));
  check_values(constant.grad(), {0, 0, 0, -0.5, 0, 0.5}, 1e-15);
}

TEST_CASE("var and std: gradcheck, f16 without overflow or cancellation, f32 under autocast, errors") {
  for (const std::vector<std::int64_t>& dims : {std::vector<std::int64_t>{1}, {0, 2}, {}}) {
    for (double correction : {0.0, 1.0}) {
      const VarianceOptions options{.correction = correction};
      check_gradients("var", [&](const std::vector<Tensor>& in) { return var(in[0], dims, options); },
                      {random_f64({2, 3, 4}, -2, 2, 10)});
      check_gradients("std", [&](const std::vector<Tensor>& in) { return mg::std(in[0], dims, options); },
                      {random_f64({2, 3, 4}, -2, 2, 11)});
      check_gradients("std keepdim",
                      [&](const std::vector<Tensor>& in) {
                        return mg::std(in[0], dims, {.correction = correction, .keepdim = true});
                      },
                      {random_f64({2, 3, 4}, -2, 2, 12)});
    }
  }
  // Squares of 1000 overflow f16 (65504) and a sum-of-squares formula would cancel; from the
  // deviations in f32 the f16 result is var's value rounded once (torch: 1.6669921875 in f16).
  const Tensor large = tensor({1000, 1001, 1002, 1003}, {.dtype = DType::F16});
  CHECK(var(large).dtype() == DType::F16);
  check_values(var(large), {1.6669921875}, 0, 0);
  check_values(mg::std(large), {to_f16(std::sqrt(5.0 / 3.0))}, 0, 0);
  CHECK(mg::std(large).dtype() == DType::F16);
  Tensor f16_leaf = tensor({1, 2, 4}, {.dtype = DType::F16}).set_requires_grad(true);
  backward(mg::std(f16_leaf));
  CHECK(f16_leaf.grad().dtype() == DType::F16);
  {
    Autocast autocast(DType::F16);
    CHECK(var(uniform_in({2, 3}, DType::F16, 13), {1}).dtype() == DType::F32);  // on the f32 list
    CHECK(mg::std(uniform_in({2, 3}, DType::F16, 14), {1}).dtype() == DType::F32);
  }
  check_error([] { var(zeros({0})); }, "mg::var: the reduced dims of shape [0] hold no elements");
  check_error([] { mg::std(zeros({2, 0}), {1}); }, "mg::std: the reduced dims of shape [2, 0] hold no elements");
  check_error([] { var(ones({2, 3}), {1, 1}); }, "mg::var: dim 1 appears more than once");
  check_error([] { mg::std(ones({2, 3}), {3}); }, "mg::std: dim 3 is out of range");
  check_error([] { var(ones({3}), {}, {.correction = kNaN}); }, "mg::var: correction must be finite");
  check_error([] { mg::std(tensor({1, 2}, {.dtype = DType::I32})); }, "mg::std: needs a floating-point tensor");
}
