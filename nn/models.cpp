#include "nn/models.h"

#include "autograd/ops.h"
#include "core/factory.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/norm.h"

namespace mg::nn {

std::shared_ptr<Sequential> mlp(const std::vector<std::int64_t>& sizes, Generator& generator) {
  MG_CHECK(sizes.size() >= 2, "nn::mlp: needs at least an input and an output size, got {} sizes", sizes.size());
  auto model = std::make_shared<Sequential>();
  model->push_back(std::make_shared<Flatten>());
  for (std::size_t i = 0; i + 1 < sizes.size(); ++i) {
    model->push_back(std::make_shared<Linear>(sizes[i], sizes[i + 1], true, generator));
    if (i + 2 < sizes.size()) model->push_back(std::make_shared<ReLU>());
  }
  return model;
}

std::shared_ptr<Sequential> cnn(CnnOptions o, Generator& generator) {
  MG_CHECK(o.image_size % 4 == 0 && o.image_size > 0,
           "nn::cnn: the image size must be a multiple of 4 (two 2x2 "
           "poolings), got {}",
           o.image_size);
  const std::int64_t pooled = o.image_size / 4;
  auto model = std::make_shared<Sequential>();
  model->push_back(
      std::make_shared<Conv2d>(o.in_channels, o.channels1, 3, Conv2dOptions{.padding = 1}, true, generator));
  model->push_back(std::make_shared<ReLU>());
  model->push_back(std::make_shared<MaxPool2d>(Pool2dOptions{.kernel = 2}));
  model->push_back(std::make_shared<Conv2d>(o.channels1, o.channels2, 3, Conv2dOptions{.padding = 1}, true, generator));
  model->push_back(std::make_shared<ReLU>());
  model->push_back(std::make_shared<MaxPool2d>(Pool2dOptions{.kernel = 2}));
  model->push_back(std::make_shared<Flatten>());
  model->push_back(std::make_shared<Linear>(o.channels2 * pooled * pooled, o.hidden, true, generator));
  model->push_back(std::make_shared<ReLU>());
  model->push_back(std::make_shared<Linear>(o.hidden, o.classes, true, generator));
  return model;
}

CharLSTM::CharLSTM(std::int64_t vocab, std::int64_t embed_dim, std::int64_t hidden, std::int64_t layers,
                   Generator& generator) {
  embedding = register_module("embedding", std::make_shared<Embedding>(vocab, embed_dim, generator));
  lstm = register_module("lstm", std::make_shared<LSTM>(embed_dim, hidden, layers, generator));
  head = register_module("head", std::make_shared<Linear>(hidden, vocab, true, generator));
}

Tensor CharLSTM::forward(const Tensor& tokens) { return (*head)((*lstm)((*embedding)(tokens))); }

TinyGPT::TinyGPT(GptOptions o, Generator& generator) : options_(o) {
  MG_CHECK(o.vocab > 0 && o.block_size > 0 && o.layers > 0,
           "nn::TinyGPT: needs vocab, block_size and layers > 0, "
           "got {}, {}, {}",
           o.vocab, o.block_size, o.layers);
  token_embedding = register_module("token_embedding", std::make_shared<Embedding>(o.vocab, o.embed_dim, generator));
  position_embedding = register_module("position_embedding",
                                       std::make_shared<Embedding>(o.block_size, o.embed_dim, generator));
  blocks = register_module("blocks", std::make_shared<Sequential>());
  for (std::int64_t l = 0; l < o.layers; ++l)
    blocks->push_back(std::make_shared<TransformerBlock>(o.embed_dim, o.heads, o.dropout, generator));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(o.embed_dim));
  head = register_module("head", std::make_shared<Linear>(o.embed_dim, o.vocab, true, generator));
  for (auto& [name, p] : named_parameters()) {
    if (p.dim() == 2)
      init::normal_(p, 0.0, 0.02, generator);
    else if (name.ends_with("bias"))
      init::constant_(p, 0.0);  // LayerNorm biases are zero already
  }
}

Tensor TinyGPT::forward(const Tensor& tokens) {
  MG_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.size(1) <= options_.block_size,
           "nn::TinyGPT: expects tokens [batch, steps] with steps <= block_size {}, got {}", options_.block_size,
           tokens.defined() ? tokens.shape() : Shape{});
  Tensor positions = arange(static_cast<double>(tokens.size(1)), {.dtype = DType::I32, .device = tokens.device()});
  Tensor x = add((*token_embedding)(tokens), (*position_embedding)(positions));  // [B, T, C] + [T, C]
  return (*head)((*ln_f)((*blocks)(x)));
}

std::string TinyGPT::type_name() const {
  return fmt::format("TinyGPT(vocab={}, block={}, embed={}, heads={}, layers={})", options_.vocab, options_.block_size,
                     options_.embed_dim, options_.heads, options_.layers);
}

}  // namespace mg::nn
