// conv2d: a convolution as im2col + one GEMM (+ bias), then a permute back to channels-first.
//
//   x      [N, C, H, W]              weight [O, C, KH, KW]          bias [O]
//   cols = im2col(x)                 [N * OH * OW, C * KH * KW]     every input window as a row
//   rows = cols W^T + bias           [N * OH * OW, O]               mg::linear: one GEMM
//   y    = rows as [N, OH, OW, O] permuted to [N, O, OH, OW]
//
// Only im2col needs a backward of its own (col2im, its adjoint); the GEMM, the bias and the permute
// reuse linear's and permute's. So under autocast the GEMM runs in f16 with f32 accumulation and the
// saved `cols` are f16: half the bytes of f32. (They are KH * KW times the input's size: the price
// of doing convolution as one GEMM, paid back by GEMM speed.)
#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "kernels/conv.h"

namespace mg {

namespace {

// The windows of x as rows: [N * OH * OW, C * KH * KW]. Exact in every dtype.
Tensor im2col(const Tensor& x, const kernels::Window2d& window) {
  Tensor cols = Tensor::empty({window.batch * window.out_h() * window.out_w(),
                               window.channels * window.kernel_h * window.kernel_w}, check::like(x));
  kernels::im2col(x, window, cols);
  record(Op::Im2col, {x}, cols, [window, shape = x.shape()](const Tensor& g, const auto&) {
    Tensor dx = Tensor::empty(shape, check::like(g));
    kernels::col2im(g, window, dx);  // sums every window's share of each pixel, in f32
    return Grads{dx};
  });
  return cols;
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, Conv2dOptions options) {
  constexpr Op op = Op::Conv2d;
  MG_CHECK(weight_in.defined() && weight_in.dim() == 4,
           "{}: the weight must be [out_channels, in_channels, kernel_h, kernel_w], got {}", op,
           weight_in.defined() ? weight_in.shape() : Shape{});
  kernels::Window2d window = check::window2d(op, x_in, weight_in.size(2), weight_in.size(3), options.stride, options.padding);
  MG_CHECK(x_in.size(1) == weight_in.size(1), "{}: the input has {} channels but the weight {} expects {}", op,
           x_in.size(1), weight_in.shape(), weight_in.size(1));
  const std::int64_t out_channels = weight_in.size(0);
  MG_CHECK(!bias_in.defined() || bias_in.shape() == Shape{out_channels}, "{}: the bias must be [{}], got {}", op,
           out_channels, bias_in.shape());
  auto [x, weight, bias] = autocast_inputs(op, x_in, weight_in, bias_in);
  check::same_device(op, {x, weight});
  check::floating(op, x);
  check::same_dtype(op, x, weight);
  if (bias.defined()) check::same_dtype(op, x, bias);

  Tensor cols = im2col(x, window);                                                    // [N*OH*OW, C*KH*KW]
  Tensor rows = linear(cols, reshape(weight, {out_channels, -1}), bias);              // [N*OH*OW, O]
  Tensor channels_last = reshape(rows, {window.batch, window.out_h() * window.out_w(), out_channels});
  return reshape(permute(channels_last, {0, 2, 1}), {window.batch, out_channels, window.out_h(), window.out_w()});
}

}  // namespace mg
