// scaled_dot_product_attention: softmax(scale q k^T, causal mask) v as one op on the tape.
//
// Fused (the default, on the CPU): one kernel forward and one backward (kernels/attention.h,
// FlashAttention-2's algorithm), saving q, k, v, the output and each row's log-sum-exp: no [T, T]
// tensor is made, stored or masked. Unfused (options.fused = false, and on a GPU until its kernel
// lands): the composition matmul, mul, where, softmax, dropout, matmul, each op on the tape as
// before this op existed. It is the reference the tests hold the fused op to.
//
// Autocast: the op is on the lower-precision list (its two products are GEMMs); the fused kernel
// keeps the scores, their softmax and the sums in f32 and rounds the output once, which is what the
// unfused path's cast of the scores to f32 for softmax (softmax's f32 row) was for.
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "core/factory.h"
#include "kernels/attention.h"

namespace mg {

namespace {

constexpr Op kAttentionOp = Op::ScaledDotProductAttention;

// i32 [q_len, kv_len] on `device`: 1 where query t may see key s (s <= t). Made once per size and
// device on this thread and kept: a mask is never written, and making it means a host-to-device copy.
Tensor causal_mask(std::int64_t q_len, std::int64_t kv_len, Device device) {
  static thread_local std::map<std::tuple<std::int64_t, std::int64_t, int, int>, Tensor> masks;
  const auto key = std::tuple{q_len, kv_len, static_cast<int>(device.type), device.index};
  if (auto found = masks.find(key); found != masks.end()) return found->second;
  Tensor mask = Tensor::empty({q_len, kv_len}, {.dtype = DType::I32});
  std::int32_t* m = mask.data<std::int32_t>();
  for (std::int64_t t = 0; t < q_len; ++t)
    for (std::int64_t s = 0; s < kv_len; ++s) m[t * kv_len + s] = s <= t ? 1 : 0;
  return masks.emplace(key, mask.to(device)).first->second;
}

Tensor unfused(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options, double scale,
               Generator& generator) {
  Tensor scores = mul(matmul(q, k, {.transpose_b = true}), scale);
  if (options.causal) {
    const Tensor future = full({1}, -std::numeric_limits<double>::infinity(), check::like(scores));
    scores = where(causal_mask(q.size(-2), k.size(-2), scores.device()), scores, future);
  }
  Tensor weights = softmax(scores, -1);
  if (options.dropout > 0) weights = dropout(weights, options.dropout, true, generator);
  return matmul(weights, v);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    AttentionOptions options) {
  const OpSpan span(kAttentionOp);
  for (const Tensor* t : {&q_in, &k_in, &v_in}) check::floating(kAttentionOp, *t);
  MG_CHECK(q_in.dim() >= 2 && k_in.dim() == q_in.dim() && v_in.dim() == q_in.dim(),
           "{}: needs q [..., q_len, head_dim], k [..., kv_len, head_dim] and v [..., kv_len, value_dim] with the "
           "same leading dims, got {}, {} and {}",
           kAttentionOp, q_in.shape(), k_in.shape(), v_in.shape());
  const std::int64_t rank = q_in.dim();
  const Shape lead(q_in.shape().begin(), q_in.shape().end() - 2);
  MG_CHECK(Shape(k_in.shape().begin(), k_in.shape().end() - 2) == lead &&
               Shape(v_in.shape().begin(), v_in.shape().end() - 2) == lead && k_in.size(-1) == q_in.size(-1) &&
               v_in.size(-2) == k_in.size(-2),
           "{}: q {}, k {} and v {} do not fit: k needs q's leading dims and head_dim, v k's leading dims and kv_len "
           "(no broadcasting)",
           kAttentionOp, q_in.shape(), k_in.shape(), v_in.shape());
  MG_CHECK(k_in.size(-2) >= 1 && q_in.size(-1) >= 1 && v_in.size(-1) >= 1,
           "{}: needs at least one key and head_dim, value_dim >= 1 (a softmax over no keys is undefined), got k {} "
           "and v {}",
           kAttentionOp, k_in.shape(), v_in.shape());
  MG_CHECK(options.dropout >= 0 && options.dropout < 1, "{}: dropout must be in [0, 1), got {}", kAttentionOp,
           options.dropout);
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(q_in.size(-1))));
  MG_CHECK(std::isfinite(scale), "{}: the scale must be finite, got {}", kAttentionOp, scale);
  auto [q, k, v] = autocast_inputs(kAttentionOp, q_in, k_in, v_in);
  check::same_device(kAttentionOp, {q, k, v});
  check::same_dtype(kAttentionOp, q, k);
  check::same_dtype(kAttentionOp, q, v);
  Generator& generator = options.generator ? *options.generator : default_generator();
  if (!options.fused || !q.device().is_cpu()) return unfused(q, k, v, options, scale, generator);

  kernels::AttentionShape shape{.batch = numel(lead),
                                .q_len = q.size(-2),
                                .kv_len = k.size(-2),
                                .head_dim = q.size(-1),
                                .value_dim = v.size(-1),
                                .scale = scale,
                                .causal = options.causal,
                                .dropout = options.dropout};
  if (options.dropout > 0) {  // the words mg::dropout would draw for the [..., q_len, kv_len] weights
    shape.seed = generator.seed();
    shape.first_block = generator.reserve(static_cast<std::uint64_t>(shape.batch * shape.q_len * shape.kv_len));
  }
  Shape out_shape = q.shape();
  out_shape[rank - 1] = shape.value_dim;
  Tensor out = Tensor::empty(out_shape, check::like(q));
  Tensor lse = Tensor::empty({shape.batch, shape.q_len}, {.dtype = q.dtype() == DType::F64 ? DType::F64 : DType::F32});
  kernels::attention_forward(q, k, v, shape, out, lse);
  record(kAttentionOp, {q, k, v}, out,
         [q = Saved(q), k = Saved(k), v = Saved(v), out = Saved(out), lse = Saved(lse), shape](const Tensor& g,
                                                                                               const auto&) {
           Tensor dq = Tensor::empty(q.get().shape(), check::like(q.get()));
           Tensor dk = Tensor::empty(k.get().shape(), check::like(q.get()));
           Tensor dv = Tensor::empty(v.get().shape(), check::like(q.get()));
           kernels::attention_backward(q, k, v, out, g, lse, shape, dq, dk, dv);
           return Grads{dq, dk, dv};
         });
  return out;
}

}  // namespace mg
