// How `mixgrad train` and `mixgrad repro` feed and score a model: the one definition of each.
//
//   Tensor x = standardize_pixels(images);                       // Fashion-MNIST pixels, ~unit variance
//   Tensor loss = mean_cross_entropy(model(x), labels);          // logits [..., C], targets [...]
//   double acc = test_accuracy(model, images, labels, recipe, device);
//   double bpc = bits_per_char(model, tokens, 64, recipe, device);
//
// The scores run under the recipe's autocast, without a tape, in eval mode (restored to train mode
// after), on the model's device; inputs stay on the CPU and move there a chunk at a time.
#pragma once

#include <cstdint>

#include "amp/recipe.h"
#include "core/tensor.h"
#include "nn/module.h"

namespace mg::tools {

// Fashion-MNIST's pixel mean and standard deviation over the training set (of values in [0, 1]):
// standardized inputs let the first layer start where its initialization assumes unit variance.
constexpr double kPixelMean = 0.2860, kPixelStd = 0.3530;
Tensor standardize_pixels(const Tensor& images);

// logits [..., classes] and targets [...] -> the mean cross entropy over every position.
Tensor mean_cross_entropy(const Tensor& logits, const Tensor& targets);

// The fraction of images [N, ...] whose argmax logit is their label [N] (i32).
double test_accuracy(nn::Module& model, const Tensor& images, const Tensor& labels, const amp::Recipe& recipe,
                     Device device);

// Mean cross entropy in bits per token over the non-overlapping windows of `context` tokens of a
// 1-D i32 token tensor (data::sequential_batches, 64 windows at a time).
double bits_per_char(nn::Module& model, const Tensor& tokens, std::int64_t context, const amp::Recipe& recipe,
                     Device device);

}  // namespace mg::tools
