// conv2d: a convolution, on one of two paths.
//
// On the CPU, where a GEMM microkernel runs for the dtype (kernels/conv.h, conv2d_implicit), as
// implicit GEMMs that read each window straight from the image (or from a zero-padded copy of it,
// kernels/cpu/conv_shifted.h) and write channels-first:
//   y  = conv2d_forward(x, W, bias)        [N, O, OH, OW]   each element one f32 sum + bias, rounded once
//   dx = conv2d_input_grad(dy, W)          [N, C, H, W]     one f32 sum per element (the forward pass of
//                                                           the padded dy with W mirrored), rounded once;
//                                                           or windows' shares summed in f32 (col2im)
//   dW = conv2d_weight_grad(dy, x)         [O, C, KH, KW]   summed over every image in f32, rounded once
//   db = dy summed over N, OH, OW                           (in f32, rounded once: mg::sum_to)
// Saved for backward: x and W (under autocast their f16/bf16 copies), no window matrix at all.
//
// Elsewhere (the GPU, f64, strides > 1), as im2col + one GEMM (+ bias), then a permute back to
// channels-first:
//
//   x      [N, C, H, W]              weight [O, C, KH, KW]          bias [O]
//   cols = im2col(x)                 [N * OH * OW, C * KH * KW]     every input window as a row
//   rows = cols W^T + bias           [N * OH * OW, O]               one GEMM, the bias in its epilogue
//   y    = rows as [N, OH, OW, O] permuted to [N, O, OH, OW]
//
// Backward of the GEMM step, with dy = d rows [N * OH * OW, O]:
//   dcols = dy W               [N * OH * OW, C * KH * KW]   in f32 (f64 for f64), never rounded to f16
//   dx    = col2im(dcols)      [N, C, H, W]                 a pixel's window shares summed in f32, rounded once
//   dW    = dy^T cols          [O, C * KH * KW]             (TN: no transposed copy)
//   db    = dy summed over the rows                         (in f32, rounded once: mg::sum_to)
// So under autocast (or on f16/bf16 inputs) y and dx are each rounded once, as a direct convolution
// with f32 accumulation rounds them: the bias is added to the f32 sum, and each window's share of dx
// stays f32 until col2im has added them up (an f16 dcols would round every share, then their sum).
// The GEMM runs in f16 with f32 accumulation and saves the f16 `cols`: half the bytes of f32. (They
// are KH * KW times the input's size: the price of doing convolution as one GEMM, paid back by GEMM
// speed.) The permute reuses permute's backward.
#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "kernels/conv.h"
#include "kernels/gemm.h"

namespace mg {

namespace {

// rows = im2col(x) W^T + bias as one recorded op, weight viewed as [O, C * KH * KW]: [N * OH * OW, O].
// Saves cols and the weight (under autocast the f16/bf16 copies).
Tensor convolution_rows(const Tensor& x, const Tensor& weight, const Tensor& bias, const kernels::Window2d& window) {
  const std::int64_t out_channels = weight.size(0), taps = weight.size(1);
  const std::int64_t positions = window.batch * window.out_h() * window.out_w();
  Tensor cols = Tensor::empty({positions, taps}, check::like(x));
  kernels::im2col(x, window, cols);  // exact in every dtype
  Tensor rows = Tensor::empty({positions, out_channels}, check::like(x));
  kernels::gemm(cols, weight, rows, {.m = positions, .n = out_channels, .k = taps, .transpose_b = true},
                {.bias = bias});
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  record(Op::Conv2d, inputs, rows,
         [cols = Saved(cols), weight = Saved(weight), window, x_shape = x.shape(), positions, out_channels,
          taps](const Tensor& dy, const auto& needs) {
           Grads grads(needs.size());
           if (needs[0]) {
             const DType compute = dy.dtype() == DType::F64 ? DType::F64 : DType::F32;
             Tensor dcols = Tensor::empty({positions, taps}, {.dtype = compute, .device = dy.device()});
             kernels::gemm(dy, weight, dcols, {.m = positions, .n = taps, .k = out_channels});
             grads[0] = Tensor::empty(x_shape, check::like(dy));
             kernels::col2im(dcols, window, grads[0]);
           }
           if (needs[1]) grads[1] = matmul(dy, cols, {.transpose_a = true});
           if (needs.size() == 3 && needs[2]) grads[2] = sum_to(dy, {out_channels});
           return grads;
         });
  return rows;
}

// y = x * W + bias on the implicit path (the top of this file), recorded as one op. Saves x and W.
Tensor convolution_implicit(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const kernels::Window2d& window) {
  const std::int64_t out_channels = weight.size(0);
  Tensor y = Tensor::empty({window.batch, out_channels, window.out_h(), window.out_w()}, check::like(x));
  kernels::conv2d_forward(x, weight, bias, window, y);
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  record(Op::Conv2d, inputs, y,
         [x = Saved(x), weight = Saved(weight), window, out_channels](const Tensor& dy, const auto& needs) {
           Grads grads(needs.size());
           if (needs[0]) {
             grads[0] = Tensor::empty(x.get().shape(), check::like(dy));
             kernels::conv2d_input_grad(dy, weight, window, grads[0]);
           }
           if (needs[1]) {
             grads[1] = Tensor::empty(weight.get().shape(), check::like(dy));
             kernels::conv2d_weight_grad(dy, x, window, grads[1]);
           }
           if (needs.size() == 3 && needs[2]) grads[2] = reshape(sum_to(dy, {out_channels, 1, 1}), {out_channels});
           return grads;
         });
  return y;
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, Conv2dOptions options) {
  constexpr Op op = Op::Conv2d;
  const OpSpan span(op);
  MG_CHECK(weight_in.defined() && weight_in.dim() == 4,
           "{}: the weight must be [out_channels, in_channels, kernel_h, kernel_w], got {}", op,
           weight_in.defined() ? weight_in.shape() : Shape{});
  kernels::Window2d window = check::window2d(op, x_in, weight_in.size(2), weight_in.size(3), options.stride,
                                             options.padding);
  MG_CHECK(x_in.size(1) == weight_in.size(1), "{}: the input has {} channels but the weight {} expects {}", op,
           x_in.size(1), weight_in.shape(), weight_in.size(1));
  const std::int64_t out_channels = weight_in.size(0);
  MG_CHECK(!bias_in.defined() || bias_in.shape() == Shape{out_channels}, "{}: the bias must be [{}], got {}", op,
           out_channels, bias_in.shape());
  auto [x, weight, bias] = autocast_inputs(op, x_in, weight_in, bias_in);
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  check::same_device(op, inputs);
  check::floating(op, x);
  check::same_dtype(op, x, weight);
  if (bias.defined()) check::same_dtype(op, x, bias);

  if (kernels::conv2d_implicit(x, window)) return convolution_implicit(x, weight, bias, window);
  Tensor rows = convolution_rows(x, reshape(weight, {out_channels, -1}), bias, window);  // [N*OH*OW, O]
  Tensor channels_last = reshape(rows, {window.batch, window.out_h() * window.out_w(), out_channels});
  return reshape(permute(channels_last, {0, 2, 1}), {window.batch, out_channels, window.out_h(), window.out_w()});
}

}  // namespace mg
