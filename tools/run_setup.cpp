#include "tools/run_setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "data/idx.h"
#include "nn/models.h"
#include "train/evaluation.h"

namespace mg::tools {

const std::vector<ModelKind>& model_kinds() {
  static const std::vector<ModelKind> kinds{
      {.name = "mlp",
       .title = "MLP",
       .data = ModelData::Images,
       .shape = "784-256-256-10",
       .make = [](std::int64_t, std::int64_t, Generator& g) { return mlp_784_256_256_10(g); }},
      {.name = "cnn",
       .title = "CNN",
       .data = ModelData::Images,
       .shape = "two 3x3 convolutions",
       .make = [](std::int64_t, std::int64_t, Generator& g) { return cnn_of({})(g); }},
      {.name = "lstm",
       .title = "char LSTM",
       .data = ModelData::Text,
       .shape = "char LSTM, 64-wide embedding, 256 hidden",
       .make = [](std::int64_t vocab, std::int64_t, Generator& g) { return char_lstm(vocab, 64, 256)(g); }},
      {.name = "gpt",
       .title = "tiny GPT",
       .data = ModelData::Text,
       .shape = "a tiny GPT, 4 layers of 4 heads, 128 wide",
       .make = [](std::int64_t vocab, std::int64_t context, Generator& g) {
         return tiny_gpt({.vocab = vocab, .block_size = context, .embed_dim = 128, .heads = 4, .layers = 4})(g);
       }}};
  return kinds;
}

const ModelKind& model_kind(std::string_view name_or_title) {
  for (const ModelKind& kind : model_kinds())
    if (kind.name == name_or_title || kind.title == name_or_title) return kind;
  throw Error(fmt::format("unknown model '{}'; choose one of {}", name_or_title, fmt::join(model_names(), ", ")));
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelKind& kind : model_kinds()) names.push_back(kind.name);
  return names;
}

std::string models_help() {
  std::string help;
  for (ModelData data : {ModelData::Images, ModelData::Text}) {
    std::vector<std::string> kinds;
    for (const ModelKind& kind : model_kinds())
      if (kind.data == data) kinds.push_back(fmt::format("{} ({})", kind.name, kind.shape));
    help += fmt::format("{}{} for {}", help.empty() ? "" : "; ", fmt::join(kinds, " or "),
                        data == ModelData::Images ? "fashion-mnist" : "text");
  }
  return help;
}

std::shared_ptr<nn::Module> mlp_784_256_256_10(Generator& generator) { return nn::mlp({784, 256, 256, 10}, generator); }

ModelFactory autoencoder(std::vector<std::int64_t> sizes) {
  MG_CHECK(sizes.size() >= 2 && sizes.front() == sizes.back(),
           "tools::autoencoder: needs at least two sizes, the first (the input's pixels) equal to the last (its "
           "reconstruction), got {}",
           fmt::join(sizes, "-"));
  return [sizes](Generator& generator) -> std::shared_ptr<nn::Module> { return nn::mlp(sizes, generator); };
}

ModelFactory cnn_of(nn::CnnOptions options) {
  return [options](Generator& generator) -> std::shared_ptr<nn::Module> { return nn::cnn(options, generator); };
}

ModelFactory char_lstm(std::int64_t vocab, std::int64_t embed_dim, std::int64_t hidden) {
  return [=](Generator& generator) -> std::shared_ptr<nn::Module> {
    return std::make_shared<nn::CharLSTM>(vocab, embed_dim, hidden, 1, generator);
  };
}

ModelFactory tiny_gpt(nn::GptOptions options) {
  return [options](Generator& generator) -> std::shared_ptr<nn::Module> {
    return std::make_shared<nn::TinyGPT>(options, generator);
  };
}

std::shared_ptr<const ImageData> load_fashion_mnist_subset(std::int64_t train_examples, std::int64_t test_examples) {
  MG_CHECK(train_examples >= 0 && test_examples >= 0,
           "tools::load_fashion_mnist_subset: the numbers of training and test images must be >= 0 (0: all), got {} "
           "and {}",
           train_examples, test_examples);
  const std::string dir = data::default_fashion_mnist_dir();
  data::LabeledImages train = data::load_fashion_mnist(dir, data::Split::Train, train_examples);
  data::LabeledImages test = data::load_fashion_mnist(dir, data::Split::Test, test_examples);
  train::standardize_pixels_(train.images);
  train::standardize_pixels_(test.images);
  return std::make_shared<const ImageData>(ImageData{.train_images = train.images,
                                                     .train_labels = train.labels,
                                                     .test_images = test.images,
                                                     .test_labels = test.labels});
}

std::shared_ptr<const TextData> text_subset(const data::TextCorpus& corpus, std::int64_t train_chars,
                                            std::int64_t validation_chars) {
  MG_CHECK(train_chars >= 2 && validation_chars >= 2,
           "tools::text_subset: needs at least 2 training and 2 validation characters, got {} and {}", train_chars,
           validation_chars);
  // A part of a split is copied, so that the rest can be freed; a whole split is shared, not copied.
  auto first = [](const Tensor& split, std::int64_t n) {
    return n >= split.numel() ? split : split.slice(0, n).clone();
  };
  return std::make_shared<const TextData>(TextData{.train = first(corpus.train(), train_chars),
                                                   .validation = first(corpus.validation(), validation_chars),
                                                   .vocab = corpus.vocab_size()});
}

}  // namespace mg::tools
