// Losses, computed in f32 (f64 for f64) whatever the input dtype. cross_entropy is one fused op
// (log-softmax, pick the label, reduce); mse_loss is derived from cast, sub, mul and mean, so it
// needs no backward of its own.
#include <algorithm>
#include <limits>

#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "core/factory.h"
#include "kernels/copy.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"

namespace mg {

namespace {

// Checks every label before any kernel runs; returns how many rows are not ignored.
std::int64_t count_labels(const Tensor& labels, std::int64_t classes, std::int64_t ignore_index) {
  // Checked on the host before any kernel runs: no wait for labels uploaded from the host
  // (check::index_values), a read from the device otherwise.
  const std::vector<std::int32_t> label = check::index_values(labels);
  std::int64_t counted = 0;
  for (std::int64_t r = 0; r < labels.numel(); ++r) {
    if (label[r] == ignore_index) continue;
    MG_CHECK(label[r] >= 0 && label[r] < classes,
             "{}: label {} at row {} is out of range for {} classes (valid: 0..{}, or the ignore_index {})",
             Op::CrossEntropy, label[r], r, classes, classes - 1, ignore_index);
    ++counted;
  }
  return counted;
}

// Label smoothing, as PyTorch's: (1 - s) times the plain loss plus s times each counted row's mean
// over the classes of -log p, which is lse - mean(x); ignored rows add nothing, and Mean divides by
// the counted rows. Made of recorded f32 (f64) ops around the fused loss, so it needs no backward:
// dlogits = softmax - (1 - s) onehot - s / classes, times each row's weight.
Tensor smoothed_cross_entropy(const Tensor& logits_in, const Tensor& labels, CrossEntropyOptions options) {
  constexpr Op op = Op::CrossEntropy;
  const Tensor logits = autocast_input(op, logits_in);
  check::floating(op, logits);
  const double smoothing = options.label_smoothing;
  options.label_smoothing = 0.0;
  const Tensor x = cast(logits, logits.dtype() == DType::F64 ? DType::F64 : DType::F32);
  const Tensor plain = cross_entropy(x, labels, options);  // checks the shapes and the labels
  std::vector<double> counted;  // 1 for a row whose label is not ignored
  for (std::int32_t label : check::index_values(labels)) counted.push_back(label != options.ignore_index ? 1 : 0);
  const double count = std::count(counted.begin(), counted.end(), 1.0);
  const Tensor mask = from_vector(counted, {x.size(0)}, check::like(x));
  const Tensor uniform_part = where(mask, sub(logsumexp(x, {1}), mean(x, 1)), zeros({}, check::like(x)));
  Tensor reduced = uniform_part;
  if (options.reduction == Reduction::Sum) reduced = sum(uniform_part);
  if (options.reduction == Reduction::Mean) reduced = div(sum(uniform_part), count);  // no rows counted: NaN
  return cast(add(mul(plain, 1.0 - smoothing), mul(reduced, smoothing)), logits.dtype());
}

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& labels_in, CrossEntropyOptions options) {
  constexpr Op op = Op::CrossEntropy;
  const OpSpan span(op);
  MG_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0,
           "{}: label_smoothing must be in [0, 1], got {}", op, options.label_smoothing);
  if (options.label_smoothing > 0.0) return smoothed_cross_entropy(logits_in, labels_in, options);
  const Tensor logits = autocast_input(op, logits_in);
  check::same_device(op, {logits, labels_in});
  check::floating(op, logits);
  MG_CHECK(logits.dim() == 2,
           "{}: logits must be [rows, classes], got shape {} (reshape sequences to "
           "[batch * time, classes])",
           op, logits.shape());
  // Class indices: i32 (randint's, the loaders'), or i64 as PyTorch saves them, read as i32. For
  // probabilities as targets there is no op yet.
  const Tensor labels = check::indices_as_i32(op, labels_in, "labels");
  MG_CHECK(labels.dim() == 1 && labels.size(0) == logits.size(0),
           "{}: labels must be [rows] = [{}] to match logits {}, got shape {}", op, logits.size(0), logits.shape(),
           labels.shape());
  check::not_empty(op, logits);
  const std::int64_t rows = logits.size(0);
  const std::int64_t counted = count_labels(labels, logits.size(1), options.ignore_index);

  // Per-row losses, and each row's max and log-sum-exp of x - max, in the compute dtype (f32; f64 for f64).
  const DType compute = logits.dtype() == DType::F64 ? DType::F64 : DType::F32;
  TensorOptions compute_options{.dtype = compute, .device = logits.device()};
  Tensor row_loss = Tensor::empty({rows}, compute_options);
  Tensor row_stats = Tensor::empty({rows, 2}, compute_options);
  kernels::cross_entropy(logits, labels, options.ignore_index, row_loss, row_stats);

  // The reduction, still in the compute dtype; the result is rounded once into the logits' dtype.
  const Reduction reduction = options.reduction;
  const double scale = reduction == Reduction::Mean ? 1.0 / static_cast<double>(counted) : 1.0;
  Tensor reduced = row_loss;
  if (reduction != Reduction::None) {
    reduced = Tensor::empty({}, compute_options);
    kernels::reduce(kernels::ReduceOp::Sum, row_loss, {1, rows, 1}, reduced);
    kernels::unary(kernels::UnaryOp::MulScalar, reduced, reduced, {scale});
  }
  Tensor loss = Tensor::empty(reduced.shape(), check::like(logits));
  kernels::cast(reduced, loss);

  // Saves the logits, labels and per-row statistics; the softmax is rebuilt in backward.
  record(op, {logits, labels}, loss,
         [logits = Saved(logits), labels = Saved(labels), row_stats, scale, rows, compute_options,
          ignore = options.ignore_index](const Tensor& g, const auto&) {
           // Each row's weight: g[r] (None), or the scalar g times 1 (Sum) or 1/count (Mean).
           Tensor g_compute = Tensor::empty(g.shape(), compute_options);
           kernels::cast(g, g_compute);
           Tensor row_weight = Tensor::empty({rows}, compute_options);
           kernels::unary(kernels::UnaryOp::MulScalar, g_compute, row_weight, {scale});
           Tensor dlogits = Tensor::empty(logits.get().shape(), check::like(logits));
           kernels::cross_entropy_backward(logits, labels, row_stats, row_weight, ignore, dlogits);
           return Grads{dlogits, Tensor()};
         });
  return loss;
}

// Computed in f32 (f64 for f64) through recorded casts, so an f16 difference of 300 squares to
// 90000 without overflowing; the result is rounded once back to the inputs' dtype.
Tensor mse_loss(const Tensor& prediction_in, const Tensor& target_in, Reduction reduction) {
  constexpr Op op = Op::MseLoss;
  const OpSpan span(op);
  auto [prediction, target] = autocast_inputs(op, prediction_in, target_in);
  check::same_device(op, {prediction, target});  // checked here so that errors name mse_loss
  check::floating(op, prediction);
  check::same_dtype(op, prediction, target);
  MG_CHECK(prediction.shape() == target.shape(),
           "{}: prediction {} and target {} must have the same shape (no broadcasting: it hides bugs)", op,
           prediction.shape(), target.shape());
  MG_CHECK(reduction != Reduction::Mean || prediction.numel() > 0,
           "{}: the mean over an empty tensor (shape {}) is "
           "undefined",
           op, prediction.shape());
  const DType compute = prediction.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor diff = sub(cast(prediction, compute), cast(target, compute));
  Tensor squared = mul(diff, diff);
  Tensor loss = reduction == Reduction::Mean ? mean(squared) : reduction == Reduction::Sum ? sum(squared) : squared;
  return cast(loss, prediction.dtype());
}

namespace {

// The shared frame of the two binary cross entropies: checks, f32 (f64) inputs without recording,
// the per-element loss, the reduction, and a backward of the form g * scale * formula.
using ElementLoss = Tensor (*)(const Tensor& x, const Tensor& t);
using ElementGrads = Grads (*)(const Tensor& x, const Tensor& t, const std::vector<bool>& needs);

Tensor binary_loss(Op op, const Tensor& x_in, const Tensor& t_in, Reduction reduction, ElementLoss element_loss,
                   ElementGrads element_grads) {
  const OpSpan span(op);
  auto [x_cast, t_cast] = autocast_inputs(op, x_in, t_in);
  check::same_device(op, {x_cast, t_cast});
  check::floating(op, x_cast);
  check::same_dtype(op, x_cast, t_cast);
  MG_CHECK(x_cast.shape() == t_cast.shape(), "{}: input {} and targets {} must have the same shape", op, x_cast.shape(),
           t_cast.shape());
  MG_CHECK(reduction != Reduction::Mean || x_cast.numel() > 0, "{}: the mean over an empty tensor is undefined", op);
  const DType compute = x_cast.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor per_element, reduced, x, t;
  {
    NoGradGuard no_grad;  // the backward below is the whole derivative
    x = cast(x_cast, compute);
    t = cast(t_cast, compute);
    per_element = element_loss(x, t);
    reduced = reduction == Reduction::Mean  ? mean(per_element)
              : reduction == Reduction::Sum ? sum(per_element)
                                            : per_element;
  }
  Tensor loss = cast(reduced.detach(), x_cast.dtype()).detach();
  const double scale = reduction == Reduction::Mean ? 1.0 / static_cast<double>(x.numel()) : 1.0;
  record(op, {x_cast, t_cast}, loss,
         [x = Saved(x), t = Saved(t), scale, element_grads, x_dtype = x_cast.dtype()](const Tensor& g,
                                                                                      const auto& needs) {
           Tensor weight = mul(cast(g, x.get().dtype()), scale);  // a scalar, or one weight per element
           Grads grads = element_grads(x, t, needs);
           for (Tensor& grad : grads)
             if (grad.defined()) grad = cast(mul(grad, weight), x_dtype);
           return grads;
         });
  return loss;
}

}  // namespace

Tensor binary_cross_entropy(const Tensor& probabilities, const Tensor& targets, Reduction reduction) {
  return binary_loss(
      Op::BinaryCrossEntropy, probabilities, targets, reduction,
      [](const Tensor& p, const Tensor& t) {
        const double inf = std::numeric_limits<double>::infinity();
        Tensor log_p = clamp(log(p), -100.0, inf), log_q = clamp(log(rsub(1.0, p)), -100.0, inf);
        return neg(add(mul(t, log_p), mul(rsub(1.0, t), log_q)));
      },
      [](const Tensor& p, const Tensor& t, const std::vector<bool>& needs) {
        const double inf = std::numeric_limits<double>::infinity();
        Tensor dp = needs[0] ? div(sub(p, t), clamp(mul(p, rsub(1.0, p)), 1e-12, inf)) : Tensor();
        return Grads{dp, Tensor()};
      });
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets, Reduction reduction) {
  return binary_loss(
      Op::BinaryCrossEntropyWithLogits, logits, targets, reduction,
      [](const Tensor& x, const Tensor& t) { return add(sub(relu(x), mul(x, t)), log(add(exp(neg(abs(x))), 1.0))); },
      [](const Tensor& x, const Tensor& t, const std::vector<bool>& needs) {
        return Grads{needs[0] ? sub(sigmoid(x), t) : Tensor(), needs[1] ? neg(x) : Tensor()};
      });
}

}  // namespace mg
