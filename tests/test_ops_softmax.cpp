// softmax and log_softmax (autograd/softmax.cpp, kernels/cpu/softmax.cpp) along the last dim and a
// middle dim of a 3-D tensor, huge logits (+-1000) that must stay finite, and the losses
// (autograd/loss.cpp): cross_entropy with Reduction Mean/Sum/None and ignore_index (a mean over only
// ignored rows is NaN), and mse_loss. Forward values against hand-computed numbers and f64 loops,
// f64 gradchecks, f16/bf16 against an f64 reference of the rounded inputs, and bad input errors.
// Rows holding +inf, NaN or only -inf give PyTorch's results, on every device of the build.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

const double kLn2 = std::log(2.0), kLn3 = std::log(3.0), kLn6 = std::log(6.0);

// softmax (or log_softmax) along `dim` by plain loops in f64: x viewed as [outer, n, inner].
std::vector<double> softmax_reference(const Tensor& x, std::int64_t dim, bool log) {
  const auto d = static_cast<std::size_t>(dim < 0 ? dim + x.dim() : dim);
  std::size_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < d; ++i) outer *= static_cast<std::size_t>(x.shape()[i]);
  for (std::size_t i = d + 1; i < x.shape().size(); ++i) inner *= static_cast<std::size_t>(x.shape()[i]);
  const auto n = static_cast<std::size_t>(x.shape()[d]);
  std::vector<double> v = x.to_vector<double>(), out(v.size());
  for (std::size_t o = 0; o < outer; ++o) {
    for (std::size_t i = 0; i < inner; ++i) {
      auto at = [&](std::size_t j) { return (o * n + j) * inner + i; };
      double m = -INFINITY, s = 0;
      for (std::size_t j = 0; j < n; ++j) m = std::max(m, v[at(j)]);
      for (std::size_t j = 0; j < n; ++j) s += std::exp(v[at(j)] - m);
      for (std::size_t j = 0; j < n; ++j) out[at(j)] = log ? v[at(j)] - m - std::log(s) : std::exp(v[at(j)] - m) / s;
    }
  }
  return out;
}

// Per-row cross-entropy losses in f64 (0 for ignored rows).
std::vector<double> cross_entropy_rows(const Tensor& logits, const std::vector<int>& labels, int ignore = -100) {
  const std::vector<double> lsm = softmax_reference(logits, 1, true);
  const auto classes = static_cast<std::size_t>(logits.size(1));
  std::vector<double> rows;
  for (std::size_t r = 0; r < labels.size(); ++r)
    rows.push_back(labels[r] == ignore ? 0.0 : -lsm[r * classes + static_cast<std::size_t>(labels[r])]);
  return rows;
}

Tensor labels_of(const std::vector<int>& labels) {
  return tensor(std::vector<double>(labels.begin(), labels.end()), {.dtype = DType::I32});
}

// The f32 math of a softmax over n values is absolute-error bounded by about (n + 4) * 2^-24 * (1 + |y|):
// n exponentials and additions into the sum, a log or a division, and the subtractions.
double f32_softmax_slack(std::int64_t n, double magnitude) {
  return static_cast<double>(n + 4) * 0x1p-24 * (1 + magnitude);
}

}  // namespace

TEST_CASE("softmax: last dim hand-computed, shift invariant") {
  Tensor x = f64({0, kLn2, kLn3, 5, 5, 5}, {2, 3}, false);
  check_values(softmax(x, 1), {1.0 / 6, 1.0 / 3, 0.5, 1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-15);
  check_values(softmax(x, -1), {1.0 / 6, 1.0 / 3, 0.5, 1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-15);
  check_values(softmax(add(x, 100.0), -1), {1.0 / 6, 1.0 / 3, 0.5, 1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-13);
  Tensor y = softmax(tensor({1, 2, 3, 4}), 0);  // f32, against the f64 loops
  CHECK(y.dtype() == DType::F32);
  check_values(y, softmax_reference(tensor({1, 2, 3, 4}, {.dtype = DType::F64}), 0, false), 1e-6);
}

TEST_CASE("log_softmax: last dim hand-computed") {
  Tensor x = f64({0, kLn2, kLn3, 5, 5, 5}, {2, 3}, false);
  check_values(log_softmax(x, -1), {-kLn6, -kLn3, -kLn2, -kLn3, -kLn3, -kLn3}, 1e-15, 1e-15);
  check_values(log_softmax(add(x, -50.0), 1), {-kLn6, -kLn3, -kLn2, -kLn3, -kLn3, -kLn3}, 1e-13, 1e-13);
}

TEST_CASE("softmax: middle and outer dims of a 3-D tensor, gradcheck") {
  Tensor x = random_f64({2, 3, 4}, -2, 2, 1, false);
  for (std::int64_t dim : {1, -2, 0, 2}) {
    INFO("dim " << dim);
    Tensor y = softmax(x, dim);
    check_values(y, softmax_reference(x, dim, false), 1e-14, 1e-15);
    check_values(sum(y, dim), std::vector<double>(static_cast<std::size_t>(24 / x.size(dim)), 1.0), 1e-14);
    check_gradients("softmax", [dim](const std::vector<Tensor>& in) { return softmax(in[0], dim); },
                    {random_f64({2, 3, 4}, -2, 2, 2)});
  }
}

TEST_CASE("log_softmax: middle and outer dims of a 3-D tensor, gradcheck") {
  Tensor x = random_f64({2, 3, 4}, -2, 2, 3, false);
  for (std::int64_t dim : {1, -2, 0, 2}) {
    INFO("dim " << dim);
    check_values(log_softmax(x, dim), softmax_reference(x, dim, true), 1e-14, 1e-14);
    check_gradients("log_softmax", [dim](const std::vector<Tensor>& in) { return log_softmax(in[0], dim); },
                    {random_f64({2, 3, 4}, -2, 2, 4)});
  }
}

TEST_CASE("softmax: huge logits stay finite, forward and backward") {
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {  // +-1000 and -2000 are exact in all three
    INFO("dtype " << dtype_name(dtype));
    Tensor x = from_vector({1000, -1000, 0, 1000, 1000, -1000}, {2, 3}, {.dtype = dtype, .requires_grad = true});
    check_values(softmax(x, 1), {1, 0, 0, 0.5, 0.5, 0}, 0, 0);
    double rtol = tolerance(dtype, 0.5) + 1e-6;  // one rounding of the result, f32 math
    check_values(log_softmax(x, 1), {0, -2000, -1000, -kLn2, -kLn2, -2000 - kLn2}, rtol);
    backward(sum(log_softmax(x, 1)));  // dx = 1 - 3 exp(y), finite
    // y = -ln2 is saved rounded (0.5 ulp), 3 exp(y) triples that, and the store rounds: 2 eps absolute.
    check_values(x.grad(), {-2, 1, 1, -0.5, -0.5, 1}, 0, tolerance(dtype, 2));
    Tensor logits = from_vector({1000, -1000, -1000, 1000}, {2, 2}, {.dtype = dtype});
    check_values(cross_entropy(logits, labels_of({1, 1}), {.reduction = Reduction::None}), {2000, 0}, 0, 0);
  }
}

TEST_CASE("softmax and log_softmax: +inf or NaN, or only -inf, make the whole row NaN, as in PyTorch") {
  // torch.softmax / torch.log_softmax (1.13) of each row, and the gradient for dy = [0.5, -1, 2]: a
  // -inf alone gets probability 0; any other non-finite row is NaN everywhere, forward and backward.
  // Along dim 1 (contiguous rows) and along dim 0 of the transpose (rows `inner` apart), on every device.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> rows{1, inf, 2, 1, nan, 2, -inf, 0, 1, -inf, -inf, -inf, -inf, inf, 0};
  const std::vector<double> dy_row{0.5, -1, 2};
  const std::vector<double> all_nan(3, nan);
  // Row 2, [-inf, 0, 1], printed by torch in f32.
  const std::vector<double> softmax_torch{0, 0.2689414322376251, 0.7310585975646973};
  const std::vector<double> softmax_grad_torch{0, -0.5898358225822449, 0.5898357629776001};
  const std::vector<double> log_softmax_torch{-inf, -1.31326162815094, -0.31326165795326233};
  const std::vector<double> log_softmax_grad_torch{0.5, -1.403412103652954, 0.9034121036529541};
  std::vector<Device> devices{Device::cpu()};
  if (cuda_device_count() > 0) devices.push_back(Device::cuda());
  for (Device device : devices) {
    for (bool log : {false, true}) {
      for (std::int64_t dim : {1, 0}) {
        INFO(fmt::format("{} along dim {} on {}", log ? "log_softmax" : "softmax", dim, device));
        Tensor x = from_vector(rows, {5, 3});
        std::vector<double> dy_values;
        for (int r = 0; r < 5; ++r) dy_values.insert(dy_values.end(), dy_row.begin(), dy_row.end());
        Tensor dy = from_vector(dy_values, {5, 3});
        if (dim == 0) x = transpose(x, 0, 1), dy = transpose(dy, 0, 1);
        x = x.to(device).set_requires_grad(true);
        Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
        backward(y, dy.to(device));
        Tensor y_rows = y.to(Device::cpu()), dx_rows = x.grad().to(Device::cpu());
        if (dim == 0) y_rows = transpose(y_rows, 0, 1), dx_rows = transpose(dx_rows, 0, 1);
        for (std::int64_t r = 0; r < 5; ++r) {
          INFO("row " << r);
          const bool finite = r == 2;
          const Tensor y_r = slice(y_rows, 0, r, r + 1), dx_r = slice(dx_rows, 0, r, r + 1);
          // log_softmax's error is absolute: y = x - max - log(sum), and the log of the sum carries the
          // errors of each exp (CUDA's expf is within 2 ulp, logf within 1: the CUDA Math API's tables)
          // and of the sum's roundings, whatever the size of y. An H200 gave 3 ulp of -0.313 (8.9e-8).
          check_values(y_r, finite ? (log ? log_softmax_torch : softmax_torch) : all_nan, 2 * dtype_eps(DType::F32),
                       log ? 4 * dtype_eps(DType::F32) : 0.0);
          check_values(dx_r, finite ? (log ? log_softmax_grad_torch : softmax_grad_torch) : all_nan,
                       4 * dtype_eps(DType::F32));
        }
      }
    }
  }
}

TEST_CASE("softmax: f16 and bf16 against an f64 reference") {
  for (DType dtype : {DType::F16, DType::BF16}) {
    INFO("dtype " << dtype_name(dtype));
    Generator generator(7);
    Tensor rows = uniform({3, 16}, -4, 4, generator).to(dtype);  // exact inputs
    Tensor middle = uniform({2, 16, 3}, -4, 4, generator).to(dtype);
    for (auto [x, dim] : {std::pair{rows, std::int64_t{1}}, std::pair{middle, std::int64_t{1}}}) {
      Tensor x64 = x.to(DType::F64);
      Tensor y = softmax(x, dim), ly = log_softmax(x, dim);
      CHECK(y.dtype() == dtype);
      // f32 math (f32_softmax_slack), then one rounding on store: 0.5 ulp of each value.
      check_values(y, softmax_reference(x64, dim, false), tolerance(dtype, 0.5), f32_softmax_slack(16, 1));
      check_values(ly, softmax_reference(x64, dim, true), tolerance(dtype, 0.5),
                   f32_softmax_slack(16, 8 + std::log(16.0)));
    }
  }
}

TEST_CASE("softmax: bad input") {
  Tensor i = tensor({1, 2}, {.dtype = DType::I32});
  check_error([&] { softmax(i, 0); }, "mg::softmax: needs a floating-point tensor");
  check_error([&] { log_softmax(i, 0); }, "mg::log_softmax: needs a floating-point tensor");
  check_error([] { softmax(ones({2, 3}), 2); }, "mg::softmax: dim 2 is out of range");
  check_error([] { log_softmax(ones({2, 3}), -3); }, "mg::log_softmax: dim -3 is out of range");
}

TEST_CASE("cross_entropy: hand-computed loss for each reduction") {
  Tensor logits = f64({0, kLn2, kLn3, 0, 0, 0}, {2, 3}, false);
  Tensor labels = labels_of({2, 0});  // row losses ln6 - ln3 = ln2 and ln3 - 0 = ln3
  Tensor mean_loss = cross_entropy(logits, labels);
  CHECK(mean_loss.shape() == Shape{});
  check_values(mean_loss, {(kLn2 + kLn3) / 2}, 1e-15);
  check_values(cross_entropy(logits, labels, {.reduction = Reduction::Sum}), {kLn6}, 1e-15);
  Tensor rows = cross_entropy(logits, labels, {.reduction = Reduction::None});
  CHECK(rows.shape() == Shape{2});
  check_values(rows, {kLn2, kLn3}, 1e-15);
  // f32 logits give an f32 loss.
  Tensor f32_loss = cross_entropy(logits.to(DType::F32), labels);
  CHECK(f32_loss.dtype() == DType::F32);
  check_values(f32_loss, {(kLn2 + kLn3) / 2}, 1e-6);
  // The gradient is (softmax - one_hot) / rows.
  Tensor x = f64({0, kLn2, kLn3, 0, 0, 0}, {2, 3});
  backward(cross_entropy(x, labels));
  check_values(x.grad(), {1.0 / 12, 1.0 / 6, -0.25, -1.0 / 3, 1.0 / 6, 1.0 / 6}, 1e-14, 1e-15);
}

TEST_CASE("cross_entropy: ignore_index rows count for nothing") {
  Tensor logits = f64({0, kLn2, kLn3, 0, 0, 0}, {2, 3});
  Tensor labels = labels_of({2, -100});
  check_values(cross_entropy(logits, labels), {kLn2}, 1e-15);  // the mean divides by 1 counted row
  check_values(cross_entropy(logits, labels, {.reduction = Reduction::Sum}), {kLn2}, 1e-15);
  check_values(cross_entropy(logits, labels, {.reduction = Reduction::None}), {kLn2, 0}, 1e-15);
  backward(cross_entropy(logits, labels));
  check_values(logits.grad(), {1.0 / 6, 1.0 / 3, -0.5, 0, 0, 0}, 1e-14, 1e-15);
  // A custom ignore_index may be a valid class.
  Tensor three = f64({0, kLn2, kLn3, 0, 0, 0, 1, 1, 1}, {3, 3}, false);
  check_values(cross_entropy(three, labels_of({1, 0, 1}), {.ignore_index = 1}), {kLn3}, 1e-15);
  // Only ignored rows: the mean is 0 / 0 = NaN (as PyTorch); the sum is 0.
  Tensor none = labels_of({-100, -100});
  check_values(cross_entropy(logits, none), {std::numeric_limits<double>::quiet_NaN()});
  check_values(cross_entropy(logits, none, {.reduction = Reduction::Sum}), {0}, 0, 0);
  check_values(cross_entropy(logits, none, {.reduction = Reduction::None}), {0, 0}, 0, 0);
  check_values(cross_entropy(logits.to(DType::F16), none), {std::numeric_limits<double>::quiet_NaN()});
}

TEST_CASE("cross_entropy: gradcheck for every reduction, with ignore_index rows") {
  Tensor labels = labels_of({0, 3, -100, 1, -100});
  for (Reduction reduction : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    INFO("reduction " << static_cast<int>(reduction));
    check_gradients("cross_entropy",
                    [&](const std::vector<Tensor>& in) {
                      return cross_entropy(in[0], labels, {.reduction = reduction});
                    },
                    {random_f64({5, 4}, -3, 3, 1)});
  }
  Tensor custom = labels_of({2, 0, 1, 2, 3});
  check_gradients("cross_entropy ignore_index 2",
                  [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], custom, {.ignore_index = 2}); },
                  {random_f64({5, 4}, -3, 3, 2)});
  Tensor logits = random_f64({5, 4}, -3, 3, 2, false);
  std::vector<double> rows = cross_entropy_rows(logits, {2, 0, 1, 2, 3}, 2);
  check_values(cross_entropy(logits, custom, {.reduction = Reduction::None, .ignore_index = 2}), rows, 1e-14, 1e-15);
}

TEST_CASE("cross_entropy: f16 and bf16 loss against an f64 reference") {
  Generator generator(3);
  Tensor labels = randint(0, 10, {8}, generator);
  std::vector<int> label_values;
  for (double v : labels.to_vector<double>()) label_values.push_back(static_cast<int>(v));
  for (DType dtype : {DType::F16, DType::BF16}) {
    INFO("dtype " << dtype_name(dtype));
    Tensor logits = uniform({8, 10}, -4, 4, generator).to(dtype);  // exact inputs
    std::vector<double> rows = cross_entropy_rows(logits.to(DType::F64), label_values);
    double total = 0;
    for (double r : rows) total += r;
    // All math in f32 (f32_softmax_slack per row, lse up to 4 + ln 10), one rounding on store.
    double slack = 8 * f32_softmax_slack(10, 8 + std::log(10.0));
    Tensor none = cross_entropy(logits, labels, {.reduction = Reduction::None});
    CHECK(none.dtype() == dtype);
    check_values(none, rows, tolerance(dtype, 0.5), slack);
    check_values(cross_entropy(logits, labels, {.reduction = Reduction::Sum}), {total}, tolerance(dtype, 0.5), slack);
    check_values(cross_entropy(logits, labels), {total / 8}, tolerance(dtype, 0.5), slack);
  }
}

TEST_CASE("cross_entropy: bad input") {
  Tensor logits = ones({2, 3});
  check_error([&] { cross_entropy(logits, labels_of({0, 3})); }, "mg::cross_entropy: label 3 at row 1 is out of range");
  check_error([&] { cross_entropy(logits, labels_of({-1, 0})); }, "mg::cross_entropy: label -1 at row 0");
  check_error([&] { cross_entropy(logits, tensor({0, 1})); }, "mg::cross_entropy: labels must be i32");
  check_error([&] { cross_entropy(logits, labels_of({0, 1, 2})); }, "mg::cross_entropy: labels must be [rows] = [2]");
  check_error([] { cross_entropy(ones({3}), labels_of({0})); }, "mg::cross_entropy: logits must be [rows, classes]");
  check_error([] { cross_entropy(ones({1, 2, 3}), labels_of({0})); }, "mg::cross_entropy: logits must be");
  check_error(
      [] {
        cross_entropy(from_vector({1, 2}, {1, 2}, {.dtype = DType::I32}), labels_of({0}));
      },
      "mg::cross_entropy: needs a floating-point tensor");
  check_error([] { cross_entropy(zeros({0, 3}), labels_of({})); }, "mg::cross_entropy: the tensor is empty");
}

TEST_CASE("mse_loss: Mean, Sum and None values and gradcheck") {
  Tensor prediction = tensor({1, 2, 3}), target = tensor({1.5, 2, 1});
  check_values(mse_loss(prediction, target), {4.25 / 3}, 1e-7);  // f32
  check_values(mse_loss(prediction, target, Reduction::Sum), {4.25});
  Tensor none = mse_loss(prediction, target, Reduction::None);
  CHECK(none.shape() == Shape{3});
  check_values(none, {0.25, 0, 4});
  for (Reduction reduction : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    check_gradients("mse_loss",
                    [reduction](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], reduction); },
                    {random_f64({2, 3}, -1, 1, 1), random_f64({2, 3}, -1, 1, 2)});
  }
  for (DType dtype : {DType::F16, DType::BF16}) {
    INFO("dtype " << dtype_name(dtype));
    Generator generator(4);
    Tensor p = uniform({64}, -2, 2, generator).to(dtype), t = uniform({64}, -2, 2, generator).to(dtype);
    std::vector<double> pv = p.to_vector<double>(), tv = t.to_vector<double>();
    double total = 0;
    for (std::size_t i = 0; i < 64; ++i) total += (pv[i] - tv[i]) * (pv[i] - tv[i]);
    // Rounded three times: the difference (0.5 ulp, doubled by squaring), the square, the mean.
    check_values(mse_loss(p, t), {total / 64}, tolerance(dtype, 2.0));
  }
}

TEST_CASE("mse_loss: bad input") {
  check_error([] { mse_loss(ones({3}), ones({2})); }, "mg::mse_loss: prediction [3] and target [2]");
  check_error([] { mse_loss(ones({2, 3}), ones({3})); }, "mg::mse_loss");  // no broadcasting
  check_error([] { mse_loss(ones({3}), ones({3}, {.dtype = DType::F16})); }, "mg::mse_loss");
  Tensor i = tensor({1, 2}, {.dtype = DType::I32});
  check_error([&] { mse_loss(i, i); }, "mg::mse_loss");
}
