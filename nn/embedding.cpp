#include "nn/embedding.h"

#include "autograd/ops.h"
#include "core/factory.h"
#include "nn/init.h"

namespace mg::nn {

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t dim, Generator& generator)
    : Embedding(num_embeddings, dim, {}, generator) {}

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t dim, EmbeddingOptions options, Generator& generator) {
  MG_CHECK(num_embeddings > 0 && dim > 0, "nn::Embedding: needs positive sizes, got {} x {}", num_embeddings, dim);
  if (const auto index = options.padding_idx) {
    MG_CHECK(*index >= -num_embeddings && *index < num_embeddings,
             "nn::Embedding: padding_idx {} is out of range for {} embeddings (valid: {}..{}, negative counting from "
             "the end)",
             *index, num_embeddings, -num_embeddings, num_embeddings - 1);
    padding_idx_ = *index < 0 ? *index + num_embeddings : *index;
  }
  Tensor table = randn({num_embeddings, dim}, generator);
  if (padding_idx_) init::constant_(table.slice(*padding_idx_, *padding_idx_ + 1), 0.0);  // a view: PyTorch's init
  weight = register_parameter("weight", table);
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight, indices, padding_idx_); }

std::string Embedding::type_name() const {
  if (padding_idx_)
    return fmt::format("Embedding({}, {}, padding_idx={})", weight.size(0), weight.size(1), *padding_idx_);
  return fmt::format("Embedding({}, {})", weight.size(0), weight.size(1));
}

}  // namespace mg::nn
