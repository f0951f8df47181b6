#include "nn/attention.h"

#include <cmath>
#include <limits>

#include "autograd/ops.h"
#include "core/factory.h"

namespace mg::nn {

namespace {

// i32 [T, T] on `device`: 1 where query t may attend to key s (s <= t), 0 for the future.
Tensor causal_mask(std::int64_t steps, Device device) {
  Tensor mask = Tensor::empty({steps, steps}, {.dtype = DType::I32});
  std::int32_t* m = mask.data<std::int32_t>();
  for (std::int64_t t = 0; t < steps; ++t)
    for (std::int64_t s = 0; s < steps; ++s) m[t * steps + s] = s <= t ? 1 : 0;
  return mask.to(device);
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(std::int64_t embed_dim, std::int64_t heads, double dropout_p,
                                         Generator& generator)
    : heads_(heads) {
  MG_CHECK(embed_dim > 0 && heads > 0 && embed_dim % heads == 0,
           "nn::CausalSelfAttention: the embedding size {} must be a positive multiple of the {} heads", embed_dim,
           heads);
  qkv = register_module("qkv", std::make_shared<Linear>(embed_dim, 3 * embed_dim, true, generator));
  proj = register_module("proj", std::make_shared<Linear>(embed_dim, embed_dim, true, generator));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(dropout_p, generator));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  const std::int64_t C = qkv->weight.size(1);
  MG_CHECK(x.defined() && x.dim() == 3 && x.size(2) == C, "{}: expects [batch, steps, {}], got {}", type_name(), C,
           x.defined() ? x.shape() : Shape{});
  const std::int64_t B = x.size(0), T = x.size(1), D = C / heads_;
  // [B, T, 3C] -> [B, T, 3, heads, D] -> [3, B, heads, T, D]: q, k and v are then views along dim 0.
  Tensor packed = permute(reshape((*qkv)(x), {B, T, 3, heads_, D}), {2, 0, 3, 1, 4});
  auto part = [&](std::int64_t i) { return reshape(slice(packed, 0, i, i + 1), {B * heads_, T, D}); };
  Tensor q = part(0), k = part(1), v = part(2);

  Tensor scores = mul(matmul(q, k, {.transpose_b = true}), 1.0 / std::sqrt(static_cast<double>(D)));  // [BH, T, T]
  Tensor future = full({1}, -std::numeric_limits<double>::infinity(),
                       {.dtype = scores.dtype(), .device = scores.device()});
  Tensor weights = (*dropout_)(softmax(where(causal_mask(T, scores.device()), scores, future), -1));
  Tensor heads = matmul(weights, v);  // [BH, T, D]
  Tensor joined = reshape(permute(reshape(heads, {B, heads_, T, D}), {0, 2, 1, 3}), {B, T, C});
  return (*proj)(joined);
}

std::string CausalSelfAttention::type_name() const {
  return fmt::format("CausalSelfAttention({}, heads={})", qkv->weight.size(1), heads_);
}

TransformerBlock::TransformerBlock(std::int64_t embed_dim, std::int64_t heads, double dropout_p, Generator& generator) {
  ln1 = register_module("ln1", std::make_shared<LayerNorm>(embed_dim));
  attention = register_module("attention",
                              std::make_shared<CausalSelfAttention>(embed_dim, heads, dropout_p, generator));
  ln2 = register_module("ln2", std::make_shared<LayerNorm>(embed_dim));
  fc = register_module("fc", std::make_shared<Linear>(embed_dim, 4 * embed_dim, true, generator));
  fc_proj = register_module("fc_proj", std::make_shared<Linear>(4 * embed_dim, embed_dim, true, generator));
  dropout = register_module("dropout", std::make_shared<Dropout>(dropout_p, generator));
}

Tensor TransformerBlock::forward(const Tensor& x) {
  Tensor h = add(x, (*attention)((*ln1)(x)));
  return add(h, (*dropout)((*fc_proj)(gelu((*fc)((*ln2)(h))))));
}

}  // namespace mg::nn
