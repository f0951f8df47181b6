// Embedding: a table [num_embeddings, dim] of learned rows, looked up by i32 indices of any shape
// ([..., dim] out). Initialized from N(0, 1), as PyTorch's. The gradient of a row sums every
// occurrence in f32 (kernels/index.h), so a frequent token's gradient survives f16 storage.
#pragma once

#include <cstdint>
#include <optional>

#include "core/generator.h"
#include "nn/module.h"

namespace mg::nn {

struct EmbeddingOptions {
  // As PyTorch's: the row of this index (negative: from the end) starts at zero and never gets a
  // gradient, so it stays zero under any optimizer without weight decay: a padding token's vector.
  std::optional<std::int64_t> padding_idx;
};

class Embedding : public Module {
 public:
  Embedding(std::int64_t num_embeddings, std::int64_t dim, Generator& generator = default_generator());
  Embedding(std::int64_t num_embeddings, std::int64_t dim, EmbeddingOptions options,
            Generator& generator = default_generator());
  Tensor forward(const Tensor& indices) override;
  std::string type_name() const override;

  Tensor weight;  // [num_embeddings, dim]

 private:
  std::optional<std::int64_t> padding_idx_;  // normalized to 0..num_embeddings-1
};

}  // namespace mg::nn
