#include "train/loss.h"

#include "autograd/ops.h"

namespace mg::train {

Tensor mean_cross_entropy(const Tensor& logits, const Tensor& targets) {
  return cross_entropy(reshape(logits, {-1, logits.size(-1)}), reshape(targets, {-1}));
}

Tensor mean_loss(Loss loss, const Tensor& outputs, const Tensor& targets) {
  if (loss == Loss::CrossEntropy) return mean_cross_entropy(outputs, targets);
  const std::int64_t n = outputs.size(0);
  return binary_cross_entropy_with_logits(reshape(outputs, {n, -1}), reshape(targets, {n, -1}));
}

}  // namespace mg::train
