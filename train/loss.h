// What a model is trained to do, and the mean loss a training step minimises: the one definition
// train::Trainer, the scores of train/evaluation.h and the benchmarks use.
//
//   Tensor loss = mean_loss(Loss::CrossEntropy, model(x), labels);   // logits [..., C], targets [...]
#pragma once

#include "core/tensor.h"

namespace mg::train {

// logits [..., classes] and targets [...] -> the mean cross entropy over every position.
Tensor mean_cross_entropy(const Tensor& logits, const Tensor& targets);

// What a model is trained to do. CrossEntropy: classify, logits [..., classes] against i32 targets
// [...] (mean_cross_entropy). BinaryCrossEntropyWithLogits: reconstruct, logits against f32 targets in
// [0, 1] of the same number of elements per example (an autoencoder's pixels), the mean over every
// element, so each output's gradient is (sigmoid(x) - t) / (batch x outputs).
enum class Loss { CrossEntropy, BinaryCrossEntropyWithLogits };
// outputs [N, ...] and targets [N, ...] -> the mean loss, f32 (as the loss ops compute it).
Tensor mean_loss(Loss loss, const Tensor& outputs, const Tensor& targets);

}  // namespace mg::train
