// CPU fused attention (kernels/attention.h): FlashAttention-2's loops, a few query rows at a time;
// the loops over registers they call are in kernels/cpu/attention_rows.h.
//
// A head's keys and values are widened to the compute type C once, into buffers laid out for the
// loops that read them: K transposed ([head_dim][kv_len]) so that a row's scores for a block of
// keys are head_dim multiply-adds of contiguous vectors (q_d times row d of K^T, no horizontal
// sums); V as it is ([kv_len][value_dim]) so that P v adds rows of V, each scaled by one weight.
// The backward wants both layouts of each. A head is ~4 * 8 KiB at the tiny GPT's 64 x 32: it stays
// in L1 while every query row of the head runs. Heads are independent: the thread pool takes
// chunks of them, and the backward's dK and dV sums never cross a chunk.
//
// The scores of one row are made a block of kBlock keys at a time, the online softmax carrying the
// running max m and sum l across blocks (so the scratch is a block, whatever kv_len is); with the
// causal mask a row's blocks end at its own position: the keys it cannot see are never computed.
// Query rows are taken kRows at a time, so that each row of K^T (or V^T) loaded feeds kRows rows'
// scores. The backward keeps the weights and dS of a block of kQueryBlock query rows ([row][key], 0
// where a row sees no key) and then adds that block's share of dV = P^T dO and dK = dS^T Q a few keys
// at a time, each key's sums in registers down the rows the mask lets see it (added row by row, every
// (query, key) pair loaded and stored a row of dK and one of dV; the tiny GPT's attention backward
// took 13.9 ms a step then, 10.7 now).
// Run its tests: build/tests/test_ops_attention.
#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/philox.h"
#include "kernels/attention.h"
#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/compute_type.h"

namespace mg::kernels::cpu {

// The helpers sit in attention_rows, beside the header's (kBlock, dots, ...), so that a name they use is
// found there before any file-local name of mg::kernels::cpu: in a unity build (scripts/test) several
// files share a translation unit, and their unnamed namespaces of mg::kernels::cpu are one namespace.
namespace attention_rows {
namespace {
constexpr std::int64_t kQueryBlock = 64;  // query rows whose weights and dS the backward keeps for dK and dV

std::int64_t round_up(std::int64_t n, std::int64_t to) { return (n + to - 1) / to * to; }

// One head's [rows, cols] slice of t widened to C, in one conversion: `widened` holds it contiguous.
template <class C>
void widen(const Tensor& t, std::int64_t head, std::int64_t rows, std::int64_t cols, std::vector<C>& widened) {
  widened.resize(static_cast<std::size_t>(rows * cols));
  convert(bytes_at(t, head * rows * cols), t.dtype(), widened.data(), dtype_of<C>(), rows * cols);
}
// The widened slice laid out for the loops below: each row padded with zeros to `stride` columns, or
// transposed ([cols][stride], the rows padded instead). The padding lets every loop run whole blocks
// of fixed width, which the compiler keeps in vector registers.
template <class C>
void pad_rows(const std::vector<C>& widened, std::int64_t rows, std::int64_t cols, std::int64_t stride,
              std::vector<C>& out) {
  out.assign(static_cast<std::size_t>(rows * stride), C(0));
  for (std::int64_t r = 0; r < rows; ++r) std::copy_n(widened.data() + r * cols, cols, out.data() + r * stride);
}
template <class C>
void transpose(const std::vector<C>& widened, std::int64_t rows, std::int64_t cols, std::int64_t stride,
               std::vector<C>& out) {
  out.assign(static_cast<std::size_t>(cols * stride), C(0));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) out[c * stride + r] = widened[r * cols + c];
}

// The keys query t sees, [0, end): all of them, or up to t itself under the causal mask.
std::int64_t keys_seen(const AttentionShape& s, std::int64_t t) {
  return s.causal ? std::min(t + 1, s.kv_len) : s.kv_len;
}

// What weight (b, t, s) is multiplied by after the softmax: 0 when dropped, 1 / (1 - p) when kept
// (the mask mg::dropout draws for the [batch, q_len, kv_len] weights).
template <class C>
void dropout_factors(const AttentionShape& s, std::int64_t b, std::int64_t t, std::int64_t s0, std::int64_t n,
                     C* factor) {
  const C kept = C(1) / (C(1) - static_cast<C>(s.dropout));
  const auto first = static_cast<std::uint64_t>((b * s.q_len + t) * s.kv_len + s0);
  for (std::int64_t j = 0; j < n; ++j) {
    const float u = philox::unit_float(
        philox::random_word(s.seed, s.first_block, first + static_cast<std::uint64_t>(j)));
    factor[j] = static_cast<double>(u) >= s.dropout ? kept : C(0);
  }
}

template <class C>
void forward_heads(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& s, Tensor& out, Tensor& lse,
                   std::int64_t begin, std::int64_t end) {
  const std::int64_t D = s.head_dim, Dv = s.value_dim, kv_stride = round_up(s.kv_len, kBlock),
                     v_stride = round_up(Dv, kChunk);
  std::vector<C> kt, values, queries, scratch, factor(kBlock), o(static_cast<std::size_t>(kRows<C> * v_stride));
  alignas(64) C p[kBlock];
  std::vector<C> out_rows(static_cast<std::size_t>(s.q_len * Dv));
  C* lse_out = lse.data<C>();
  for (std::int64_t b = begin; b < end; ++b) {
    widen(k, b, s.kv_len, D, scratch);
    transpose(scratch, s.kv_len, D, kv_stride, kt);  // K^T [D][kv_stride]
    widen(v, b, s.kv_len, Dv, scratch);
    pad_rows(scratch, s.kv_len, Dv, v_stride, values);  // V [kv_len][v_stride]
    widen(q, b, s.q_len, D, queries);  // read as it is
    for (std::int64_t t = 0; t < s.q_len; t += kRows<C>) {  // a group of rows: their scores made together
      const std::int64_t group = std::min<std::int64_t>(kRows<C>, s.q_len - t);
      const auto rows = group_rows(queries.data(), D, t, s.q_len - 1);
      C m[kRows<C>], l[kRows<C>];
      std::fill_n(m, kRows<C>, -std::numeric_limits<C>::infinity());
      std::fill_n(l, kRows<C>, C(0));
      std::fill(o.begin(), o.end(), C(0));
      const std::int64_t group_seen = keys_seen(s, t + group - 1);  // the last row sees the most
      for (std::int64_t s0 = 0; s0 < group_seen; s0 += kBlock) {
        Row<C> scores[kRows<C>];
        block_dots(rows.data(), kt, D, kv_stride, s0, std::min(kBlock, group_seen - s0), scores);
        for (std::int64_t r = 0; r < group; ++r) {
          const std::int64_t n = std::min(kBlock, keys_seen(s, t + r) - s0);
          if (n <= 0) continue;  // a causal row that sees none of this block
          C* o_r = o.data() + r * v_stride;
          scale_and_mask(scores[r], static_cast<C>(s.scale), C(0), n);
          const C new_max = std::max(m[r], row_max(scores[r]));
          // The online softmax: what was summed against the old max is rescaled to the new one.
          const C rescale = m[r] == new_max ? C(1) : std::exp(m[r] - new_max);
          l[r] *= rescale;
          for (std::int64_t d = 0; d < v_stride; ++d) o_r[d] *= rescale;
          m[r] = new_max;
          scale_and_mask(scores[r], C(1), m[r], n);
          exp_lanes(scores[r]);  // 0 past n
          l[r] += row_sum(scores[r]);
          store_row(scores[r], p);
          if (s.dropout > 0) {
            dropout_factors(s, b, t + r, s0, n, factor.data());
            for (std::int64_t j = 0; j < n; ++j) p[j] *= factor[j];
          }
          add_weighted_rows(p, values.data() + s0 * v_stride, n, v_stride, o_r);
        }
      }
      for (std::int64_t r = 0; r < group; ++r) {
        const C inv_l = C(1) / l[r];
        for (std::int64_t d = 0; d < Dv; ++d) out_rows[(t + r) * Dv + d] = o[r * v_stride + d] * inv_l;
        lse_out[b * s.q_len + t + r] = m[r] + std::log(l[r]);
      }
    }
    convert(out_rows.data(), dtype_of<C>(), bytes_at(out, b * s.q_len * Dv), out.dtype(), s.q_len * Dv);
  }
}

// Rounds a head's [rows][stride] sums into its [rows, cols] slice of t (packed first: one conversion).
template <class C>
void store(const std::vector<C>& rows_in, std::int64_t head, std::int64_t rows, std::int64_t cols, std::int64_t stride,
           Tensor& t, std::vector<C>& scratch) {
  scratch.resize(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) std::copy_n(rows_in.data() + r * stride, cols, scratch.data() + r * cols);
  convert(scratch.data(), dtype_of<C>(), bytes_at(t, head * rows * cols), t.dtype(), rows * cols);
}

template <class C>
void backward_heads(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& d_out,
                    const Tensor& lse, const AttentionShape& s, Tensor& dq, Tensor& dk, Tensor& dv, std::int64_t begin,
                    std::int64_t end) {
  const std::int64_t D = s.head_dim, Dv = s.value_dim, kv_stride = round_up(s.kv_len, kBlock),
                     k_stride = round_up(D, kChunk), v_stride = round_up(Dv, kChunk);
  const C scale = static_cast<C>(s.scale);
  std::vector<C> queries, keys_padded, kt, vt, outs, d_outs, scratch, factor(kBlock), dq_rows, dk_rows, dv_rows;
  std::vector<C> kept_rows, ds_rows;
  alignas(64) C p[kBlock], dp[kBlock];
  const C* lse_in = lse.data<C>();
  for (std::int64_t b = begin; b < end; ++b) {
    widen(q, b, s.q_len, D, scratch);
    pad_rows(scratch, s.q_len, D, k_stride, queries);
    widen(k, b, s.kv_len, D, scratch);  // both layouts of K from one conversion
    pad_rows(scratch, s.kv_len, D, k_stride, keys_padded);
    transpose(scratch, s.kv_len, D, kv_stride, kt);
    widen(v, b, s.kv_len, Dv, scratch);
    transpose(scratch, s.kv_len, Dv, kv_stride, vt);
    widen(out, b, s.q_len, Dv, scratch);
    pad_rows(scratch, s.q_len, Dv, v_stride, outs);
    widen(d_out, b, s.q_len, Dv, scratch);
    pad_rows(scratch, s.q_len, Dv, v_stride, d_outs);
    dq_rows.assign(static_cast<std::size_t>(s.q_len * k_stride), C(0));
    dk_rows.assign(static_cast<std::size_t>(s.kv_len * k_stride), C(0));
    dv_rows.assign(static_cast<std::size_t>(s.kv_len * v_stride), C(0));
    for (std::int64_t t0 = 0; t0 < s.q_len; t0 += kQueryBlock) {
      const std::int64_t rows = std::min(kQueryBlock, s.q_len - t0);
      // The block's kept weights and dS, [row][key]: 0 wherever a row sees no key (causal).
      kept_rows.assign(static_cast<std::size_t>(kQueryBlock * kv_stride), C(0));
      ds_rows.assign(kept_rows.size(), C(0));
      std::int64_t keys = 0;  // the keys some row of the block sees
      for (std::int64_t t = t0; t < t0 + rows; t += kRows<C>) {  // a group of rows: their scores made together
        const std::int64_t group = std::min<std::int64_t>(kRows<C>, t0 + rows - t);
        const auto q_group = group_rows(queries.data(), k_stride, t, s.q_len - 1);
        const auto d_out_group = group_rows(d_outs.data(), v_stride, t, s.q_len - 1);
        C row_dot[kRows<C>];  // D_t = dO_t . O_t: the softmax backward's sum_s P_ts dP_ts, dropout included
        for (std::int64_t r = 0; r < group; ++r) {
          row_dot[r] = 0;
          for (std::int64_t d = 0; d < Dv; ++d) row_dot[r] += d_out_group[r][d] * outs[(t + r) * v_stride + d];
        }
        const std::int64_t group_seen = keys_seen(s, t + group - 1);  // the last row sees the most
        keys = std::max(keys, group_seen);
        for (std::int64_t s0 = 0; s0 < group_seen; s0 += kBlock) {
          const std::int64_t block = std::min(kBlock, group_seen - s0);
          Row<C> weights[kRows<C>], d_weights[kRows<C>];
          block_dots(q_group.data(), kt, D, kv_stride, s0, block, weights);  // P recomputed from the saved lse
          block_dots(d_out_group.data(), vt, Dv, kv_stride, s0, block, d_weights);  // dO_t . v_s
          for (std::int64_t r = 0; r < group; ++r) {
            const std::int64_t n = std::min(kBlock, keys_seen(s, t + r) - s0);
            if (n <= 0) continue;  // a causal row that sees none of this block: its kept and dS stay 0
            scale_and_mask(weights[r], scale, lse_in[b * s.q_len + t + r], n);
            exp_lanes(weights[r]);  // 0 past n
            store_row(weights[r], p);
            store_row(d_weights[r], dp);
            if (s.dropout > 0) dropout_factors(s, b, t + r, s0, n, factor.data());
            C* kept = kept_rows.data() + (t + r - t0) * kv_stride + s0;
            C* ds = ds_rows.data() + (t + r - t0) * kv_stride + s0;
            for (std::int64_t j = 0; j < kBlock; ++j) {  // 0 past n, where p is
              const C f = s.dropout > 0 && j < n ? factor[j] : C(1);
              kept[j] = p[j] * f;  // the weight O used
              ds[j] = scale * p[j] * (dp[j] * f - row_dot[r]);  // dS, times the scale of q k^T
            }
            add_weighted_rows(ds, keys_padded.data() + s0 * k_stride, n, k_stride, dq_rows.data() + (t + r) * k_stride);
          }
        }
      }
      const std::int64_t diagonal = s.causal ? t0 : keys;  // row t of the block sees keys up to t0 + t
      add_transposed_products(kept_rows.data(), kv_stride, rows, keys, d_outs.data() + t0 * v_stride, v_stride,
                              diagonal, dv_rows.data());
      add_transposed_products(ds_rows.data(), kv_stride, rows, keys, queries.data() + t0 * k_stride, k_stride, diagonal,
                              dk_rows.data());
    }
    store(dq_rows, b, s.q_len, D, k_stride, dq, scratch);
    store(dk_rows, b, s.kv_len, D, k_stride, dk, scratch);
    store(dv_rows, b, s.kv_len, Dv, v_stride, dv, scratch);
  }
}

// Heads per chunk of the thread pool: about 64K multiply-adds of work each.
std::int64_t head_grain(const AttentionShape& s) {
  const std::int64_t work = std::max<std::int64_t>(1, s.q_len * s.kv_len * (s.head_dim + s.value_dim));
  return std::max<std::int64_t>(1, (64 * 1024) / work);
}

}  // namespace
}  // namespace attention_rows

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& s, Tensor& out,
                       Tensor& lse) {
  visit_floating(q.dtype(), "attention_forward", [&](auto zero) {
    using C = compute_t<decltype(zero)>;
    parallel_for(s.batch, attention_rows::head_grain(s), [&](std::int64_t begin, std::int64_t end) {
      attention_rows::forward_heads<C>(q, k, v, s, out, lse, begin, end);
    });
  });
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& d_out,
                        const Tensor& lse, const AttentionShape& s, Tensor& dq, Tensor& dk, Tensor& dv) {
  visit_floating(q.dtype(), "attention_backward", [&](auto zero) {
    using C = compute_t<decltype(zero)>;
    parallel_for(s.batch, attention_rows::head_grain(s), [&](std::int64_t begin, std::int64_t end) {
      attention_rows::backward_heads<C>(q, k, v, out, d_out, lse, s, dq, dk, dv, begin, end);
    });
  });
}

}  // namespace mg::kernels::cpu
