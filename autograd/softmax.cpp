// softmax and log_softmax along a dim. Both save their output y: the backward needs only y.
//   softmax:      dx = y * (dy - sum(dy * y))
//   log_softmax:  dx = dy - exp(y) * sum(dy)
#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "kernels/softmax.h"

namespace mg {

namespace {

Tensor softmax_op(const Tensor& x_in, std::int64_t dim, bool log) {
  const Op op = log ? Op::LogSoftmax : Op::Softmax;
  const OpSpan span(op);
  const Tensor x = autocast_input(op, x_in);
  check::floating(op, x);
  const auto d = static_cast<std::size_t>(normalize_dim(dim, x.shape().size(), qualified_name(op)));
  kernels::ReduceShape view{product(x.shape(), 0, d), x.shape()[d], product(x.shape(), d + 1, x.shape().size())};
  Tensor y = Tensor::empty(x.shape(), check::like(x));
  if (x.numel() > 0) kernels::softmax(x, view, log, y);
  record(op, {x}, y, [y = Saved(y), view, log](const Tensor& g, const auto&) {
    Tensor dx = Tensor::empty(g.shape(), check::like(g));
    if (g.numel() > 0) kernels::softmax_backward(y, g, view, log, dx);
    return Grads{dx};
  });
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, std::int64_t dim) { return softmax_op(x, dim, false); }
Tensor log_softmax(const Tensor& x, std::int64_t dim) { return softmax_op(x, dim, true); }

}  // namespace mg
