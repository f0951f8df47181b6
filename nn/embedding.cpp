#include "nn/embedding.h"

#include "autograd/ops.h"
#include "core/factory.h"

namespace mg::nn {

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t dim, Generator& generator) {
  MG_CHECK(num_embeddings > 0 && dim > 0, "nn::Embedding: needs positive sizes, got {} x {}", num_embeddings, dim);
  weight = register_parameter("weight", randn({num_embeddings, dim}, generator));
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight, indices); }

std::string Embedding::type_name() const { return fmt::format("Embedding({}, {})", weight.size(0), weight.size(1)); }

}  // namespace mg::nn
