// embedding: rows of a table picked by integer indices. Backward adds each occurrence's gradient
// into its row (kernels/index.h accumulates in f32, so repeated tokens survive f16), then sets the
// padding row's gradient, if there is one, back to 0.
#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "core/factory.h"
#include "kernels/copy.h"
#include "kernels/index.h"

namespace mg {

Tensor embedding(const Tensor& weight_in, const Tensor& indices_in, std::optional<std::int64_t> padding_idx) {
  constexpr Op op = Op::Embedding;
  const OpSpan span(op);
  const Tensor weight = autocast_input(op, weight_in);
  check::same_device(op, {weight, indices_in});
  check::floating(op, weight);
  MG_CHECK(weight.dim() == 2, "{}: the weight must be [num_embeddings, dim], got shape {}", op, weight.shape());
  const Tensor indices = check::indices_as_i32(op, indices_in, "indices");  // i32, or PyTorch's i64
  const std::int64_t rows = weight.size(0);
  MG_CHECK(!padding_idx || (*padding_idx >= -rows && *padding_idx < rows),
           "{}: padding_idx {} is out of range for {} embeddings (valid: {}..{}, negative counting from the end)", op,
           padding_idx.value_or(0), rows, -rows, rows - 1);
  // -1: none
  const std::int64_t padding_row = !padding_idx ? -1 : *padding_idx < 0 ? *padding_idx + rows : *padding_idx;
  // Checked on the host before any kernel runs: no wait for ids uploaded from the host
  // (check::index_values), a read from the device otherwise.
  const std::vector<std::int32_t> index = check::index_values(indices);
  for (std::int64_t i = 0; i < indices.numel(); ++i)
    MG_CHECK(index[i] >= 0 && index[i] < rows,
             "{}: index {} at position {} is out of range for {} embeddings "
             "(valid: 0..{})",
             op, index[i], i, rows, rows - 1);

  Shape shape = indices.shape();
  shape.push_back(weight.size(1));
  Tensor out = Tensor::empty(shape, check::like(weight));
  kernels::gather_rows(weight, indices, out);
  record(op, {weight, indices}, out,
         [weight_shape = weight.shape(), indices = Saved(indices), padding_row](const Tensor& g, const auto&) {
           Tensor dweight = Tensor::empty(weight_shape, check::like(g));
           kernels::scatter_add_rows(g, indices, dweight);
           if (padding_row >= 0) {
             kernels::copy_along_dim(zeros({1, weight_shape[1]}, check::like(g)), 0, dweight, padding_row, 0, 1);
           }
           return Grads{dweight, Tensor()};
         });
  return out;
}

}  // namespace mg
