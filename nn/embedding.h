// Embedding: a table [num_embeddings, dim] of learned rows, looked up by i32 indices of any shape
// ([..., dim] out). Initialized from N(0, 1), as PyTorch's. The gradient of a row sums every
// occurrence in f32 (kernels/index.h), so a frequent token's gradient survives f16 storage.
#pragma once

#include "core/generator.h"
#include "nn/module.h"

namespace mg::nn {

class Embedding : public Module {
 public:
  Embedding(std::int64_t num_embeddings, std::int64_t dim, Generator& generator = default_generator());
  Tensor forward(const Tensor& indices) override;
  std::string type_name() const override;

  Tensor weight;  // [num_embeddings, dim]
};

}  // namespace mg::nn
