// conv2d, max_pool2d and avg_pool2d (autograd/conv.cpp, autograd/pool.cpp, kernels/cpu/conv.cpp,
// kernels/cpu/pool.cpp). Forward values are checked against hand-computed numbers and against direct
// f64 loops over the windows (not im2col), over strides 1 and 2, padding 0 to 2, non-square inputs
// and kernels, 1x1 to 5x5 kernels, batch 1 to 3, with and without bias; gradients by f64 gradchecks;
// f16/bf16 against the f64 loops over the rounded inputs (one rounding, the bias included); autocast's
// dtypes; max pooling's ties, NaN and padding; bad input against errors naming the op.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

struct Geometry {
  std::int64_t batch, channels, height, width, out_channels, kernel_h, kernel_w, stride, padding;
  bool bias;
};

// Direct convolution in f64 over the tensors' own (already rounded) values. For each output element:
// the result, the dot product without the bias, and the sum of |products| (+ |bias|): the scale of
// any accumulation error.
struct ConvReference {
  Shape shape;
  std::vector<double> y, dot, abs_sum;
};

ConvReference reference_conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, std::int64_t stride,
                               std::int64_t padding) {
  const std::vector<double> xv = x.to_vector<double>(), wv = weight.to_vector<double>();
  const std::vector<double> bv = bias.defined() ? bias.to_vector<double>() : std::vector<double>();
  const std::int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const std::int64_t O = weight.size(0), KH = weight.size(2), KW = weight.size(3);
  const std::int64_t OH = (H + 2 * padding - KH) / stride + 1, OW = (W + 2 * padding - KW) / stride + 1;
  ConvReference r;
  r.shape = {N, O, OH, OW};
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < O; ++o)
      for (std::int64_t oh = 0; oh < OH; ++oh)
        for (std::int64_t ow = 0; ow < OW; ++ow) {
          double dot = 0.0, abs_sum = 0.0;
          for (std::int64_t c = 0; c < C; ++c)
            for (std::int64_t kh = 0; kh < KH; ++kh)
              for (std::int64_t kw = 0; kw < KW; ++kw) {
                const std::int64_t ih = oh * stride - padding + kh, iw = ow * stride - padding + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const double term = xv[((n * C + c) * H + ih) * W + iw] * wv[((o * C + c) * KH + kh) * KW + kw];
                dot += term;
                abs_sum += std::fabs(term);
              }
          const double b = bv.empty() ? 0.0 : bv[o];
          r.y.push_back(dot + b);
          r.dot.push_back(dot);
          r.abs_sum.push_back(abs_sum + std::fabs(b));
        }
  return r;
}

// conv2d against the reference, element by element. The allowed error is
//   final_rtol |y|            the one rounding of the result into its dtype (0.5 ulp for f16/bf16):
//                             the bias is added to the f32 sum before it (the GEMM's epilogue);
//   + (K + 2) unit abs_sum    K = C KH KW products and sums, plus the bias add, in the compute
//                             precision (unit 2^-24 for f32 accumulation, 2^-53 for f64), any order;
//   + atol                    half the spacing of f16 subnormals (2^-25) per rounding.
void check_against_reference(const Tensor& y, const ConvReference& r, std::int64_t terms_per_output, double final_rtol,
                             double unit, double atol) {
  REQUIRE(y.shape() == r.shape);
  const std::vector<double> got = y.to_vector<double>();
  const double terms = static_cast<double>(terms_per_output + 2);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double bound = final_rtol * std::fabs(r.y[i]) + terms * unit * r.abs_sum[i] + atol;
    INFO("element " << i << ": got " << got[i] << ", expected " << r.y[i] << ", bound " << bound);
    CHECK(std::fabs(got[i] - r.y[i]) <= bound);
  }
}

void check_conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Conv2dOptions options, double final_rtol,
                  double unit, double atol = 0.0) {
  INFO(fmt::format("x {}, weight {}, bias {}, stride {}, padding {}, dtype {}", x.shape(), weight.shape(),
                   bias.defined(), options.stride, options.padding, x.dtype()));
  Tensor y = conv2d(x, weight, bias, options);
  CHECK(y.dtype() == x.dtype());
  check_against_reference(y, reference_conv2d(x, weight, bias, options.stride, options.padding),
                          weight.numel() / weight.size(0), final_rtol, unit, atol);
}

struct ConvInputs {
  Tensor x, weight, bias;
};

ConvInputs conv_inputs(const Geometry& g, std::uint64_t seed, DType dtype = DType::F64) {
  auto make = [&](const Shape& shape, std::uint64_t s) {
    Tensor t = random_f64(shape, -1.0, 1.0, s, false).to(dtype);  // rounded once from f64
    return dtype == DType::F64 ? t.set_requires_grad(true) : t;
  };
  ConvInputs in{make({g.batch, g.channels, g.height, g.width}, seed),
                make({g.out_channels, g.channels, g.kernel_h, g.kernel_w}, seed + 1), Tensor()};
  if (g.bias) in.bias = make({g.out_channels}, seed + 2);
  return in;
}

const std::vector<Geometry> kForwardGeometries = {
    {1, 1, 5, 7, 1, 3, 3, 1, 0, true},  // batch 1, one channel, non-square input
    {3, 2, 6, 5, 4, 3, 3, 2, 1, true},  // batch 3, stride 2, padding 1
    {2, 3, 4, 6, 2, 1, 1, 1, 0, false},  // 1x1 kernel, no bias
    {1, 2, 7, 9, 3, 5, 5, 2, 2, true},  // 5x5 kernel, stride 2, padding 2
    {3, 2, 5, 4, 3, 3, 3, 1, 2, false},  // padding 2 around a 3x3 kernel: corner outputs read 1 pixel
    {1, 3, 4, 5, 2, 1, 1, 2, 1, true},  // 1x1 with padding: the border outputs are the bias alone
    {2, 2, 5, 5, 2, 5, 5, 1, 0, false},  // the kernel covers the whole input: 1x1 output
    {2, 2, 6, 7, 3, 2, 3, 2, 1, true},  // a non-square 2x3 kernel
};

// Max or average pooling in f64 over x's values: padding is skipped by max (it never wins) and
// counts as 0 in the average, which divides by kernel^2. Also the first maximum's flat index.
struct PoolReference {
  std::vector<double> y, abs_sum;
  std::vector<std::int64_t> argmax;
};

PoolReference reference_pool2d(const Tensor& x, Pool2dOptions o, bool is_max) {
  const std::vector<double> xv = x.to_vector<double>();
  const std::int64_t NC = x.size(0) * x.size(1), H = x.size(2), W = x.size(3), K = o.kernel;
  const std::int64_t stride = o.stride == 0 ? K : o.stride;
  const std::int64_t OH = (H + 2 * o.padding - K) / stride + 1, OW = (W + 2 * o.padding - K) / stride + 1;
  PoolReference r;
  for (std::int64_t p = 0; p < NC; ++p)
    for (std::int64_t oh = 0; oh < OH; ++oh)
      for (std::int64_t ow = 0; ow < OW; ++ow) {
        double best = 0.0, total = 0.0, abs_sum = 0.0;
        std::int64_t best_at = -1;
        for (std::int64_t kh = 0; kh < K; ++kh)
          for (std::int64_t kw = 0; kw < K; ++kw) {
            const std::int64_t ih = oh * stride - o.padding + kh, iw = ow * stride - o.padding + kw;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            const double v = xv[(p * H + ih) * W + iw];
            total += v;
            abs_sum += std::fabs(v);
            if (best_at < 0 || (!std::isnan(best) && (v > best || std::isnan(v)))) {
              best = v;
              best_at = ih * W + iw;
            }
          }
        r.y.push_back(is_max ? best : total / static_cast<double>(K * K));
        r.abs_sum.push_back(abs_sum / static_cast<double>(K * K));
        r.argmax.push_back(best_at);
      }
  return r;
}

const std::vector<Pool2dOptions> kPoolOptions = {
    {.kernel = 2},  // non-overlapping
    {.kernel = 3, .stride = 2, .padding = 1},  // overlapping, padded
    {.kernel = 3, .stride = 1, .padding = 1},  // every pixel in up to 9 windows
    {.kernel = 2, .stride = 1},  // overlapping, no padding
    {.kernel = 4, .stride = 3, .padding = 2},  // padding = kernel / 2, the most allowed
};

}  // namespace

TEST_CASE("conv2d: hand-computed 3x3 input, 2x2 kernel, with padding and stride") {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  Tensor w = from_vector({1, 2, 3, 4}, {1, 1, 2, 2});
  // y[i][j] = x[i][j] + 2 x[i][j+1] + 3 x[i+1][j] + 4 x[i+1][j+1], e.g. 1 + 4 + 12 + 20 = 37.
  Tensor y = conv2d(x, w, from_vector({0.5}, {1}));
  CHECK(y.shape() == Shape{1, 1, 2, 2});
  check_values(y, {37.5, 47.5, 67.5, 77.5});
  // Padding 1, stride 2: windows at rows/cols {-1, 0} and {1, 2}; the corner one sees x[0][0] * 4.
  Tensor padded = conv2d(x, w, {}, {.stride = 2, .padding = 1});
  CHECK(padded.shape() == Shape{1, 1, 2, 2});
  check_values(padded, {4, 2 * 3 + 3 * 4, 4 * 2 + 7 * 4, 5 + 6 * 2 + 8 * 3 + 9 * 4});
}

TEST_CASE("conv2d: f64 and f32 forward match direct loops over every geometry") {
  std::uint64_t seed = 10;
  for (const Geometry& g : kForwardGeometries) {
    ConvInputs in = conv_inputs(g, seed += 3);
    const Conv2dOptions o{.stride = g.stride, .padding = g.padding};
    check_conv2d(in.x, in.weight, in.bias, o, 0.0, 0x1p-53);
    ConvInputs f32 = conv_inputs(g, seed, DType::F32);
    check_conv2d(f32.x, f32.weight, f32.bias, o, 0.0, 0x1p-24);
  }
}

TEST_CASE("conv2d: gradcheck of x, weight and bias") {
  const std::vector<Geometry> geometries = {
      {2, 2, 5, 4, 3, 3, 3, 1, 1, true},  // stride 1, padding 1
      {1, 2, 6, 7, 2, 3, 3, 2, 0, true},  // stride 2, non-square input
      {2, 1, 5, 5, 2, 5, 5, 2, 2, false},  // 5x5, stride 2, padding 2, no bias
      {1, 3, 4, 4, 2, 1, 1, 1, 0, true},  // 1x1
      {1, 2, 5, 6, 2, 2, 3, 2, 1, true},  // non-square kernel
  };
  std::uint64_t seed = 100;
  for (const Geometry& g : geometries) {
    ConvInputs in = conv_inputs(g, seed += 3);
    const Conv2dOptions o{.stride = g.stride, .padding = g.padding};
    if (g.bias)
      check_gradients("conv2d with bias", [o](const auto& t) { return conv2d(t[0], t[1], t[2], o); },
                      {in.x, in.weight, in.bias});
    else
      check_gradients("conv2d", [o](const auto& t) { return conv2d(t[0], t[1], {}, o); }, {in.x, in.weight});
  }
}

TEST_CASE("conv2d: f16 and bf16 match the f64 loops over the rounded inputs") {
  // Products of f16/bf16 values are exact in f32, the sum and the bias accumulate in f32 and the
  // store rounds once (check_conv2d: 0.5 ulp of the result). Rounding the GEMM result before adding
  // the bias would cost another 0.5 ulp of it.
  std::uint64_t seed = 200;
  for (const Geometry& g : kForwardGeometries) {
    const Conv2dOptions o{.stride = g.stride, .padding = g.padding};
    ConvInputs h = conv_inputs(g, seed += 3, DType::F16);
    check_conv2d(h.x, h.weight, h.bias, o, tolerance(DType::F16, 0.5), 0x1p-24, 2 * 0x1p-25);
    ConvInputs b = conv_inputs(g, seed, DType::BF16);
    check_conv2d(b.x, b.weight, b.bias, o, tolerance(DType::BF16, 0.5), 0x1p-24);
  }
}

TEST_CASE("conv2d: under autocast f32 inputs give an f16 result and f32 gradients") {
  const Geometry g{2, 2, 5, 6, 3, 3, 3, 2, 1, true};
  ConvInputs in = conv_inputs(g, 300, DType::F32);
  for (Tensor* t : {&in.x, &in.weight, &in.bias}) t->set_requires_grad(true);
  Tensor y;
  {
    Autocast autocast(DType::F16);
    y = conv2d(in.x, in.weight, in.bias, {.stride = 2, .padding = 1});
  }
  CHECK(y.dtype() == DType::F16);
  // The numbers of conv2d on the inputs rounded to f16 outside autocast (same bound as there).
  Tensor xh = in.x.to(DType::F16), wh = in.weight.to(DType::F16);
  check_against_reference(y, reference_conv2d(xh, wh, in.bias.to(DType::F16), 2, 1), 2 * 3 * 3,
                          tolerance(DType::F16, 0.5), 0x1p-24, 2 * 0x1p-25);
  backward(y, ones(y.shape(), {.dtype = DType::F16}));
  for (Tensor* t : {&in.x, &in.weight, &in.bias}) {
    REQUIRE(t->grad().defined());
    CHECK(t->grad().dtype() == DType::F32);
  }
  // d sum(y) / d bias[o] is the number of output positions, 2 * 3 * 3 = 18, exact in f16.
  check_values(in.bias.grad(), {18, 18, 18}, 0.0, 0.0);
  // d sum(y) / d weight[o][c][kh][kw] is the sum of the 18 f16 pixels that tap reads: an f16 GEMM
  // (exact products, f32 sum: 19 * 2^-24 of at most 18 * |x| <= 18) rounded once to f16 (0.5 ulp),
  // then cast back to f32 exactly.
  const std::vector<double> xv = xh.to_vector<double>();
  std::vector<double> expected_dw;
  for (int o = 0; o < 3; ++o)
    for (int c = 0; c < 2; ++c)
      for (int kh = 0; kh < 3; ++kh)
        for (int kw = 0; kw < 3; ++kw) {
          double total = 0.0;
          for (int n = 0; n < 2; ++n)
            for (int oh = 0; oh < 3; ++oh)
              for (int ow = 0; ow < 3; ++ow) {
                const int ih = oh * 2 - 1 + kh, iw = ow * 2 - 1 + kw;
                if (ih >= 0 && ih < 5 && iw >= 0 && iw < 6) total += xv[((n * 2 + c) * 5 + ih) * 6 + iw];
              }
          expected_dw.push_back(total);
        }
  check_values(in.weight.grad(), expected_dw, tolerance(DType::F16, 0.5), 19 * 0x1p-24 * 18);
}

TEST_CASE("max_pool2d and avg_pool2d: hand-computed values, padding counted by the average") {
  Tensor x = from_vector({1, 5, 2, 0, 3, 4, 8, 6, 7, 9, 2, 1, 0, 4, 3, 5}, {1, 1, 4, 4});
  check_values(max_pool2d(x), {5, 8, 9, 5});
  check_values(avg_pool2d(x), {13.0 / 4, 16.0 / 4, 20.0 / 4, 11.0 / 4});
  Tensor ones_2x2 = ones({1, 1, 2, 2});  // each padded window holds one pixel: 1 / 4
  check_values(avg_pool2d(ones_2x2, {.kernel = 2, .stride = 2, .padding = 1}), {0.25, 0.25, 0.25, 0.25});
}

TEST_CASE("max_pool2d and avg_pool2d: forward matches direct loops in every dtype") {
  for (const Pool2dOptions& o : kPoolOptions) {
    INFO("kernel " << o.kernel << ", stride " << o.stride << ", padding " << o.padding);
    Tensor x64 = random_f64({2, 3, 5, 7}, -2.0, 2.0, 400 + o.kernel * 10 + o.stride, false);
    for (DType dtype : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
      INFO("dtype " << dtype_name(dtype));
      Tensor x = x64.to(dtype);
      PoolReference max_ref = reference_pool2d(x, o, true), avg_ref = reference_pool2d(x, o, false);
      check_values(max_pool2d(x, o), max_ref.y, 0.0, 0.0);  // a max picks a value: exact in every dtype
      // The average sums at most kernel^2 values in the compute precision and divides once (unit:
      // 2^-53 for f64, 2^-24 otherwise, per term), then rounds to the dtype (0.5 ulp, 0 for f32/f64).
      const double unit = dtype == DType::F64 ? 0x1p-53 : 0x1p-24;
      const double final_rtol = dtype == DType::F16 || dtype == DType::BF16 ? tolerance(dtype, 0.5) : 0.0;
      Tensor avg = avg_pool2d(x, o);
      CHECK(avg.dtype() == dtype);
      const std::vector<double> got = avg.to_vector<double>();
      REQUIRE(got.size() == avg_ref.y.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double bound = final_rtol * std::fabs(avg_ref.y[i]) +
                             static_cast<double>(o.kernel * o.kernel + 1) * unit * avg_ref.abs_sum[i] + 0x1p-25;
        INFO("element " << i << ": got " << got[i] << ", expected " << avg_ref.y[i]);
        CHECK(std::fabs(got[i] - avg_ref.y[i]) <= bound);
      }
    }
  }
}

TEST_CASE("max_pool2d and avg_pool2d: gradcheck with overlapping and padded windows") {
  for (const Pool2dOptions& o : kPoolOptions) {
    INFO("kernel " << o.kernel << ", stride " << o.stride << ", padding " << o.padding);
    // Random f64 values are distinct by far more than the step h = 1e-6, so the max is differentiable.
    Tensor x = random_f64({2, 2, 5, 6}, -1.0, 1.0, 500 + o.kernel * 10 + o.stride);
    check_gradients("max_pool2d", [o](const auto& t) { return max_pool2d(t[0], o); }, {x});
    check_gradients("avg_pool2d", [o](const auto& t) { return avg_pool2d(t[0], o); }, {x});
  }
}

TEST_CASE("max_pool2d: the gradient goes to the first maximum of each window on ties") {
  // All equal, 2x2 windows at stride 1: window (oh, ow) picks its top-left pixel.
  Tensor x = full({1, 1, 3, 3}, 5.0, {.dtype = DType::F64}).set_requires_grad(true);
  backward(max_pool2d(x, {.kernel = 2, .stride = 1}), ones({1, 1, 2, 2}, {.dtype = DType::F64}));
  check_values(x.grad(), {1, 1, 0, 1, 1, 0, 0, 0, 0});
  Tensor tie = from_vector({3, 1, 3, 2}, {1, 1, 2, 2}, {.dtype = DType::F16, .requires_grad = true});
  Tensor y = max_pool2d(tie);
  check_values(y, {3});
  backward(y, full({1, 1, 1, 1}, 0.5, {.dtype = DType::F16}));
  check_values(tie.grad(), {0.5, 0, 0, 0});
}

TEST_CASE("max_pool2d: NaN propagates and takes the gradient; padding never wins") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Windows: {1, nan, 5, 2} -> NaN even with a larger value after it; {4, 3, 0, -1} -> 4.
  Tensor x = from_vector({1, nan, 4, 3, 5, 2, 0, -1}, {1, 1, 2, 4}, {.requires_grad = true});
  Tensor y = max_pool2d(x);
  check_values(y, {nan, 4});
  backward(y, ones({1, 1, 1, 2}));
  check_values(x.grad(), {0, 1, 1, 0, 0, 0, 0, 0});
  Tensor h = from_vector({nan, 7, 1, 2}, {1, 1, 2, 2}, {.dtype = DType::F16});  // NaN first, in f16
  check_values(max_pool2d(h), {nan});
  // All negative with padding 1: the zeros of the padding must not be the maximum.
  Tensor negative = from_vector({-1, -2, -3, -4, -5, -6, -7, -8, -9}, {1, 1, 3, 3});
  check_values(max_pool2d(negative, {.kernel = 2, .stride = 2, .padding = 1}), {-1, -2, -4, -5});
  check_values(max_pool2d(negative, {.kernel = 3, .stride = 1, .padding = 1}), {-1, -1, -2, -1, -1, -2, -4, -4, -5});
}

TEST_CASE("conv2d and pooling: bad input names the op") {
  Tensor x = zeros({1, 2, 4, 4}), w = zeros({3, 2, 3, 3});
  check_error([&] { conv2d(zeros({2, 4, 4}), w); }, "mg::conv2d");  // x rank 3
  check_error([&] { conv2d(x, zeros({3, 2, 3})); }, "mg::conv2d");  // weight rank 3
  check_error([&] { conv2d(x, zeros({3, 1, 3, 3})); }, "mg::conv2d");  // 2 vs 1 channels
  check_error([&] { conv2d(x, zeros({3, 2, 5, 5})); }, "mg::conv2d");  // 5x5 in 4x4
  check_error([&] { conv2d(x, zeros({3, 2, 7, 7}), {}, {.padding = 1}); }, "mg::conv2d");  // 7x7 in 6x6
  check_error([&] { conv2d(x, w, {}, {.stride = 0}); }, "mg::conv2d");
  check_error([&] { conv2d(x, w, {}, {.padding = -1}); }, "mg::conv2d");
  check_error([&] { conv2d(x, w, zeros({2})); }, "mg::conv2d");  // bias [2], not [3]
  check_error([&] { conv2d(x.to(DType::F16), w); }, "mg::conv2d");  // f16 x, f32 weight
  check_error([&] { conv2d(x, w, zeros({3}, {.dtype = DType::F16})); }, "mg::conv2d");  // f16 bias
  for (const char* op : {"mg::max_pool2d", "mg::avg_pool2d"}) {
    auto pool = [op](const Tensor& t, Pool2dOptions o) {
      return std::string(op) == "mg::max_pool2d" ? max_pool2d(t, o) : avg_pool2d(t, o);
    };
    check_error([&] { pool(x, {.kernel = 2, .padding = 2}); }, op);  // padding > kernel / 2
    check_error([&] { pool(x, {.kernel = 3, .padding = 2}); }, op);
    check_error([&] { pool(zeros({2, 4, 4}), {}); }, op);  // rank 3
    check_error([&] { pool(x, {.kernel = 0}); }, op);
    check_error([&] { pool(x, {.kernel = 2, .stride = -1}); }, op);
    check_error([&] { pool(x, {.kernel = 5}); }, op);  // 5x5 in 4x4
  }
}
