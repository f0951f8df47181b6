// Reductions (autograd/reduce.cpp, kernels/cpu/reduce.cpp) and their broadcasting pair
// (autograd/broadcast.cpp): sum, mean, max over everything and along a dim (keepdim true/false,
// negative dims), argmax, sum_to and broadcast_to. Values against hand-computed numbers and f64
// loops, gradients with f64 gradchecks, max's first-maximum and NaN rules, f16/bf16 sums that
// accumulate in f32, and bad dims/dtypes/empty inputs throwing errors that name the op. On every
// device of the build: f32 sums of 10^6 values within log2(n) eps, and max's ties sharing the gradient.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

using LineFn = double (*)(const std::vector<double>&);

double line_sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double line_mean(const std::vector<double>& v) { return line_sum(v) / static_cast<double>(v.size()); }
double line_max(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

// x reduced along `dim` by plain loops: x viewed as [outer, n, inner], f applied to each line of n.
std::vector<double> reduce_reference(const Tensor& x, std::int64_t dim, LineFn f) {
  const auto d = static_cast<std::size_t>(dim < 0 ? dim + x.dim() : dim);
  std::int64_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < d; ++i) outer *= x.shape()[i];
  for (std::size_t i = d + 1; i < x.shape().size(); ++i) inner *= x.shape()[i];
  const std::int64_t n = x.shape()[d];
  const std::vector<double> v = x.to_vector<double>();
  std::vector<double> out;
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      std::vector<double> line;
      for (std::int64_t j = 0; j < n; ++j) line.push_back(v[static_cast<std::size_t>((o * n + j) * inner + i)]);
      out.push_back(f(line));
    }
  }
  return out;
}

// x's shape without dim (keepdim false) or with it set to 1 (keepdim true).
Shape reduced_shape(const Tensor& x, std::int64_t dim, bool keepdim) {
  Shape s = x.shape();
  const auto d = static_cast<std::size_t>(dim < 0 ? dim + x.dim() : dim);
  if (keepdim)
    s[d] = 1;
  else
    s.erase(s.begin() + static_cast<std::ptrdiff_t>(d));
  return s;
}

// [2, 3, 4] values with no ties: a permutation of 0, 0.1, ..., 2.3 plus a small distinct offset.
Tensor distinct_values(bool requires_grad = true) {
  std::vector<double> v;
  for (int i = 0; i < 24; ++i) v.push_back(((i * 7) % 24) * 0.1 - 1.2 + 0.01 * (i % 3));
  return f64(v, {2, 3, 4}, requires_grad);
}

// Every dim of a 3-D tensor, positive and negative, with keepdim both ways, against the loops.
void check_along_dims(Tensor (*op)(const Tensor&, std::int64_t, bool), LineFn f, const Tensor& x) {
  for (std::int64_t dim : {0, 1, 2, -1, -2, -3}) {
    for (bool keepdim : {false, true}) {
      INFO("dim " << dim << ", keepdim " << keepdim);
      Tensor y = op(x, dim, keepdim);
      CHECK(y.shape() == reduced_shape(x, dim, keepdim));
      check_values(y, reduce_reference(x, dim, f), 1e-14, 1e-14);
    }
  }
}

Tensor sum_dim(const Tensor& x, std::int64_t d, bool k) { return sum(x, d, k); }
Tensor mean_dim(const Tensor& x, std::int64_t d, bool k) { return mean(x, d, k); }
Tensor max_dim(const Tensor& x, std::int64_t d, bool k) { return max(x, d, k); }

const double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

TEST_CASE("sum: everything and along dims, keepdim and negative dims") {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor all = sum(x);
  CHECK(all.shape() == Shape{});
  CHECK(all.item() == 21.0);
  check_values(sum(x, 0), {5, 7, 9});
  Tensor rows = sum(x, 1, true);
  CHECK(rows.shape() == Shape{2, 1});
  check_values(rows, {6, 15});
  check_values(sum(x, -1), {6, 15});
  CHECK(sum(x, -2, true).shape() == Shape{1, 3});
  check_along_dims(sum_dim, line_sum, random_f64({2, 3, 4}, -1, 1, 1, false));
  // An empty sum is 0, on both kernel paths (reduced dim contiguous or strided).
  CHECK(sum(zeros({0, 3})).item() == 0.0);
  check_values(sum(zeros({0, 3}), 0), {0, 0, 0}, 0, 0);
  check_values(sum(zeros({2, 0}), 1), {0, 0}, 0, 0);
}

TEST_CASE("sum: gradcheck, bad dims and dtypes") {
  check_gradients("sum all", [](const std::vector<Tensor>& in) { return sum(in[0]); },
                  {random_f64({2, 3, 4}, -1, 1, 1)});
  check_gradients("sum dim 1", [](const std::vector<Tensor>& in) { return sum(in[0], 1); },
                  {random_f64({2, 3, 4}, -1, 1, 2)});
  check_gradients("sum dim -1 keepdim", [](const std::vector<Tensor>& in) { return sum(in[0], -1, true); },
                  {random_f64({2, 3, 4}, -1, 1, 3)});
  check_gradients("sum dim 0", [](const std::vector<Tensor>& in) { return sum(in[0], 0); },
                  {random_f64({2, 3}, -1, 1, 4)});
  check_error([] { sum(ones({2, 3}), 2); }, "mg::sum: dim 2 is out of range");
  check_error([] { sum(ones({2, 3}), -3); }, "mg::sum: dim -3 is out of range");
  check_error([] { sum(tensor({1, 2}, {.dtype = DType::I32})); }, "mg::sum: needs a floating-point tensor");
  check_error([] { sum(tensor({1, 2}, {.dtype = DType::I32}), 0); }, "mg::sum");
}

TEST_CASE("sum: f16 and bf16 accumulate in f32 and round once") {
  // A running f16 sum of ones stops at 2048 (2048 + 1 rounds to 2048), a bf16 one at 256. 3000 and
  // 1000 are representable, so a single rounding of the f32 sum gives them exactly.
  CHECK(sum(ones({3000}, {.dtype = DType::F16})).item() == 3000.0);
  CHECK(sum(ones({1000}, {.dtype = DType::BF16})).item() == 1000.0);
  check_values(sum(ones({3000, 2}, {.dtype = DType::F16}), 0), {3000, 3000}, 0, 0);  // strided path
  check_values(sum(ones({2, 3000}, {.dtype = DType::F16}), 1), {3000, 3000}, 0, 0);  // contiguous path
  check_values(mean(ones({3000, 2}, {.dtype = DType::F16}), 0), {1, 1}, 0, 0);
  for (DType dtype : {DType::F16, DType::BF16}) {
    INFO("dtype " << dtype_name(dtype));
    Generator generator(5);
    Tensor x = uniform({8, 500}, 0, 1, generator).to(dtype);  // exact inputs
    std::vector<double> expected = reduce_reference(x, 1, line_sum);
    Tensor s = sum(x, 1);
    CHECK(s.dtype() == dtype);
    // One rounding on store (0.5 ulp), plus 500 f32 additions of at most 2^-24 * sum|x| each.
    double max_line = *std::max_element(expected.begin(), expected.end());
    check_values(s, expected, tolerance(dtype, 0.5), 500 * 0x1p-24 * max_line);
    // The mean divides the f32 sum (one more f32 rounding, inside the margin) and rounds once.
    Tensor m = mean(x, 1);
    CHECK(m.dtype() == dtype);
    check_values(m, reduce_reference(x, 1, line_mean), tolerance(dtype, 0.5), 501 * 0x1p-24 * max_line / 500);
    double overall = line_mean(x.to_vector<double>());  // inputs are >= 0: sum|x| / n is the mean itself
    check_values(mean(x), {overall}, tolerance(dtype, 0.5), 4001 * 0x1p-24 * overall);
  }
}

TEST_CASE("sum and mean of a million f32 values: within log2(n) eps of the f64 sum, in both layouts") {
  // Pairwise (blocked) summation rounds each term into about log2(n) partial sums, so its error is
  // within log2(n) units of eps/2 of sum |x| (Higham, Accuracy and Stability, section 4.2); a
  // sequential sum's bound is n such units, and with terms alike its errors all point one way (a
  // running f32 sum of 10^6 copies of 0.1f is off by 1%). The bound checked, log2(n) eps sum |x|, is
  // twice the pairwise bound (leaves of 16 sequential terms, and the tree's levels). Each term is an
  // f32 value, so the f64 sums of the same values are exact to 2^-52 relative.
  const std::int64_t n = 1000000;
  const double bound = std::log2(static_cast<double>(n)) * dtype_eps(DType::F32);
  Generator generator(11);
  const Tensor tenth = full({n}, 0.1), random = uniform({n}, 0.0, 1.0, generator);
  std::vector<Device> devices{Device::cpu()};
  if (cuda_device_count() > 0) devices.push_back(Device::cuda());
  for (Device device : devices) {
    for (const auto& [name, values] : {std::pair{"10^6 copies of 0.1f", tenth}, {"uniform [0, 1)", random}}) {
      INFO(fmt::format("{} on {}", name, device));
      const double exact = line_sum(values.to_vector<double>());  // every term >= 0: sum |x| = sum x
      auto check_sum = [&](const Tensor& got, double expected, const char* what) {
        for (double v : got.to_vector<double>()) {
          INFO(std::string(what) << ": " << v << " vs f64 " << expected << ", relative error "
                                 << std::fabs(v - expected) / expected << " (bound " << bound << ")");
          CHECK(std::fabs(v - expected) <= bound * expected);
        }
      };
      const Tensor x = values.to(device);
      check_sum(sum(x), exact, "sum, contiguous");
      check_sum(mean(x), exact / static_cast<double>(n), "mean, contiguous");
      // The same terms down dim 0 of [n, 3]: the strided path, three columns at once.
      const Tensor columns = broadcast_to(reshape(values, {n, 1}), {n, 3}).to(device);
      check_sum(sum(columns, 0), exact, "sum along dim 0");
      check_sum(mean(columns, 0), exact / static_cast<double>(n), "mean along dim 0");
    }
  }
}

TEST_CASE("mean: everything and along dims, gradcheck and bad input") {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(mean(x).item() == 3.5);
  CHECK(mean(x).shape() == Shape{});
  check_values(mean(x, 0), {2.5, 3.5, 4.5});
  check_values(mean(x, 1, true), {2, 5});
  check_values(mean(x, -1), {2, 5});
  check_along_dims(mean_dim, line_mean, random_f64({2, 3, 4}, -1, 1, 2, false));
  check_gradients("mean all", [](const std::vector<Tensor>& in) { return mean(in[0]); },
                  {random_f64({2, 3, 4}, -1, 1, 1)});
  check_gradients("mean dim 1", [](const std::vector<Tensor>& in) { return mean(in[0], 1); },
                  {random_f64({2, 3, 4}, -1, 1, 2)});
  check_gradients("mean dim -1 keepdim", [](const std::vector<Tensor>& in) { return mean(in[0], -1, true); },
                  {random_f64({2, 3, 4}, -1, 1, 3)});
  check_error([] { mean(zeros({0})); }, "mg::mean: the tensor is empty");
  check_error([] { mean(zeros({2, 0}), 1); }, "mg::mean: dim 1 of shape [2, 0] is empty");
  check_error([] { mean(ones({2}), 1); }, "mg::mean: dim 1 is out of range");
  check_error([] { mean(tensor({1, 2}, {.dtype = DType::I32})); }, "mg::mean: needs a floating-point tensor");
}

TEST_CASE("max: everything and along dims, gradcheck and bad input") {
  Tensor x = from_vector({1, 5, 3, 4, 2, 6}, {2, 3});
  CHECK(max(x).item() == 6.0);
  CHECK(max(x).shape() == Shape{});
  check_values(max(x, 0), {4, 5, 6});
  Tensor rows = max(x, 1, true);
  CHECK(rows.shape() == Shape{2, 1});
  check_values(rows, {5, 6});
  check_values(max(x, -2), {4, 5, 6});
  check_values(max(tensor({-3, -1, -2})), {-1});  // not confused by an initial 0
  check_along_dims(max_dim, line_max, distinct_values(false));
  check_gradients("max all", [](const std::vector<Tensor>& in) { return max(in[0]); }, {distinct_values()});
  for (std::int64_t dim : {0, 1, -1}) {
    check_gradients("max along dim", [dim](const std::vector<Tensor>& in) { return max(in[0], dim); },
                    {distinct_values()});
    check_gradients("max keepdim", [dim](const std::vector<Tensor>& in) { return max(in[0], dim, true); },
                    {distinct_values()});
  }
  check_error([] { max(zeros({0})); }, "mg::max: the tensor is empty");
  check_error([] { max(zeros({3, 0}), 1); }, "mg::max: dim 1 of shape [3, 0] is empty");
  check_error([] { max(ones({2}), -2); }, "mg::max: dim -2 is out of range");
  check_error([] { max(tensor({1, 2}, {.dtype = DType::I32})); }, "mg::max: needs a floating-point tensor");
}

TEST_CASE("max: along a dim the gradient goes to the first maximum on ties") {
  Tensor x = f64({1, 3, 3, 2, 2, 0}, {2, 3});
  backward(sum(max(x, 1)));  // contiguous rows
  check_values(x.grad(), {0, 1, 0, 1, 0, 0});
  Tensor y = f64({5, 1, 5, 2}, {2, 2});
  backward(sum(max(y, 0)));  // strided columns
  check_values(y.grad(), {1, 0, 0, 1});
  Tensor w = f64({2, 7, 7, 7, 1, 1}, {1, 3, 2});  // a middle dim with ties in both columns
  backward(sum(max(w, 1)));
  check_values(w.grad(), {0, 1, 1, 0, 0, 0});
}

TEST_CASE("max: over everything the gradient is shared evenly by the ties, as in PyTorch") {
  // torch 1.13: x.max().backward(g) gives every element equal to the max g / (number of them), rounded
  // once into x's dtype; if the max is NaN, the NaNs share it. (-0 and +0 are equal: both share.)
  // On every device of the build.
  std::vector<Device> devices{Device::cpu()};
  if (cuda_device_count() > 0) devices.push_back(Device::cuda());
  for (Device device : devices) {
    for (DType dtype : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
      if (device.is_cuda() && dtype == DType::F64) continue;  // no f64 on a GPU
      INFO(dtype_name(dtype) << " on " << fmt::format("{}", device));
      auto gradient_of_max = [&](const std::vector<double>& values, double g) {
        Tensor x = from_vector(values, {static_cast<std::int64_t>(values.size())}, {.dtype = dtype, .device = device});
        x.set_requires_grad(true);
        Tensor m = max(x);
        backward(m, full({}, g, {.dtype = dtype, .device = device}));
        CHECK(x.grad().dtype() == dtype);
        return x.grad().to(Device::cpu());
      };
      const double third = from_vector({2.0 / 3.0}, {1}, {.dtype = dtype}).item();  // 2/3 rounded once
      check_values(gradient_of_max({1, 3, 3, 2, 3}, 2.0), {0, third, third, 0, third}, 0, 0);
      check_values(gradient_of_max({1, 3, 0, 2}, 2.0), {0, 2, 0, 0}, 0, 0);  // one maximum takes it all
      check_values(gradient_of_max({1, kNaN, 3, kNaN}, 1.0), {0, 0.5, 0, 0.5}, 0, 0);
      check_values(gradient_of_max({-0.0, 0.0, -1}, 1.0), {0.5, 0.5, 0}, 0, 0);
    }
  }
  // Ties over more than one block of the CPU's reduction, and an f64 gradcheck away from ties.
  Tensor ones_everywhere = ones({100000}).set_requires_grad(true);
  backward(max(ones_everywhere));
  check_values(sum(ones_everywhere.grad()), {1.0}, 1e-6);
  check_values(max(ones_everywhere.grad()), {1.0 / 100000}, dtype_eps(DType::F32));
  check_gradients("max", [](const std::vector<Tensor>& in) { return max(in[0]); }, {f64({1, 4, 2}, {3})});
}

TEST_CASE("max: NaN propagates, and the first NaN is the argmax") {
  check_values(max(tensor({1, kNaN, 3})), {kNaN});
  check_values(max(tensor({kNaN, 5})), {kNaN});
  Tensor x = from_vector({1, kNaN, 3, 2}, {2, 2});
  check_values(max(x, 0), {3, kNaN});  // strided path
  check_values(max(x, 1), {kNaN, 3});  // contiguous path
  check_values(max(tensor({1, kNaN, 3}, {.dtype = DType::F16})), {kNaN});
  check_values(argmax(tensor({1, kNaN, 3, kNaN})), {1}, 0, 0);
  check_values(argmax(x, 0), {1, 0}, 0, 0);
}

TEST_CASE("max: f16 and bf16 return one of the inputs exactly") {
  for (DType dtype : {DType::F16, DType::BF16}) {
    Generator generator(9);
    Tensor x = uniform({6, 50}, -3, 3, generator).to(dtype);
    Tensor m = max(x, 1);
    CHECK(m.dtype() == dtype);
    check_values(m, reduce_reference(x, 1, line_max), 0, 0);
  }
}

TEST_CASE("argmax: flat and along dims, keepdim, first maximum, not differentiable") {
  Tensor x = from_vector({1, 5, 3, 4, 2, 6}, {2, 3}, {.requires_grad = true});
  Tensor flat = argmax(x);
  CHECK(flat.dtype() == DType::I32);
  CHECK(flat.shape() == Shape{});
  CHECK(flat.item() == 5.0);
  check_values(argmax(x, 0), {1, 0, 1}, 0, 0);
  check_values(argmax(x, 1), {1, 2}, 0, 0);
  CHECK(argmax(x, -1, true).shape() == Shape{2, 1});
  check_values(argmax(x, -1, true), {1, 2}, 0, 0);
  CHECK_FALSE(argmax(x, 1).requires_grad());
  check_values(argmax(tensor({2, 7, 7, 1})), {1}, 0, 0);  // ties: the first
  check_values(argmax(from_vector({4, 4, 1, 4}, {2, 2}), 0), {0, 0}, 0, 0);
  // 1.0001 and 1.0002 both round to 1 in f16: the tie then goes to the first.
  check_values(argmax(tensor({1.0001, 1.0002, 0.5}, {.dtype = DType::F16})), {0}, 0, 0);
  check_values(argmax(tensor({0.5, 1.0002, 1.0001}, {.dtype = DType::BF16})), {1}, 0, 0);
  check_error([] { argmax(zeros({0})); }, "mg::argmax: the tensor is empty");
  check_error([] { argmax(ones({2, 3}), 2); }, "mg::argmax: dim 2 is out of range");
  check_error([] { argmax(tensor({1, 2}, {.dtype = DType::I32})); }, "mg::argmax: needs a floating-point tensor");
}

TEST_CASE("broadcast_to: values, gradcheck and bad shapes") {
  check_values(broadcast_to(tensor({1, 2, 3}), {2, 3}), {1, 2, 3, 1, 2, 3});
  check_values(broadcast_to(from_vector({1, 2}, {2, 1}), {2, 3}), {1, 1, 1, 2, 2, 2});
  Tensor s = broadcast_to(from_vector({5}, Shape{}), {2, 2});
  CHECK(s.shape() == Shape{2, 2});
  check_values(s, {5, 5, 5, 5});
  Tensor x = random_f64({2, 1}, -1, 1, 1, false);
  std::vector<double> xv = x.to_vector<double>(), expected;
  for (int i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 2; ++j)
      for (int k = 0; k < 3; ++k) expected.push_back(xv[j]);
  Tensor b = broadcast_to(x, {4, 2, 3});
  CHECK(b.shape() == Shape{4, 2, 3});
  check_values(b, expected);
  check_gradients("broadcast_to [2,1]->[4,2,3]",
                  [](const std::vector<Tensor>& in) {
                    return broadcast_to(in[0], {4, 2, 3});
                  },
                  {random_f64({2, 1}, -1, 1, 2)});
  check_gradients("broadcast_to {}->[2,3]",
                  [](const std::vector<Tensor>& in) {
                    return broadcast_to(in[0], {2, 3});
                  },
                  {random_f64({}, -1, 1, 3)});
  check_values(broadcast_to(from_vector({0.1, -3}, {2, 1}, {.dtype = DType::F16}), {2, 2}),
               {0.0999755859375, 0.0999755859375, -3, -3}, 0, 0);  // f16 values copied, not rounded again
  check_error([] { broadcast_to(ones({2, 3}), {3, 3}); }, "mg::broadcast_to");
  check_error([] { broadcast_to(ones({2, 3}), {3}); }, "mg::broadcast_to: shape [2, 3] cannot be broadcast to [3]");
  check_error([] { broadcast_to(tensor({1}, {.dtype = DType::I32}), {2}); }, "mg::broadcast_to");
}

TEST_CASE("sum_to: values, gradcheck, f16 accumulation and bad shapes") {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  check_values(sum_to(x, {3}), {5, 7, 9});
  Tensor rows = sum_to(x, {2, 1});
  CHECK(rows.shape() == Shape{2, 1});
  check_values(rows, {6, 15});
  CHECK(sum_to(x, {1, 3}).shape() == Shape{1, 3});
  check_values(sum_to(x, {1, 3}), {5, 7, 9});
  CHECK(sum_to(x, {}).item() == 21.0);
  check_values(sum_to(x, {2, 3}), {1, 2, 3, 4, 5, 6});
  // [4,2,3] -> [2,1]: out[j] = sum over i, k of y[i,j,k].
  Tensor y = random_f64({4, 2, 3}, -1, 1, 1, false);
  std::vector<double> yv = y.to_vector<double>(), expected(2, 0.0);
  for (std::size_t i = 0; i < 24; ++i) expected[(i / 3) % 2] += yv[i];
  check_values(sum_to(y, {2, 1}), expected, 1e-14, 1e-14);
  check_gradients("sum_to [4,2,3]->[2,1]",
                  [](const std::vector<Tensor>& in) {
                    return sum_to(in[0], {2, 1});
                  },
                  {random_f64({4, 2, 3}, -1, 1, 2)});
  check_gradients("sum_to [2,3]->{}", [](const std::vector<Tensor>& in) { return sum_to(in[0], {}); },
                  {random_f64({2, 3}, -1, 1, 3)});
  check_gradients("sum_to [2,3]->[1,3]",
                  [](const std::vector<Tensor>& in) {
                    return sum_to(in[0], {1, 3});
                  },
                  {random_f64({2, 3}, -1, 1, 4)});
  // Summed in f32 and rounded once: a running f16 sum would stop at 2048, a bf16 one at 256.
  check_values(sum_to(ones({4096, 1}, {.dtype = DType::F16}), {1}), {4096}, 0, 0);
  check_values(sum_to(ones({2, 3000}, {.dtype = DType::F16}), {2, 1}), {3000, 3000}, 0, 0);
  check_values(sum_to(ones({1000, 2}, {.dtype = DType::BF16}), {2}), {1000, 1000}, 0, 0);
  check_error([&] { sum_to(x, {4}); }, "mg::sum_to: shapes [4] and [2, 3]");
  check_error([] { sum_to(ones({3}), {2, 3}); }, "mg::sum_to");
  check_error([] { sum_to(tensor({1, 2}, {.dtype = DType::I32}), {1}); }, "mg::sum_to");
}
