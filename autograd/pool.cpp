// max_pool2d and avg_pool2d over [N, C, H, W], forward and backward side by side (kernels/pool.h).
// max_pool2d saves the position of each window's maximum (i32, the output's size), not the input.
#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "kernels/pool.h"

namespace mg {

namespace {

kernels::Window2d pool_window(Op op, const Tensor& x, const Pool2dOptions& options) {
  kernels::Window2d w = check::window2d(op, x, options.kernel, options.kernel,
                                        options.stride == 0 ? options.kernel : options.stride, options.padding);
  check::floating(op, x);
  // PyTorch's rule: a window made only of padding would have no value to take.
  MG_CHECK(2 * options.padding <= options.kernel, "{}: padding {} must be at most half the kernel size {}", op,
           options.padding, options.kernel);
  return w;
}

}  // namespace

Tensor max_pool2d(const Tensor& x_in, Pool2dOptions options) {
  const OpSpan span(Op::MaxPool2d);
  const Tensor x = autocast_input(Op::MaxPool2d, x_in);
  const kernels::Window2d w = pool_window(Op::MaxPool2d, x, options);
  const Shape out_shape{w.batch, w.channels, w.out_h(), w.out_w()};
  Tensor y = Tensor::empty(out_shape, check::like(x));
  Tensor argmax = Tensor::empty(out_shape, {.dtype = DType::I32, .device = x.device()});
  kernels::max_pool2d(x, w, y, argmax);
  record(Op::MaxPool2d, {x}, y, [w, argmax, shape = x.shape()](const Tensor& g, const auto&) {
    Tensor dx = Tensor::empty(shape, check::like(g));
    kernels::max_pool2d_backward(g, argmax, w, dx);  // each output's gradient goes to its maximum
    return Grads{dx};
  });
  return y;
}

Tensor avg_pool2d(const Tensor& x_in, Pool2dOptions options) {
  const OpSpan span(Op::AvgPool2d);
  const Tensor x = autocast_input(Op::AvgPool2d, x_in);
  const kernels::Window2d w = pool_window(Op::AvgPool2d, x, options);
  Tensor y = Tensor::empty({w.batch, w.channels, w.out_h(), w.out_w()}, check::like(x));
  kernels::avg_pool2d(x, w, y);
  record(Op::AvgPool2d, {x}, y, [w, shape = x.shape()](const Tensor& g, const auto&) {
    Tensor dx = Tensor::empty(shape, check::like(g));
    kernels::avg_pool2d_backward(g, w, dx);  // each window's pixels share its gradient equally
    return Grads{dx};
  });
  return y;
}

}  // namespace mg
