// Causal self-attention and the transformer block a tiny GPT is built from (Vaswani et al. 2017;
// the pre-norm layout of GPT-2).
//
// CausalSelfAttention, for x [B, T, C] with `heads` heads of size D = C / heads:
//   q, k, v = split(x W_qkv^T + b_qkv)                      each [B * heads, T, D]
//   scores  = q k^T / sqrt(D), future positions set to -inf   [B * heads, T, T]
//   y       = softmax(scores) v, heads joined, then W_proj    [B, T, C]
// The middle two lines are one op, mg::scaled_dot_product_attention (autograd/ops.h): on the CPU a
// fused kernel that never makes the [T, T] scores (`fused = false` runs the unfused ops, matmul,
// mul, where, softmax, dropout, matmul, for comparison). Under autocast its GEMMs run in f16/bf16
// and the softmax in f32.
//
// TransformerBlock: x + attention(layer_norm(x)), then x + mlp(layer_norm(x)) with the MLP
// C -> 4C -> GELU -> C. The residual stream stays f32 under autocast (f32 + f16 promotes to f32).
#pragma once

#include <memory>

#include "core/generator.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/norm.h"

namespace mg::nn {

class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(std::int64_t embed_dim, std::int64_t heads, double dropout = 0.0,
                      Generator& generator = default_generator());
  Tensor forward(const Tensor& x) override;  // [B, T, C] -> [B, T, C]
  std::string type_name() const override;

  std::shared_ptr<Linear> qkv, proj;
  bool fused = true;  // false: the attention as separate ops (AttentionOptions::fused)

 private:
  std::int64_t heads_;
  std::shared_ptr<Dropout> dropout_;
};

class TransformerBlock : public Module {
 public:
  TransformerBlock(std::int64_t embed_dim, std::int64_t heads, double dropout = 0.0,
                   Generator& generator = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "TransformerBlock"; }

  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<CausalSelfAttention> attention;
  std::shared_ptr<Linear> fc, fc_proj;
  std::shared_ptr<Dropout> dropout;
};

}  // namespace mg::nn
