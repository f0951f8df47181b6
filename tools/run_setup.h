// What both commands set up for a run: the models by name and the data. `mixgrad train` builds one
// model of kModels' shapes from its --model; `mixgrad repro`'s experiments (tools/repro/) build the
// same kinds at the sizes each experiment states, and name their tables and files by the same rows.
//
//   const tools::ModelKind& kind = tools::model_kind("cnn");          // an mg::Error lists the names
//   std::shared_ptr<nn::Module> model = kind.make(vocab, context, generator);
//   auto images = tools::load_fashion_mnist_subset(1000, 0);          // 1000 training, every test image
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/generator.h"
#include "core/tensor.h"
#include "data/text.h"
#include "nn/models.h"
#include "nn/module.h"

namespace mg::tools {

// ---- Models

// Builds the model in f32 on the CPU from `generator` (a run converts it afterwards).
using ModelFactory = std::function<std::shared_ptr<nn::Module>(Generator& generator)>;

enum class ModelData { Images, Text };

// One row a model kind.
struct ModelKind {
  std::string name;  // "mlp": mixgrad train's --model, and a repro output's file tag (e3_weights_mlp.png)
  std::string title;  // "MLP": a table's heading
  ModelData data;  // Fashion-MNIST images, or a character corpus
  std::string shape;  // what mixgrad train builds, for --help
  // mixgrad train's model: vocab and context are a text model's (ignored for images).
  std::function<std::shared_ptr<nn::Module>(std::int64_t vocab, std::int64_t context, Generator& generator)> make;
};
const std::vector<ModelKind>& model_kinds();  // mlp, cnn, lstm, gpt
// The row whose name or title this is; an mg::Error listing the names for any other string.
const ModelKind& model_kind(std::string_view name_or_title);
std::vector<std::string> model_names();
// "mlp (784-256-256-10, ReLU) or cnn (...) for fashion-mnist; lstm (...) or gpt (...) for text"
std::string models_help();

// The kinds at a given size, built from the generator so that every variant of a run starts alike.
std::shared_ptr<nn::Module> mlp_784_256_256_10(Generator& generator);  // the paper-table MLP, ReLU
// An autoencoder for reconstruct runs: nn::mlp(sizes) (Flatten, Linear + ReLU, ..., Linear), whose
// last size is the image's pixel count: {784, 256, 32, 256, 784} is 784-256-32-256-784. Its outputs
// are logits, one per pixel.
ModelFactory autoencoder(std::vector<std::int64_t> sizes);
ModelFactory cnn_of(nn::CnnOptions options);  // nn::cnn
ModelFactory char_lstm(std::int64_t vocab, std::int64_t embed_dim, std::int64_t hidden);  // one layer
ModelFactory tiny_gpt(nn::GptOptions options);  // nn::TinyGPT

// ---- Data

// Fashion-MNIST, standardized with the training set's pixel mean and deviation, kept on the CPU.
struct ImageData {
  Tensor train_images{}, train_labels{};  // [N, 1, 28, 28] f32, [N] i32
  Tensor test_images{}, test_labels{};  // the first M test images: the accuracy every run reports
};

// The first train_examples training and test_examples test images (0: all of a split). Throws
// mg::Error (from data/idx.h) when the data set is missing, with the package to install.
std::shared_ptr<const ImageData> load_fashion_mnist_subset(std::int64_t train_examples, std::int64_t test_examples);

// A character corpus for the language-model runs: 1-D i32 token tensors on the CPU.
struct TextData {
  Tensor train{}, validation{};
  std::int64_t vocab = 0;  // token ids are 0 .. vocab-1
};

// The first train_chars of the corpus's training split and the first validation_chars of its
// validation split (all of a split when it is shorter).
std::shared_ptr<const TextData> text_subset(const data::TextCorpus& corpus, std::int64_t train_chars,
                                            std::int64_t validation_chars);

}  // namespace mg::tools
