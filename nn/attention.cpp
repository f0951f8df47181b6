#include "nn/attention.h"

#include "autograd/ops.h"
#include "core/factory.h"

namespace mg::nn {

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

  // softmax(q k^T / sqrt(D), the future masked) v: one fused op on the CPU, no [T, T] tensor.
  Tensor heads = scaled_dot_product_attention(q, k, v,
                                              {.causal = true,
                                               .dropout = dropout_->active_p(),
                                               .fused = fused,
                                               .generator = &dropout_->generator()});  // [BH, T, D]
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
