// embedding: rows of a table picked by integer indices. Backward adds each occurrence's gradient
// into its row (kernels/index.h accumulates in f32, so repeated tokens survive f16).
#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "kernels/index.h"

namespace mg {

Tensor embedding(const Tensor& weight_in, const Tensor& indices) {
  constexpr Op op = Op::Embedding;
  const Tensor weight = autocast_input(op, weight_in);
  check::same_device(op, {weight, indices});
  check::floating(op, weight);
  MG_CHECK(weight.dim() == 2, "{}: the weight must be [num_embeddings, dim], got shape {}", op, weight.shape());
  MG_CHECK(indices.dtype() == DType::I32, "{}: indices must be i32, got {}", op, indices.dtype());
  // Checked on the host before any kernel runs (from a GPU this is a copy, and a wait).
  const std::vector<std::int32_t> index = indices.to_vector<std::int32_t>();
  for (std::int64_t i = 0; i < indices.numel(); ++i)
    MG_CHECK(index[i] >= 0 && index[i] < weight.size(0),
             "{}: index {} at position {} is out of range for {} embeddings (valid: 0..{})", op, index[i], i,
             weight.size(0), weight.size(0) - 1);

  Shape shape = indices.shape();
  shape.push_back(weight.size(1));
  Tensor out = Tensor::empty(shape, check::like(weight));
  kernels::gather_rows(weight, indices, out);
  record(op, {weight, indices}, out, [weight_shape = weight.shape(), indices = Saved(indices)](
                                                  const Tensor& g, const auto&) {
    Tensor dweight = Tensor::empty(weight_shape, check::like(g));
    kernels::scatter_add_rows(g, indices, dweight);
    return Grads{dweight, Tensor()};
  });
  return out;
}

}  // namespace mg
