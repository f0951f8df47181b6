// conv2d's input gradient in f16 and bf16 (autograd/conv.cpp, kernels/cpu/conv.cpp and
// kernels/cuda/conv.cu): dx = col2im(dy W), where each window's share dcols = dy W is an f32 GEMM
// result and col2im adds a pixel's shares in f32, so dx is rounded once. Checked against an f64 loop
// over the windows, on every device of the build, and by hand where rounding each share to f16 first
// (or summing in f16) loses what one rounding keeps. Forward values and gradchecks: test_ops_conv.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/conv.h"
#include "kernels/cpu/conv_shifted.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/threads.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

// dx of a convolution in f64 over the tensors' own values, and the sum of |terms| of each element
// (the scale of the f32 accumulation's error): dx[n, c, ih, iw] = sum over the outputs (o, oh, ow)
// whose window tap (kh, kw) reads (ih, iw) of dy[n, o, oh, ow] * w[o, c, kh, kw].
struct InputGradient {
  std::vector<double> dx, abs_sum;
};

InputGradient reference_input_gradient(const Tensor& dy, const Tensor& weight, const Shape& x_shape,
                                       std::int64_t stride, std::int64_t padding) {
  const std::vector<double> gv = dy.to_vector<double>(), wv = weight.to_vector<double>();
  const std::int64_t N = x_shape[0], C = x_shape[1], H = x_shape[2], W = x_shape[3];
  const std::int64_t O = weight.size(0), KH = weight.size(2), KW = weight.size(3), OH = dy.size(2), OW = dy.size(3);
  InputGradient r{std::vector<double>(static_cast<std::size_t>(N * C * H * W)),
                  std::vector<double>(static_cast<std::size_t>(N * C * H * W))};
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < O; ++o)
      for (std::int64_t oh = 0; oh < OH; ++oh)
        for (std::int64_t ow = 0; ow < OW; ++ow)
          for (std::int64_t c = 0; c < C; ++c)
            for (std::int64_t kh = 0; kh < KH; ++kh)
              for (std::int64_t kw = 0; kw < KW; ++kw) {
                const std::int64_t ih = oh * stride - padding + kh, iw = ow * stride - padding + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const double term = gv[((n * O + o) * OH + oh) * OW + ow] * wv[((o * C + c) * KH + kh) * KW + kw];
                const auto at = static_cast<std::size_t>(((n * C + c) * H + ih) * W + iw);
                r.dx[at] += term;
                r.abs_sum[at] += std::fabs(term);
              }
  return r;
}

struct Geometry {
  std::int64_t batch, channels, height, width, out_channels, kernel, stride, padding;
};

// dW and db of conv2d in f64 through autograd (gradchecked in test_ops_conv), at the weight's and the
// bias's own values, for the input x64 and the output gradient dy64; db is empty without a bias.
struct ParameterGradients {
  std::vector<double> dw, db;
};

ParameterGradients f64_parameter_gradients(const Tensor& x64, const Tensor& weight, const Tensor& bias,
                                           const Tensor& dy64, const Conv2dOptions& o) {
  Tensor w64 = weight.detach().to(DType::F64).set_requires_grad(true);
  Tensor b64 = bias.defined() ? bias.detach().to(DType::F64).set_requires_grad(true) : Tensor();
  backward(conv2d(x64, w64, b64, o), dy64);
  return {w64.grad().to_vector<double>(), b64.defined() ? b64.grad().to_vector<double>() : std::vector<double>{}};
}

}  // namespace

TEST_CASE("conv2d: the f16 and bf16 input gradient is rounded once, within 0.5 ulp of the f64 sum") {
  // The allowed error: 0.5 ulp of dx (its one rounding), the f32 accumulation of its terms
  // (O KH KW products and sums, each within 2^-24 of sum |terms|), and for f16 half the spacing of
  // its subnormals. Rounding each window's share to f16/bf16 before col2im adds up to KH KW / 2 ulps
  // of the shares, beyond 0.5 ulp of their sum.
  const std::vector<Geometry> geometries{{2, 3, 7, 6, 4, 3, 1, 1}, {1, 2, 9, 9, 5, 5, 1, 2}, {2, 2, 8, 7, 3, 3, 2, 1}};
  std::vector<Device> devices{Device::cpu()};
  if (cuda_device_count() > 0) devices.push_back(Device::cuda());
  std::uint64_t seed = 40;
  for (Device device : devices) {
    for (DType dtype : {DType::F16, DType::BF16}) {
      for (const Geometry& g : geometries) {
        INFO(fmt::format("{} on {}: x [{}, {}, {}, {}], kernel {} x {}, {} out channels, stride {}, padding {}",
                         dtype_name(dtype), device, g.batch, g.channels, g.height, g.width, g.kernel, g.kernel,
                         g.out_channels, g.stride, g.padding));
        const Shape x_shape{g.batch, g.channels, g.height, g.width};
        Tensor x = uniform_in(x_shape, dtype, seed++, -1.0, 1.0).to(device).set_requires_grad(true);
        const Tensor weight = uniform_in({g.out_channels, g.channels, g.kernel, g.kernel}, dtype, seed++, -1.0, 1.0);
        Tensor y = conv2d(x, weight.to(device), {}, {.stride = g.stride, .padding = g.padding});
        const Tensor dy = uniform_in(y.shape(), dtype, seed++, -1.0, 1.0);
        backward(y, dy.to(device));
        REQUIRE(x.grad().dtype() == dtype);
        const InputGradient r = reference_input_gradient(dy, weight, x_shape, g.stride, g.padding);
        const std::vector<double> got = x.grad().to(Device::cpu()).to_vector<double>();
        const double terms = static_cast<double>(g.out_channels * g.kernel * g.kernel + 2);
        const double atol = dtype == DType::F16 ? 0x1p-25 : 0.0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          const double bound = tolerance(dtype, 0.5) * std::fabs(r.dx[i]) + terms * 0x1p-24 * r.abs_sum[i] + atol;
          INFO("element " << i << ": got " << got[i] << ", f64 " << r.dx[i] << ", error "
                          << std::fabs(got[i] - r.dx[i]) / std::fabs(r.dx[i]) / dtype_eps(dtype) << " eps of |dx|");
          CHECK(std::fabs(got[i] - r.dx[i]) <= bound);
        }
      }
    }
  }
}

TEST_CASE("conv2d: col2im sums an f16 pixel's 9 window gradients in f32 and rounds once") {
  // 3x3 input, 3x3 ones kernel, padding 1: pixel (i, j) is read by every output (oh, ow) within 1 of
  // it, so its gradient is the sum of those outputs' gradients g (each g * 1 exact in f16). With
  // g = 1 at (0, 0) and 2^-12 elsewhere, the centre gets 1 + 8 * 2^-12 = 1 + 2^-9 (an f16 value),
  // and the corner 1 + 3 * 2^-12, which rounds to 1 + 2^-10. Summed in f16 from g(0, 0) on, each
  // 2^-12 would be lost (half an ulp of 1 rounds to even) and both would be exactly 1.
  Tensor x = from_vector({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}, {.dtype = DType::F16, .requires_grad = true});
  Tensor w = ones({1, 1, 3, 3}, {.dtype = DType::F16});
  std::vector<double> seed(9, 0x1p-12);
  seed[0] = 1.0;
  backward(conv2d(x, w, {}, {.padding = 1}), from_vector(seed, {1, 1, 3, 3}, {.dtype = DType::F16}));
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == DType::F16);
  std::vector<double> expected;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double total = 0.0;  // exact in f64
      for (int oh = std::max(i - 1, 0); oh <= std::min(i + 1, 2); ++oh)
        for (int ow = std::max(j - 1, 0); ow <= std::min(j + 1, 2); ++ow) total += seed[oh * 3 + ow];
      expected.push_back(to_f16(total));
    }
  CHECK(expected[4] == 1.0 + 0x1p-9);
  CHECK(expected[0] == 1.0 + 0x1p-10);
  check_values(x.grad(), expected, 0.0, 0.0);
}

TEST_CASE("conv2d: the weight and bias gradients in f32, f16 and bf16 are one f32 sum each, rounded once") {
  // dW[o, c, kh, kw] = sum over (n, oh, ow) of dy[n, o, oh, ow] x[n, c, ih, iw]: N OH OW terms in one f32
  // sum (on the CPU's implicit path, kernels/conv.h, or the im2col GEMM elsewhere), then one rounding.
  // The f64 reference, and its sum of |terms|, come from the f64 convolution (gradchecked in
  // test_ops_conv) of the same rounded values: dW of (x, dy), and of (|x|, |dy|).
  const std::vector<Geometry> geometries{{3, 3, 9, 8, 4, 3, 1, 1},
                                         {2, 5, 14, 14, 6, 3, 1, 1},
                                         {2, 2, 8, 7, 3, 3, 2, 1}};
  std::uint64_t seed = 70;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16})
    for (const Geometry& g : geometries) {
      const Conv2dOptions o{.stride = g.stride, .padding = g.padding};
      const Tensor x = uniform_in({g.batch, g.channels, g.height, g.width}, dtype, seed++, -1.0, 1.0);
      Tensor weight = uniform_in({g.out_channels, g.channels, g.kernel, g.kernel}, dtype, seed++, -1.0, 1.0);
      Tensor bias = uniform_in({g.out_channels}, dtype, seed++, -1.0, 1.0);
      weight.set_requires_grad(true);
      bias.set_requires_grad(true);
      Tensor y = conv2d(x, weight, bias, o);
      const Tensor dy = uniform_in(y.shape(), dtype, seed++, -1.0, 1.0);
      backward(y, dy);
      INFO(fmt::format("{}: x [{}, {}, {}, {}], {} out channels, stride {}, padding {}, implicit GEMM {}",
                       dtype_name(dtype), g.batch, g.channels, g.height, g.width, g.out_channels, g.stride, g.padding,
                       kernels::conv2d_implicit(x, {.batch = g.batch,
                                                    .channels = g.channels,
                                                    .height = g.height,
                                                    .width = g.width,
                                                    .kernel_h = g.kernel,
                                                    .kernel_w = g.kernel,
                                                    .stride_h = g.stride,
                                                    .stride_w = g.stride,
                                                    .pad_h = g.padding,
                                                    .pad_w = g.padding})));
      REQUIRE(weight.grad().dtype() == dtype);
      const auto [dw, db] = f64_parameter_gradients(x.to(DType::F64), weight, bias, dy.to(DType::F64), o);
      const auto [dw_abs, db_abs] = f64_parameter_gradients(abs(x.to(DType::F64)), weight, bias, abs(dy.to(DType::F64)),
                                                            o);
      const double terms = static_cast<double>(g.batch * y.size(2) * y.size(3) + 2);
      const auto check = [&](const std::vector<double>& got, const std::vector<double>& want,
                             const std::vector<double>& scale) {
        for (std::size_t i = 0; i < got.size(); ++i) {
          INFO("element " << i << ": got " << got[i] << ", f64 " << want[i]);
          CHECK(std::fabs(got[i] - want[i]) <= tolerance(dtype, 0.5) * std::fabs(want[i]) + terms * 0x1p-24 * scale[i]);
        }
      };
      check(weight.grad().to_vector<double>(), dw, dw_abs);
      check(bias.grad().to_vector<double>(), db, db_abs);
    }
}

TEST_CASE("conv2d: the padded-image forms agree with the window form on every kernel: y's and dW's bits, dx's bound") {
  // kernels/cpu/conv_shifted.h, on every microkernel this CPU runs (the scalar models too, so the
  // in-place paths of the Fma kernels and of the dot kernel run on any machine):
  // - on an Fma kernel the forward pass and dW read the padded images in place and sum the same
  //   products in the same order as the window form: the same bits (dW's values are held to f64 by the
  //   case above); on the dot kernel (its own arithmetic: pairs of channels in y, of positions in dW) y
  //   and dW are held to the f64 loops;
  // - dx, the mirrored forward pass over the padded dy, is one f32 sum per element rounded once, held to
  //   the f64 loop as the first case here.
  // Geometries: the benchmark's 3x3 pad 1, a 5x5 pad 2, no padding, padding K - 1 (dy padded by 0), a
  // 1x1, a 2x3 kernel; batch 1 on 2 threads cuts an image's positions between the threads.
  struct Case {
    std::int64_t batch, channels, height, width, out_channels, kernel_h, kernel_w, padding;
  };
  const std::vector<Case> cases{{2, 3, 7, 6, 4, 3, 3, 1}, {1, 2, 9, 9, 5, 5, 5, 2}, {3, 4, 5, 11, 6, 3, 3, 0},
                                {2, 2, 6, 5, 3, 3, 3, 2}, {1, 5, 4, 4, 7, 1, 1, 0}, {1, 3, 8, 7, 2, 2, 3, 1}};
  const int threads = num_threads();
  std::uint64_t seed = 90;
  for (const int thread_count : {1, 2})
    for (const kernels::cpu::MicroKernel* kernel : kernels::cpu::runnable_microkernels())
      for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
        const bool dot = kernel->arith == kernels::cpu::MicroArith::Bf16Dot;
        if (dot && dtype != DType::BF16) continue;
        // f32 on a CPU without AVX-512 has no window form (conv2d_implicit: im2col and the library
        // run it); there the padded forms are held to the f64 loops instead of the window form's bits.
        const bool window_runs = kernels::cpu::convolution_microkernel(dtype) != nullptr;
        for (const Case& g : cases) {
          set_num_threads(thread_count);
          const kernels::Window2d w{.batch = g.batch,
                                    .channels = g.channels,
                                    .height = g.height,
                                    .width = g.width,
                                    .kernel_h = g.kernel_h,
                                    .kernel_w = g.kernel_w,
                                    .pad_h = g.padding,
                                    .pad_w = g.padding};
          INFO(fmt::format("{} {} on {} thread(s): x [{}, {}, {}, {}], kernel {} x {}, {} out channels, padding {}",
                           kernel->name, dtype_name(dtype), thread_count, g.batch, g.channels, g.height, g.width,
                           g.kernel_h, g.kernel_w, g.out_channels, g.padding));
          const Tensor x = uniform_in({g.batch, g.channels, g.height, g.width}, dtype, seed++, -1.0, 1.0);
          const Tensor weight = uniform_in({g.out_channels, g.channels, g.kernel_h, g.kernel_w}, dtype, seed++, -1.0,
                                           1.0);
          const Tensor bias = uniform_in({g.out_channels}, DType::F32, seed++, -1.0, 1.0);
          const Shape y_shape{g.batch, g.out_channels, w.out_h(), w.out_w()};
          // Elements of got outside the f64 answer's bound (0.5 ulp, and 2^-24 of the magnitudes' sum
          // per term of the f32 accumulation).
          const auto wrong_against_f64 = [&](const Tensor& got_tensor, const std::vector<double>& want,
                                             const std::vector<double>& scale, std::int64_t terms) {
            const std::vector<double> got = got_tensor.to_vector<double>();
            int wrong = 0;
            for (std::size_t i = 0; i < got.size(); ++i)
              if (!(std::fabs(got[i] - want[i]) <=
                    tolerance(dtype, 0.5) * std::fabs(want[i]) + static_cast<double>(terms) * 0x1p-24 * scale[i]))
                ++wrong;
            return wrong;
          };
          const Conv2dOptions o{.padding = g.padding};
          Tensor padded_y = full(y_shape, 7.0, {.dtype = dtype});
          kernels::cpu::conv2d_forward_shifted(*kernel, x, weight, bias.data<float>(), w, padded_y);
          if (!dot && window_runs) {
            Tensor window_y = full(y_shape, 7.0, {.dtype = dtype});
            kernels::cpu::conv2d_forward(x, weight, bias, w, window_y, kernels::cpu::ConvForm::Window);
            CHECK(padded_y.to_vector<double>() == window_y.to_vector<double>());
          } else {  // the f64 convolution of the same values, and of their magnitudes (the error's scale)
            const std::vector<double> want =
                conv2d(x.to(DType::F64), weight.to(DType::F64), bias.to(DType::F64), o).to_vector<double>();
            const std::vector<double> scale = conv2d(abs(x.to(DType::F64)), abs(weight.to(DType::F64)),
                                                     abs(bias.to(DType::F64)), o)
                                                  .to_vector<double>();
            CHECK(wrong_against_f64(padded_y, want, scale, g.channels * g.kernel_h * g.kernel_w + 2) == 0);
          }

          const Tensor dy = uniform_in(y_shape, dtype, seed++, -1.0, 1.0);
          // The dot kernel pairs positions where output rows are even in length (else its family's Fma
          // kernel runs dW, the case above).
          if (kernel->run_gathered && (!dot || kernels::cpu::conv2d_weight_grad_pairs_apply(w))) {
            Tensor gathered_dw = full(weight.shape(), 7.0, {.dtype = dtype});
            kernels::cpu::conv2d_weight_grad_gathered(*kernel, dy, x, w, gathered_dw);
            if (!dot && window_runs) {
              Tensor window_dw = full(weight.shape(), 7.0, {.dtype = dtype});
              kernels::cpu::conv2d_weight_grad(dy, x, w, window_dw, kernels::cpu::ConvForm::Window);
              CHECK(gathered_dw.to_vector<double>() == window_dw.to_vector<double>());
            } else {  // dW in f64 through autograd, of the values and of their magnitudes
              const std::vector<double> want =
                  f64_parameter_gradients(x.to(DType::F64), weight, Tensor(), dy.to(DType::F64), o).dw;
              const std::vector<double> scale =
                  f64_parameter_gradients(abs(x.to(DType::F64)), weight, Tensor(), abs(dy.to(DType::F64)), o).dw;
              CHECK(wrong_against_f64(gathered_dw, want, scale, g.batch * w.out_h() * w.out_w() + 2) == 0);
            }
          }

          const InputGradient r = reference_input_gradient(dy, weight, x.shape(), 1, g.padding);
          const double terms = static_cast<double>(g.out_channels * g.kernel_h * g.kernel_w + 2);
          const double atol = dtype == DType::F16 ? 0x1p-25 : 0.0;
          for (const bool padded : {false, true}) {
            if (!padded && !window_runs) continue;
            Tensor dx = full(x.shape(), 7.0, {.dtype = dtype});
            if (padded)
              kernels::cpu::conv2d_input_grad_shifted(*kernel, dy, weight, w, dx);
            else
              kernels::cpu::conv2d_input_grad(dy, weight, w, dx, kernels::cpu::ConvForm::Window);
            const std::vector<double> got = dx.to_vector<double>();
            int wrong = 0;
            for (std::size_t i = 0; i < got.size(); ++i) {
              const double bound = tolerance(dtype, 0.5) * std::fabs(r.dx[i]) + terms * 0x1p-24 * r.abs_sum[i] + atol;
              if (!(std::fabs(got[i] - r.dx[i]) <= bound) && wrong++ < 3)
                MESSAGE((padded ? "padded" : "window")
                        << " dx element " << i << ": got " << got[i] << ", f64 " << r.dx[i]);
            }
            CHECK(wrong == 0);
          }
        }
      }
  set_num_threads(threads);
}

TEST_CASE("conv2d: bf16 dW on the dot kernel pairs positions, or runs on its family's Fma kernel where a row is odd") {
  // kernels/cpu/conv_gemm.cpp's choice for the bf16 dW of ConvForm::Best, where bf16 convolutions run on
  // the dot kernel (AMD's CPUs with AVX512_BF16; everywhere under MG_GEMM=model, as ctest runs this case
  // again: test_ops_conv_grad_models): an output row even in length, pairs of positions on the dot
  // kernel; odd, the Fma kernel of its family. The same bits as that path called directly.
  using kernels::cpu::MicroKernelId;
  const kernels::cpu::MicroKernel* kernel = kernels::cpu::convolution_microkernel(DType::BF16);
  if (!kernel || kernel->arith != kernels::cpu::MicroArith::Bf16Dot) {
    MESSAGE("skipped: bf16 convolutions run on " << (kernel ? kernel->name : "im2col")
                                                 << " here; ctest's test_ops_conv_grad_models runs it on the models");
    return;
  }
  const kernels::cpu::MicroKernel* fma = kernels::cpu::microkernel(
      kernel->id == MicroKernelId::ModelBf16Dot ? MicroKernelId::ModelFma : MicroKernelId::Avx512Fma);
  REQUIRE(fma != nullptr);
  for (const std::int64_t width : {6, 7}) {  // 3x3, padding 1: output rows of 6 and 7
    const kernels::Window2d w{.batch = 2,
                              .channels = 3,
                              .height = 5,
                              .width = width,
                              .kernel_h = 3,
                              .kernel_w = 3,
                              .stride_h = 1,
                              .stride_w = 1,
                              .pad_h = 1,
                              .pad_w = 1};
    INFO(kernel->name << ", output rows of " << w.out_w());
    CHECK(kernels::cpu::conv2d_weight_grad_pairs_apply(w) == (width % 2 == 0));
    // x all ones, and one row of dy whose f32 sums round: dW[0, c, 1, 1] sums 2^25, 1, 1, 1, 1, -2^25 (and
    // zeros). An Fma chain, position by position, gives 0 (each 1 is lost against 2^25); the dot kernel,
    // a pair at a time with its odd position first, gives 1 (the last pair subtracts 2^25 first).
    const Tensor x = full({2, 3, 5, width}, 1.0, {.dtype = DType::BF16});
    std::vector<double> gradient(static_cast<std::size_t>(2 * 4 * 5 * width), 0.0);
    const double row[6] = {0x1p25, 1.0, 1.0, 1.0, 1.0, -0x1p25};
    std::copy(row, row + 6, gradient.begin());
    const Tensor dy = from_vector(gradient, {2, 4, 5, width}, {.dtype = DType::BF16});
    Tensor best = full({4, 3, 3, 3}, 7.0, {.dtype = DType::BF16}), want = best.clone();
    kernels::cpu::conv2d_weight_grad(dy, x, w, best, kernels::cpu::ConvForm::Best);
    kernels::cpu::conv2d_weight_grad_gathered(width % 2 == 0 ? *kernel : *fma, dy, x, w, want);
    CHECK(best.to_vector<double>() == want.to_vector<double>());
    CHECK(best.to_vector<double>()[4] == (width % 2 == 0 ? 1.0 : 0.0));  // dW[0, 0, 1, 1]: which chain ran
  }
}
