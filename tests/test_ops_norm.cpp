// layer_norm, batch_norm (autograd/norm.cpp) and dropout (autograd/dropout.cpp). Forward values are
// checked against hand-computed numbers and plain f64 loops, gradients with f64 gradchecks (train and
// evaluation mode, [N, C] and [N, C, H, W]), the running statistics against a hand computation
// (momentum 0.1, unbiased variance), the f32 statistics of 10^5 values within log2(n) eps (pairwise
// sums), the dtypes under autocast and on f16 directly, dropout's mask (seeding, rate, exact
// scaling, gradient, one rounding in f16), and bad input against errors.
#include <algorithm>
#include <cmath>
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

// (x - mean) / sqrt(var + eps) * weight + bias over the last dim, biased variance, in f64 loops.
std::vector<double> reference_layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const std::vector<double> xv = x.to_vector<double>();
  const std::vector<double> wv = weight.defined() ? weight.to_vector<double>() : std::vector<double>();
  const std::vector<double> bv = bias.defined() ? bias.to_vector<double>() : std::vector<double>();
  const std::size_t n = static_cast<std::size_t>(x.size(-1));
  std::vector<double> y(xv.size());
  for (std::size_t row = 0; row < xv.size() / n; ++row) {
    const double* v = xv.data() + row * n;
    double mean = 0.0, var = 0.0;
    for (std::size_t i = 0; i < n; ++i) mean += v[i] / static_cast<double>(n);
    for (std::size_t i = 0; i < n; ++i) var += (v[i] - mean) * (v[i] - mean) / static_cast<double>(n);
    for (std::size_t i = 0; i < n; ++i)
      y[row * n + i] = (v[i] - mean) / std::sqrt(var + eps) * (wv.empty() ? 1.0 : wv[i]) + (bv.empty() ? 0.0 : bv[i]);
  }
  return y;
}

// Batch norm of x [N, C, ...] in f64 loops: per-channel mean and biased variance over N and the
// spatial dims (training) or the given ones (evaluation). Also the batch's unbiased variance.
struct BatchNormReference {
  std::vector<double> y, mean, unbiased_var;
};

BatchNormReference reference_batch_norm(const Tensor& x, const std::vector<double>& eval_mean,
                                        const std::vector<double>& eval_var, const Tensor& weight, const Tensor& bias,
                                        double eps) {
  const std::vector<double> xv = x.to_vector<double>();
  const std::int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C);
  const double count = static_cast<double>(N * S);
  BatchNormReference r;
  r.y.resize(xv.size());
  for (std::int64_t c = 0; c < C; ++c) {
    double mean = 0.0, var = 0.0;
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t s = 0; s < S; ++s) mean += xv[(n * C + c) * S + s] / count;
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t s = 0; s < S; ++s) var += std::pow(xv[(n * C + c) * S + s] - mean, 2) / count;
    r.mean.push_back(mean);
    r.unbiased_var.push_back(var * count / (count - 1));
    if (!eval_mean.empty()) mean = eval_mean[c], var = eval_var[c];
    const double w = weight.defined() ? weight.to_vector<double>()[c] : 1.0;
    const double b = bias.defined() ? bias.to_vector<double>()[c] : 0.0;
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t s = 0; s < S; ++s) {
        const std::int64_t i = (n * C + c) * S + s;
        r.y[i] = (xv[i] - mean) / std::sqrt(var + eps) * w + b;
      }
  }
  return r;
}

double max_abs(const std::vector<double>& values) {
  double m = 0.0;
  for (double v : values) m = std::max(m, std::fabs(v));
  return m;
}

// The f32 statistics of a normalization: sums of n terms, a reciprocal square root, a product with
// the weight and a sum with the bias each add about 2^-24 of the largest |y|: (n + 8) * 2^-24.
double f32_statistics_error(std::int64_t n, const std::vector<double>& expected) {
  return static_cast<double>(n + 8) * 0x1p-24 * max_abs(expected);
}

}  // namespace

TEST_CASE("layer_norm: hand-computed row, then f64 loops over 2-D and 3-D inputs") {
  // mean 2.5, variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25: x_hat = [-1.5, -0.5, 0.5, 1.5] / sqrt(1.25).
  Tensor x = f64({1, 2, 3, 4}, {1, 4}, false);
  const double s = 1.0 / std::sqrt(1.25);
  check_values(layer_norm(x, {}, {}, 0.0), {-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s});
  check_values(layer_norm(x, f64({2, 1, 1, 0.5}, {4}, false), f64({0, 1, -1, 0.25}, {4}, false), 0.0),
               {-3 * s, 1 - 0.5 * s, 0.5 * s - 1, 0.75 * s + 0.25});
  for (const Shape& shape : {Shape{3, 5}, Shape{2, 3, 4}}) {
    Tensor x64 = random_f64(shape, -2.0, 2.0, 1), w = random_f64({shape.back()}, 0.5, 1.5, 2);
    Tensor b = random_f64({shape.back()}, -1.0, 1.0, 3);
    check_values(layer_norm(x64, w, b), reference_layer_norm(x64, w, b, 1e-5), 1e-12, 1e-12);
    check_values(layer_norm(x64, {}, {}, 0.1), reference_layer_norm(x64, {}, {}, 0.1), 1e-12, 1e-12);
    check_gradients("layer_norm x, weight, bias", [](const auto& t) { return layer_norm(t[0], t[1], t[2]); },
                    {x64, w, b});
    check_gradients("layer_norm x", [](const auto& t) { return layer_norm(t[0], {}, {}, 0.1); }, {x64});
  }
}

TEST_CASE("batch_norm: training and evaluation match f64 loops on [N, C] and [N, C, H, W]") {
  for (const Shape& shape : {Shape{5, 3}, Shape{2, 3, 2, 3}}) {
    INFO("shape " << fmt::format("{}", shape));
    Tensor x = random_f64(shape, -2.0, 2.0, 10), w = random_f64({3}, 0.5, 1.5, 11), b = random_f64({3}, -1, 1, 12);
    const std::vector<double> mean{0.1, -0.2, 0.3}, var{0.5, 1.5, 2.0};
    BatchNormReference train = reference_batch_norm(x, {}, {}, w, b, 1e-5);
    check_values(batch_norm(x, {}, {}, w, b), train.y, 1e-12, 1e-12);
    Tensor running_mean = f64(mean, {3}, false), running_var = f64(var, {3}, false);
    check_values(batch_norm(x, running_mean, running_var, w, b, {.training = false, .eps = 1e-3}),
                 reference_batch_norm(x, mean, var, w, b, 1e-3).y, 1e-12, 1e-12);
    check_values(running_mean, mean, 0.0, 0.0);  // evaluation leaves them alone
    // Training: running = 0.9 running + 0.1 batch, with the unbiased batch variance.
    batch_norm(x, running_mean, running_var, w, b);
    std::vector<double> expected_mean, expected_var;
    for (int c = 0; c < 3; ++c) {
      expected_mean.push_back(0.9 * mean[c] + 0.1 * train.mean[c]);
      expected_var.push_back(0.9 * var[c] + 0.1 * train.unbiased_var[c]);
    }
    check_values(running_mean, expected_mean, 1e-12, 1e-12);
    check_values(running_var, expected_var, 1e-12, 1e-12);
  }
}

TEST_CASE("layer_norm and batch_norm: statistics of 10^5 f32 values are summed pairwise (log2(n) eps)") {
  // x = 10 + u, u uniform in [0, 1): mean 10.5, standard deviation 0.29, so an error d in the mean
  // moves every y by d / 0.29. The mean's error is within log2(n) eps of mean |x| when the sums are
  // pairwise (test_ops_reduce); a running sum of 10^5 terms drifts ~sqrt(n) times further. The
  // variance is a mean of squares of the centred values (its own log2(n) eps), and the reciprocal
  // square root, the product and the stores a few more eps of |y|. layer_norm's sum runs along a
  // contiguous row, batch_norm's down the batch (dim 0 of [N, C]: the strided path).
  const std::int64_t n = 100000;
  const double eps = dtype_eps(DType::F32), levels = std::log2(static_cast<double>(n));
  Generator generator(21);
  const Tensor u = uniform({n, 2}, 0.0, 1.0, generator);
  const Tensor x = add(u, 10.0);  // f32 values; the references read them exactly
  auto check_normalized = [&](const Tensor& y, const std::vector<double>& expected, double sigma) {
    const double bound = (levels * 10.5 / sigma + (levels + 8) * max_abs(expected)) * eps;
    const std::vector<double> got = y.to_vector<double>();
    double worst = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - expected[i]));
    INFO("worst error " << worst / eps << " eps, bound " << bound / eps << " eps");
    CHECK(worst <= bound);
  };
  const BatchNormReference batch = reference_batch_norm(x, {}, {}, {}, {}, 1e-5);
  check_normalized(batch_norm(x, {}, {}, {}, {}), batch.y,
                   std::sqrt(std::min(batch.unbiased_var[0], batch.unbiased_var[1])));
  const Tensor rows = transpose(x, 0, 1);  // [2, n]
  const std::vector<double> layer = reference_layer_norm(rows, {}, {}, 1e-5);
  check_normalized(layer_norm(rows), layer, std::sqrt(std::min(batch.unbiased_var[0], batch.unbiased_var[1])));
}

TEST_CASE("batch_norm: gradcheck in training and evaluation mode") {
  auto train = [](const auto& t) { return batch_norm(t[0], {}, {}, t[1], t[2]); };
  auto eval = [](const auto& t) { return batch_norm(t[0], t[3], t[4], t[1], t[2], {.training = false}); };
  for (const Shape& shape : {Shape{4, 3}, Shape{2, 3, 2, 2}}) {
    Tensor x = random_f64(shape, -2.0, 2.0, 20), w = random_f64({3}, 0.5, 1.5, 21), b = random_f64({3}, -1, 1, 22);
    check_gradients("batch_norm train", train, {x, w, b});
    check_gradients("batch_norm eval", eval,
                    {x, w, b, random_f64({3}, -0.5, 0.5, 23, false), random_f64({3}, 0.5, 2.0, 24, false)});
    check_gradients("batch_norm train, no affine", [](const auto& t) { return batch_norm(t[0], {}, {}, {}, {}); }, {x});
  }
  // Running statistics updated on every call do not enter the training-mode output.
  Tensor running_mean = zeros({3}), running_var = ones({3});
  check_gradients("batch_norm train with running statistics",
                  [&](const auto& t) { return batch_norm(t[0], running_mean, running_var, t[1], t[2]); },
                  {random_f64({3, 3, 2}, -1, 1, 25), random_f64({3}, 0.5, 1.5, 26), random_f64({3}, -1, 1, 27)});
}

TEST_CASE("layer_norm and batch_norm: f32 under autocast, f16 on f16 directly, statistics in f32") {
  Tensor x32 = random_f64({4, 6}, -2.0, 2.0, 30, false).to(DType::F32);
  Tensor xh = x32.to(DType::F16), w = random_f64({6}, 0.5, 1.5, 31, false).to(DType::F32);
  Tensor b = random_f64({6}, -1.0, 1.0, 32, false).to(DType::F32);
  const std::vector<double> expected = reference_layer_norm(xh, w, b, 1e-5);  // over the f16 values
  {
    Autocast autocast(DType::F16);
    Tensor y = layer_norm(xh, w, b);
    CHECK(y.dtype() == DType::F32);
    check_values(y, expected, 0.0, f32_statistics_error(6, expected));
  }
  // Directly on f16: f32 statistics, rounded once (0.5 ulp) to f16.
  Tensor yh = layer_norm(xh, w.to(DType::F16), b.to(DType::F16));
  CHECK(yh.dtype() == DType::F16);
  check_values(yh, reference_layer_norm(xh, w.to(DType::F16), b.to(DType::F16), 1e-5), tolerance(DType::F16, 0.5),
               f32_statistics_error(6, expected));
  // A row whose sum (160192) overflows f16: the statistics must not be computed in f16.
  Tensor big = from_vector({40000, 40032, 40064, 40096}, {1, 4}, {.dtype = DType::F16});
  const double s = 1.0 / std::sqrt(1.25 + 1e-5 / 1024.0);  // variance 1.25 * 32^2
  check_values(layer_norm(big), {-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s}, tolerance(DType::F16, 0.5),
               f32_statistics_error(4, {1.5 * s}));

  // batch_norm: x [4, 2] exact in f16; channel means 2.5 and 25, unbiased variances 5/3 and 500/3.
  Tensor xb = from_vector({1, 10, 2, 20, 3, 30, 4, 40}, {4, 2}, {.dtype = DType::F16});
  const std::vector<double> running_mean_after{0.25, 2.5}, running_var_after{0.9 + 0.1 * 5 / 3, 0.9 + 0.1 * 500 / 3};
  const std::vector<double> batch_y = reference_batch_norm(xb, {}, {}, {}, {}, 1e-5).y;
  for (bool under_autocast : {true, false}) {
    INFO("under autocast: " << under_autocast);
    Tensor running_mean = zeros({2}), running_var = ones({2});
    Tensor y;
    {
      Autocast autocast(DType::F16, under_autocast);
      // f32 weight and bias under autocast (cast by the policy), f16 ones outside it.
      const DType affine = under_autocast ? DType::F32 : DType::F16;
      y = batch_norm(xb, running_mean, running_var, ones({2}, {.dtype = affine}), zeros({2}, {.dtype = affine}));
    }
    CHECK(y.dtype() == (under_autocast ? DType::F32 : DType::F16));
    check_values(y, batch_y, under_autocast ? 0.0 : tolerance(DType::F16, 0.5), f32_statistics_error(4, batch_y));
    CHECK(running_mean.dtype() == DType::F32);
    CHECK(running_var.dtype() == DType::F32);
    check_values(running_mean, running_mean_after, 4 * 0x1p-24, 0.0);  // a few f32 roundings
    check_values(running_var, running_var_after, 4 * 0x1p-24, 0.0);
    // Evaluation with the updated statistics: (x - running_mean) / sqrt(running_var + eps).
    Tensor eval = batch_norm(xb, running_mean, running_var, {}, {}, {.training = false});
    CHECK(eval.dtype() == DType::F16);
    const std::vector<double> eval_y = reference_batch_norm(xb, running_mean_after, running_var_after, {}, {}, 1e-5).y;
    check_values(eval, eval_y, tolerance(DType::F16, 0.5), f32_statistics_error(4, eval_y));
  }
}

TEST_CASE("dropout: evaluation, p = 0 and p = 1") {
  Generator generator(7);
  Tensor x = from_vector({1, -2, 3, 4}, {4});
  for (Tensor y : {dropout(x, 0.5, false, generator), dropout(x, 0.0, true, generator)}) {
    CHECK(y.shares_storage_with(x));
    check_values(y, {1, -2, 3, 4}, 0.0, 0.0);
  }
  CHECK(generator.offset() == 0);  // no mask was drawn
  Tensor leaf = from_vector({1, -2, 3, 4}, {4}, {.requires_grad = true});
  Tensor zero = dropout(leaf, 1.0, true, generator);
  check_values(zero, {0, 0, 0, 0}, 0.0, 0.0);
  backward(zero, ones({4}));
  check_values(leaf.grad(), {0, 0, 0, 0}, 0.0, 0.0);
}

TEST_CASE("dropout: the mask follows the seed, and survivors are scaled exactly in f32") {
  Tensor x = random_f64({1000}, 0.5, 1.5, 40, false).to(DType::F32);
  auto draw = [&](std::uint64_t seed, double p) {
    Generator generator(seed);
    return dropout(x, p, true, generator).to_vector<float>();
  };
  CHECK(draw(1, 0.5) == draw(1, 0.5));
  CHECK(draw(1, 0.5) != draw(2, 0.5));
  const std::vector<float> xv = x.to_vector<float>();
  for (double p : {0.1, 0.3, 0.5, 0.75}) {
    INFO("p = " << p);
    // x * keep is exact (keep is 0 or 1), then one f32 multiplication by 1 / (1 - p) in f32.
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    const std::vector<float> y = draw(3, p);
    int survivors = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      INFO("element " << i << ": x " << xv[i] << ", y " << y[i]);
      CHECK((y[i] == 0.0f || y[i] == xv[i] * scale));
      survivors += y[i] != 0.0f;
    }
    CHECK(survivors > 0);
    CHECK(survivors < 1000);
  }
}

TEST_CASE("dropout: the fraction dropped over 100k elements is within 5 standard deviations of p") {
  Generator generator(50);
  Tensor x = ones({100000});
  for (double p : {0.1, 0.5, 0.9}) {
    const std::vector<float> y = dropout(x, p, true, generator).to_vector<float>();
    const double dropped = static_cast<double>(std::count(y.begin(), y.end(), 0.0f)) / 1e5;
    INFO("p = " << p << ", dropped " << dropped);
    CHECK(std::fabs(dropped - p) <= 5 * std::sqrt(p * (1 - p) / 1e5));
  }
}

TEST_CASE("dropout: the gradient is mask / (1 - p), in f32 and by gradcheck in f64") {
  const double p = 0.3;
  Tensor x = random_f64({500}, 0.5, 1.5, 60, false).to(DType::F32).set_requires_grad(true);
  Generator generator(61);
  Tensor y = dropout(x, p, true, generator);
  backward(y, ones({500}));
  const std::vector<float> yv = y.to_vector<float>(), grad = x.grad().to_vector<float>();
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  for (std::size_t i = 0; i < yv.size(); ++i) {
    INFO("element " << i);
    CHECK(grad[i] == (yv[i] == 0.0f ? 0.0f : scale));  // x > 0, so y = 0 exactly where dropped
  }
  check_gradients("dropout",
                  [p](const auto& t) {
                    Generator same_mask(62);  // a fresh generator per evaluation: the same mask every time
                    return dropout(t[0], p, true, same_mask);
                  },
                  {random_f64({4, 5}, -1.0, 1.0, 63)});
}

TEST_CASE("dropout: in f16 the survivors are x / (1 - p) rounded once") {
  // Every f16 value in [1, 2), [2^-6, 2^-5) and the subnormal [2^-20, 2^-19) (spacing 2^-24: four
  // of the generated values round to each stored one), both signs.
  std::vector<double> generated;
  for (int i = 0; i < 1024; ++i)
    for (double scale : {1.0, -1.0, 0x1p-6, -0x1p-6, 0x1p-20, -0x1p-20})
      generated.push_back((1.0 + i * 0x1p-10) * scale);
  const std::int64_t n = static_cast<std::int64_t>(generated.size());
  Tensor x = from_vector(generated, {n}, {.dtype = DType::F16});
  const std::vector<double> values = x.to_vector<double>();
  for (double p : {0.1, 0.25, 0.3, 0.5}) {
    INFO("p = " << p);
    Generator generator(70);
    const std::vector<double> y = dropout(x, p, true, generator).to_vector<double>();
    std::vector<double> quotients;
    for (double v : values) quotients.push_back(v / (1.0 - p));
    // Rounded once from f64 (README: from f64 the rounding is done once), as to_f16 does.
    const std::vector<double> expected = from_vector(quotients, {n}, {.dtype = DType::F16}).to_vector<double>();
    std::size_t dropped = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      INFO("x " << values[i] << ": got " << y[i] << ", expected " << expected[i]);
      if (y[i] == 0.0)
        ++dropped;
      else
        CHECK(y[i] == expected[i]);
    }
    const double count = static_cast<double>(n);
    CHECK(std::fabs(static_cast<double>(dropped) / count - p) <= 5 * std::sqrt(p * (1 - p) / count));
  }
}

TEST_CASE("layer_norm, batch_norm and dropout: bad input names the op") {
  Tensor x = zeros({2, 4});
  check_error([&] { layer_norm(x, zeros({3})); }, "mg::layer_norm");  // weight [3] for 4 features
  check_error([&] { layer_norm(x, zeros({4}), zeros({2, 2})); }, "mg::layer_norm");
  check_error([&] { layer_norm(x, {}, {}, -1.0); }, "mg::layer_norm");
  check_error([&] { layer_norm(zeros({}), {}, {}); }, "mg::layer_norm");  // no last dim
  check_error([&] { batch_norm(zeros({1, 3}), {}, {}, {}, {}); }, "mg::batch_norm");  // one value per channel
  check_error([&] { batch_norm(zeros({1, 3, 1, 1}), {}, {}, {}, {}); }, "mg::batch_norm");
  check_error([&] { batch_norm(zeros({4}), {}, {}, {}, {}); }, "mg::batch_norm");  // rank 1
  check_error([&] { batch_norm(x, {}, {}, zeros({3}), {}); }, "mg::batch_norm");  // weight [3] for C = 4
  check_error([&] { batch_norm(x, zeros({4}), {}, {}, {}); }, "mg::batch_norm");  // one running stat
  check_error([&] { batch_norm(x, {}, {}, {}, {}, {.training = false}); }, "mg::batch_norm");  // eval, no stats
  check_error([&] { batch_norm(x, {}, {}, {}, {}, {.momentum = 1.5}); }, "mg::batch_norm");
  // One value per channel is fine in evaluation mode.
  CHECK(batch_norm(zeros({1, 4}), zeros({4}), ones({4}), {}, {}, {.training = false}).shape() == Shape{1, 4});
  Generator generator(0);
  for (double p : {-0.1, 1.5, std::nan("")}) check_error([&] { dropout(x, p, true, generator); }, "mg::dropout");
  check_error([&] { dropout(zeros({3}, {.dtype = DType::I32}), 0.5, true, generator); }, "mg::dropout");
}

TEST_CASE("layer_norm and batch_norm: f16 input with f32 weight outside autocast is an error") {
  // README: "No implicit casts outside autocast: mixing f32 and f16 in one op is an mg::Error".
  Tensor xh = zeros({2, 4}, {.dtype = DType::F16});
  SUBCASE("layer_norm") {
    check_error([&] { layer_norm(xh, ones({4})); }, "mg::layer_norm");
  }
  SUBCASE("batch_norm") {
    check_error([&] { batch_norm(xh, {}, {}, ones({4}), zeros({4})); }, "mg::batch_norm");
  }
}
