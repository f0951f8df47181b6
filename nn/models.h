// The models the `mixgrad` program trains, built from nn/ layers; a reader's starting point for
// their own. Classifiers take images [N, 1, 28, 28] and return logits [N, classes]; language models
// take i32 tokens [B, T] and return next-token logits [B, T, vocab].
#pragma once

#include <memory>
#include <vector>

#include "core/generator.h"
#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/lstm.h"
#include "nn/module.h"

namespace mg::nn {

// Flatten, then Linear + ReLU for each hidden size, then Linear to `classes`:
// mlp({784, 256, 256, 10}) is the 784-256-256-10 MLP.
std::shared_ptr<Sequential> mlp(const std::vector<std::int64_t>& sizes, Generator& generator = default_generator());

// Two 3x3 convolutions (padding 1) with ReLU and 2x2 max pooling, then a hidden Linear layer:
// [N, C, S, S] -> conv(channels1) -> pool -> conv(channels2) -> pool -> Linear(hidden) -> Linear(classes).
struct CnnOptions {
  std::int64_t in_channels = 1, image_size = 28, channels1 = 32, channels2 = 64, hidden = 128, classes = 10;
};
std::shared_ptr<Sequential> cnn(CnnOptions options = {}, Generator& generator = default_generator());

// Embedding -> LSTM -> Linear: a character-level language model.
class CharLSTM : public Module {
 public:
  CharLSTM(std::int64_t vocab, std::int64_t embed_dim, std::int64_t hidden, std::int64_t layers,
           Generator& generator = default_generator());
  Tensor forward(const Tensor& tokens) override;
  std::string type_name() const override { return "CharLSTM"; }

  std::shared_ptr<Embedding> embedding;
  std::shared_ptr<LSTM> lstm;
  std::shared_ptr<Linear> head;
};

// A GPT (Radford et al. 2019) in miniature: token + position embeddings, pre-norm transformer blocks,
// a final LayerNorm and a linear head. Weights from N(0, 0.02) and zero biases, as GPT-2's.
struct GptOptions {
  std::int64_t vocab = 0, block_size = 128, embed_dim = 128, heads = 4, layers = 4;
  double dropout = 0.0;
};
class TinyGPT : public Module {
 public:
  explicit TinyGPT(GptOptions options, Generator& generator = default_generator());
  Tensor forward(const Tensor& tokens) override;  // [B, T] with T <= block_size
  std::string type_name() const override;

  std::shared_ptr<Embedding> token_embedding, position_embedding;
  std::shared_ptr<Sequential> blocks;
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Linear> head;

 private:
  GptOptions options_;
};

}  // namespace mg::nn
