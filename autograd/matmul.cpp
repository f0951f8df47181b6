// matmul: C = op(A) op(B) with op = identity or transpose, forward and backward side by side.
//
// Backward, with X^T written as a layout flag (no copies):
//   dA = dC op(B)^T   (stored as A: transposed back when A was used transposed)
//   dB = op(A)^T dC
// which, for each combination of flags, is one more call to matmul itself (see below).
//
// The other shapes of torch.matmul become these two: a vector is reshaped into a one-row or
// one-column matrix; [..., m, k] x [k, n] into one [rows, k] x [k, n] product; and operands whose
// batch dims broadcast are repeated to the common batch (broadcast_to) and flattened to one batch dim.
// Those are recorded reshapes and broadcasts, so their backward needs nothing here.
#include <algorithm>

#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "kernels/gemm.h"

namespace mg {

namespace {

// The dims before the last two: a 2-D operand has none.
Shape batch_dims(const Tensor& x) { return Shape(x.shape().begin(), x.shape().end() - 2); }

// x repeated to `batch` + its last two dims, then viewed as [numel(batch), rows, cols].
Tensor to_flat_batch(const Tensor& x, const Shape& batch) {
  Shape full = batch;
  full.insert(full.end(), x.shape().end() - 2, x.shape().end());
  return reshape(broadcast_to(x, full), {numel(batch), x.size(-2), x.size(-1)});
}

// [..., m, k] x [..., k, n] whose batch dims differ but broadcast (NumPy's rule: aligned at the
// right, each pair equal or one of them 1), as one batched product over the common batch.
Tensor broadcast_batches(const Tensor& a, const Tensor& b, MatmulOptions options) {
  const Shape a_batch = batch_dims(a), b_batch = batch_dims(b);
  const std::size_t rank = std::max(a_batch.size(), b_batch.size());
  Shape batch(rank);
  for (std::size_t i = 0; i < rank; ++i) {  // i counts from the right
    const std::int64_t da = i < a_batch.size() ? a_batch[a_batch.size() - 1 - i] : 1;
    const std::int64_t db = i < b_batch.size() ? b_batch[b_batch.size() - 1 - i] : 1;
    MG_CHECK(da == db || da == 1 || db == 1,
             "{}: batch sizes differ and do not broadcast: {} and {} (the dims "
             "before the last two must be equal or 1, aligned at the right)",
             Op::MatMul, a.shape(), b.shape());
    batch[rank - 1 - i] = da == 1 ? db : da;
  }
  Tensor c = matmul(to_flat_batch(a, batch), to_flat_batch(b, batch), options);
  Shape shape = batch;
  shape.insert(shape.end(), {c.size(1), c.size(2)});
  return reshape(c, shape);
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in, MatmulOptions options) {
  constexpr Op op = Op::MatMul;
  const OpSpan span(op);
  auto [a, b] = autocast_inputs(op, a_in, b_in);  // under autocast: f16/bf16 copies
  check::same_device(op, {a, b});
  check::floating(op, a);
  check::floating(op, b);
  check::same_dtype(op, a, b);
  const bool ta = options.transpose_a, tb = options.transpose_b;
  MG_CHECK(a.dim() >= 1 && b.dim() >= 1,
           "{}: needs operands of at least one dim, got shapes {} and {}; a 0-d "
           "tensor multiplies with mg::mul",
           op, a.shape(), b.shape());
  MG_CHECK((a.dim() > 1 || !ta) && (b.dim() > 1 || !tb),
           "{}: a 1-D operand takes no transpose flag (shapes {} "
           "and {}, transpose_a {}, transpose_b {})",
           op, a.shape(), b.shape(), ta, tb);
  // Checked on the shapes the caller passed, before any reshape below renames them.
  const std::int64_t k_of_a = a.dim() == 1 ? a.size(0) : ta ? a.size(-2) : a.size(-1);
  const std::int64_t k_of_b = b.dim() == 1 ? b.size(0) : tb ? b.size(-1) : b.size(-2);
  MG_CHECK(k_of_a == k_of_b,
           "{}: inner dimensions differ: {}{} has k = {} but {}{} has k = {}; the product needs op(a) [..., m, k] "
           "and op(b) [..., k, n]",
           op, a.shape(), ta ? " (transposed)" : "", k_of_a, b.shape(), tb ? " (transposed)" : "", k_of_b);

  // A vector: a row [1, k] on the left, a column [k, 1] on the right; that dim leaves the result.
  if (a.dim() == 1 || b.dim() == 1) {
    Tensor c = matmul(a.dim() == 1 ? reshape(a, {1, a.size(0)}) : a, b.dim() == 1 ? reshape(b, {b.size(0), 1}) : b,
                      options);
    Shape shape = c.shape();
    if (a.dim() == 1) shape.erase(shape.end() - 2);
    if (b.dim() == 1) shape.pop_back();
    return reshape(c, shape);
  }
  // [..., m, k] x [k, n]: one 2-D product over all rows, so the shared operand is not repeated and its
  // gradient is summed over the batch by the GEMM itself.
  if (a.dim() > 2 && b.dim() == 2 && !ta) {
    Tensor rows = matmul(reshape(a, {product(a.shape(), 0, a.shape().size() - 1), a.size(-1)}), b, options);
    Shape shape = a.shape();
    shape.back() = rows.size(1);
    return reshape(rows, shape);
  }
  if (!(a.dim() == 2 && b.dim() == 2) && !(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0)))
    return broadcast_batches(a, b, options);
  const bool batched = a.dim() == 3;
  const int rows = batched ? 1 : 0;  // index of the first matrix dim
  kernels::GemmShape shape;
  shape.batch = batched ? a.size(0) : 1;
  shape.m = ta ? a.size(rows + 1) : a.size(rows);
  shape.k = k_of_a;
  shape.n = tb ? b.size(rows) : b.size(rows + 1);
  shape.transpose_a = ta;
  shape.transpose_b = tb;

  Shape out_shape = batched ? Shape{shape.batch, shape.m, shape.n} : Shape{shape.m, shape.n};
  Tensor c = Tensor::empty(out_shape, check::like(a));
  kernels::gemm(a, b, c, shape);

  // Saves a and b (under autocast these are the f16 copies, half the memory of f32).
  record(op, {a, b}, c, [a = Saved(a), b = Saved(b), ta, tb](const Tensor& g, const auto& needs) {
    Tensor da, db;
    if (needs[0])
      da = ta ? matmul(b, g, {.transpose_a = tb, .transpose_b = true})  // dA = op(B) dC^T
              : matmul(g, b, {.transpose_a = false, .transpose_b = !tb});  // dA = dC op(B)^T
    if (needs[1])
      db = tb ? matmul(g, a, {.transpose_a = true, .transpose_b = ta})  // dB = dC^T op(A)
              : matmul(a, g, {.transpose_a = !ta, .transpose_b = false});  // dB = op(A)^T dC
    return Grads{da, db};
  });
  return c;
}

// linear: y = x W^T + b as one GEMM whose epilogue adds the bias to the f32 sum before the one
// rounding (kernels/gemm.h): under autocast an f16 y is rounded once, where a GEMM then an add would
// round twice. Backward, with x viewed as [rows, in] and dy as [rows, out]:
//   dx = dy W         [rows, out] x [out, in]
//   dW = dy^T x       [out, rows] x [rows, in]   (TN: no transposed copy)
//   db = dy summed over the rows                  (in f32, rounded once: mg::sum_to)
Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  constexpr Op op = Op::Linear;
  const OpSpan span(op);
  MG_CHECK(x_in.defined() && weight_in.defined(), "{}: the input or the weight is undefined", op);
  MG_CHECK(weight_in.dim() == 2 && x_in.dim() >= 1 && x_in.size(-1) == weight_in.size(1),
           "{}: needs x [..., in] (any leading dims, or none) and weight [out, in]; got {} and {}", op, x_in.shape(),
           weight_in.shape());
  MG_CHECK(!bias_in.defined() || bias_in.shape() == Shape{weight_in.size(0)},
           "{}: the bias must be [out] = [{}], got {}", op, weight_in.size(0), bias_in.shape());
  auto [x, weight, bias] = autocast_inputs(op, x_in, weight_in, bias_in);
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  check::same_device(op, inputs);
  check::floating(op, x);
  for (std::size_t i = 1; i < inputs.size(); ++i) check::same_dtype(op, x, inputs[i]);

  // Every leading dim is a row of one GEMM, as in torch.nn.functional.linear: [2, 3, 5, in] is 30 rows.
  const std::int64_t out = weight.size(0), in = weight.size(1);
  std::int64_t rows = 1;
  for (std::int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  Shape y_shape = x.shape();
  y_shape.back() = out;
  Tensor y = Tensor::empty(y_shape, check::like(x));
  kernels::gemm(x, weight, y, {.m = rows, .n = out, .k = in, .transpose_b = true}, {.bias = bias});

  // Saves x and W (under autocast the f16/bf16 copies); the bias's gradient needs neither.
  record(op, inputs, y, [x = Saved(x), weight = Saved(weight), rows, in, out](const Tensor& g, const auto& needs) {
    const Tensor dy = reshape(g, {rows, out});
    Grads grads(needs.size());
    if (needs[0]) grads[0] = reshape(matmul(dy, weight), x.get().shape());
    if (needs[1]) grads[1] = matmul(dy, reshape(x, {rows, in}), {.transpose_a = true});
    if (needs.size() == 3 && needs[2]) grads[2] = sum_to(dy, {out});
    return grads;
  });
  return y;
}

}  // namespace mg
