// How `mixgrad train` and `mixgrad repro` feed and score a model: the one definition of each.
//
//   standardize_pixels_(images);                                 // Fashion-MNIST pixels, ~unit variance
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
#include "optim/optimizer.h"
#include "train/loss.h"

namespace mg::train {

// Fashion-MNIST's pixel mean and standard deviation over the training set (of values in [0, 1]):
// standardized inputs let the first layer start where its initialization assumes unit variance.
constexpr double kPixelMean = 0.2860, kPixelStd = 0.3530;
// In place (PyTorch's trailing underscore), with the very kernels of mg::div(mg::sub(images, mean),
// std), so the values are theirs bit for bit: the 60,000 training images are 188 MB in f32, and the
// two ops out of place would hold three such copies at once (and leave two in the CPU allocator's
// cache). `images`: f32 on the CPU, not requiring grad.
void standardize_pixels_(Tensor& images);

// The inverse of standardize_pixels_: standardized images [N, ...] back to their pixels in [0, 1],
// flattened to [N, pixels] (an autoencoder's targets). No tape.
Tensor pixels_of(const Tensor& images);

// Loads `trained`'s state into `fp32_model` (the same architecture, f32, on the trained model's
// device), to score in fp32 as the PyTorch and Keras mixed-precision guides advise: each parameter
// from its f32 master where `optimizer` keeps one (the weights PyTorch's AMP model would hold),
// everything else widened to f32 (exact); an FP8 recipe's scaling state (amax histories) is left out
// unless `fp32_model` holds it too. An mg::Error from load_state_dict when the two differ.
void load_fp32_(nn::Module& fp32_model, const nn::Module& trained, const optim::Optimizer& optimizer);

// The mean loss of the model over inputs [N, ...] and targets [N, ...] on the CPU, `batch` examples
// at a time (each batch's mean weighted by its size).
double test_loss(nn::Module& model, const Tensor& inputs, const Tensor& targets, Loss loss, const amp::Recipe& recipe,
                 Device device, std::int64_t batch = 250);

// The fraction of images [N, ...] whose argmax logit is their label [N] (i32), scored `batch` images
// at a time. Pass the training batch size and the forward passes reuse the buffers the training
// steps left in the allocator's cache instead of adding blocks of new sizes to it.
double test_accuracy(nn::Module& model, const Tensor& images, const Tensor& labels, const amp::Recipe& recipe,
                     Device device, std::int64_t batch = 250);

// Mean cross entropy in bits per token over the non-overlapping windows of `context` tokens of a
// 1-D i32 token tensor (data::sequential_batches, 64 windows at a time).
double bits_per_char(nn::Module& model, const Tensor& tokens, std::int64_t context, const amp::Recipe& recipe,
                     Device device);

}  // namespace mg::train
