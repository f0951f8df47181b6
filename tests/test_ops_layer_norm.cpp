// The fused layer_norm (autograd/norm.cpp, kernels/cpu/layer_norm.cpp) against its composition from
// the tape's ops (mean, sub, mul, pow, add: what the op was before, and what a GPU still runs), forward
// and the three gradients: in f64 to 1e-12 (rows of 1, 5, 7 and 300 features, with and without the
// weight and the bias); in f32, bf16 and f16 within bounds from the dtype; under autocast, where a
// bf16 or f16 x is read as it is, the same bits as casting it to f32 first, and only x, the means and
// the rstds saved; the same bits on 1 and 2 threads; and the errors.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/layer_norm.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

// layer_norm from the tape's ops, as the op computed it before it was fused.
Tensor composed(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  Tensor centered = sub(x, mean(x, -1, true));
  Tensor y = mul(centered, pow(add(mean(mul(centered, centered), -1, true), eps), -0.5));
  if (weight.defined()) y = mul(y, weight);
  if (bias.defined()) y = add(y, bias);
  return y;
}

struct Result {
  Tensor y, dx, dw, db;
};

// y = norm(x, w, b) and the gradients of sum(y * g), on fresh leaf copies of x, w and b (w and b may be undefined).
template <class Norm>
Result run(const Norm& norm, const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Tensor& g) {
  auto leaf = [](const Tensor& t) { return t.defined() ? t.detach().set_requires_grad(true) : Tensor(); };
  const Tensor x = leaf(x_in), w = leaf(w_in), b = leaf(b_in);
  const Tensor y = norm(x, w, b);
  backward(sum(mul(cast(y, g.dtype()), g)));
  return {y.detach(), x.grad(), w.defined() ? w.grad() : Tensor(), b.defined() ? b.grad() : Tensor()};
}

Tensor fused(const Tensor& x, const Tensor& w, const Tensor& b) { return layer_norm(x, w, b, 1e-5); }
Tensor reference(const Tensor& x, const Tensor& w, const Tensor& b) { return composed(x, w, b, 1e-5); }

// Same dtype, shape and values: the same bits (no NaN here).
bool same_values(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.to_vector<double>() == b.to_vector<double>();
}

double largest(const Tensor& t) {
  const std::vector<double> v = t.to_vector<double>();
  double m = 0.0;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

// got within rtol |expected| + atol of the f64 tensor expected.
void close(const char* what, const Tensor& got, const Tensor& expected, double rtol, double atol) {
  INFO(what);
  REQUIRE(got.defined() == expected.defined());
  if (got.defined()) check_values(got, expected.to_vector<double>(), rtol, atol);
}

}  // namespace

TEST_CASE("layer_norm: the fused op equals its composition in f64, forward and gradients") {
  for (const Shape& shape : {Shape{3, 5}, Shape{2, 3, 7}, Shape{4, 300}, Shape{2, 1}}) {
    const std::int64_t f = shape.back();
    const Tensor x = random_f64(shape, -2, 2, 1), g = random_f64(shape, -1, 1, 2, false);
    const Tensor w = random_f64({f}, 0.5, 1.5, 3), b = random_f64({f}, -1, 1, 4);
    for (int affine = 0; affine < 4; ++affine) {
      INFO("shape " << shape << ", weight " << (affine & 1) << ", bias " << (affine >> 1));
      const Tensor wi = affine & 1 ? w : Tensor(), bi = affine & 2 ? b : Tensor();
      const Result got = run(fused, x, wi, bi, g), want = run(reference, x, wi, bi, g);
      close("y", got.y, want.y, 1e-12, 1e-12);
      close("dx", got.dx, want.dx, 1e-11, 1e-11);
      close("dweight", got.dw, want.dw, 1e-12, 1e-12);
      close("dbias", got.db, want.db, 1e-12, 1e-12);
    }
  }
  // Central differences through the fused op, 3-D and no affine.
  check_gradients("fused layer_norm", [](const auto& t) { return layer_norm(t[0], t[1], t[2]); },
                  {random_f64({2, 2, 6}, -2, 2, 5), random_f64({6}, 0.5, 1.5, 6), random_f64({6}, -1, 1, 7)});
  check_gradients("fused layer_norm, eps 0.1", [](const auto& t) { return layer_norm(t[0], {}, {}, 0.1); },
                  {random_f64({3, 4}, -2, 2, 8)});
}

TEST_CASE("layer_norm: f32, bf16 and f16 within their rounding of the f64 composition") {
  // Statistics in f32: sums of f terms and a few more roundings, (f + 8) eps32 of the largest value.
  // Outputs in bf16 or f16 are rounded once more (half an eps of the dtype, relative). dx is a
  // difference of three terms of the size of gw: its error is relative to the largest |dx| and |gw|.
  const std::int64_t f = 96;
  const Tensor x64 = random_f64({16, f}, -3, 3, 10, false), g64 = random_f64({16, f}, -1, 1, 11, false);
  const Tensor w64 = random_f64({f}, 0.5, 1.5, 12, false), b64 = random_f64({f}, -1, 1, 13, false);
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    INFO("dtype " << dtype);
    // The inputs rounded to the dtype first, so the reference sees exactly the values the op does.
    auto in = [&](const Tensor& t) { return t.to(dtype); };
    auto exact = [&](const Tensor& t) { return t.to(dtype).to(DType::F64); };
    const Result got = run(fused, in(x64), in(w64), in(b64), in(g64));
    const Result want = run(reference, exact(x64), exact(w64), exact(b64), exact(g64));
    CHECK(got.y.dtype() == dtype);
    CHECK(got.dx.dtype() == dtype);
    const double rounding = dtype == DType::F32 ? 0.0 : tolerance(dtype, 0.5);
    const double f32 = static_cast<double>(f + 8) * 0x1p-24;
    close("y", got.y, want.y, rounding, f32 * largest(want.y));
    close("dx", got.dx, want.dx, rounding, 4 * f32 * 1.5 * largest(g64));
    close("dweight", got.dw, want.dw, rounding, f32 * largest(want.dw) + 16 * 0x1p-24 * 16 * 3);
    close("dbias", got.db, want.db, rounding, f32 * largest(want.db) + 16 * 0x1p-24 * 16);
  }
}

TEST_CASE("layer_norm under autocast: a bf16 or f16 x read as it is, the bits of casting it first") {
  for (DType low : {DType::BF16, DType::F16}) {
    INFO("dtype " << low);
    const Tensor x = uniform_in({64, 96}, low, 20, -2.0, 2.0), w = uniform_in({96}, DType::F32, 21);
    const Tensor b = uniform_in({96}, DType::F32, 22, -1.0, 1.0), g = uniform_in({64, 96}, DType::F32, 23, -1.0, 1.0);
    clear_tape();
    std::size_t saved = 0;
    const Result got = run(
        [&](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
          Autocast region(low);
          Tensor y = layer_norm(xi, wi, bi);
          saved = saved_tensor_bytes();
          return y;
        },
        x, w, b, g);
    // An f32 mean and rstd a row, and no f32 copy of x (x, w and b are leaves: not activation memory).
    CHECK(saved == 2 * 64 * 4);
    const Result cast_first = run(fused, x.to(DType::F32), w, b, g);
    CHECK(got.y.dtype() == DType::F32);
    CHECK(got.dx.dtype() == low);
    CHECK(same_values(got.y, cast_first.y));
    CHECK(same_values(got.dx, cast_first.dx.to(low)));  // the cast's backward rounds dx once
    CHECK(same_values(got.dw, cast_first.dw));
    CHECK(same_values(got.db, cast_first.db));
  }
}

TEST_CASE("layer_norm: the same bits on 1 and 2 threads (the rows cut into chunks of the problem's size)") {
  const Tensor x = uniform_in({1024, 64}, DType::BF16, 30, -2.0, 2.0), w = uniform_in({64}, DType::BF16, 31);
  const Tensor b = uniform_in({64}, DType::BF16, 32), g = uniform_in({1024, 64}, DType::BF16, 33, -1.0, 1.0);
  const int threads = num_threads();
  std::vector<Result> results;
  for (int t : {1, 2}) {
    set_num_threads(t);
    results.push_back(run(fused, x, w, b, g));
  }
  set_num_threads(threads);
  CHECK(same_values(results[0].y, results[1].y));
  CHECK(same_values(results[0].dx, results[1].dx));
  CHECK(same_values(results[0].dw, results[1].dw));
  CHECK(same_values(results[0].db, results[1].db));
}

TEST_CASE("layer_norm: mismatched dtypes and bad kernel calls name the op and the dtypes") {
  const Tensor x = zeros({2, 4});
  check_error([&] { layer_norm(x, zeros({4}, {.dtype = DType::BF16})); },
              "mg::layer_norm: x is f32 and the weight bf16");
  check_error([&] { layer_norm(x.to(DType::F64), {}, zeros({4})); }, "mg::layer_norm: x is f64 and the bias f32");
  {
    Autocast region(DType::BF16);
    check_error([&] { layer_norm(x.to(DType::F16), zeros({4})); }, "f16 and bf16 do not mix");
    check_error([&] { layer_norm(x.to(DType::F64), zeros({4})); }, "mg::layer_norm: x is f64 and the weight f32");
  }
  const kernels::LayerNormShape shape{.rows = 2, .features = 4};
  Tensor y = zeros({2, 4}), mean = zeros({2}), rstd = zeros({2}), wrong = zeros({3});
  check_error([&] { kernels::layer_norm_forward(x, {}, {}, shape, y, wrong, rstd); },
              "kernels::layer_norm_forward: mean must hold 2 f32 values");
  Tensor f16_y = zeros({2, 4}, {.dtype = DType::F16});
  check_error([&] { kernels::layer_norm_forward(x, {}, {}, shape, f16_y, mean, rstd); },
              "kernels::layer_norm_forward: x must be floating and y");
  Tensor dx = zeros({2, 4}), dw = zeros({4}), none;
  check_error([&] { kernels::layer_norm_backward(y, x, {}, mean, rstd, shape, dx, dw, none); },
              "dweight asked for without a weight");
}
