// CPU fused attention (kernels/attention.h): FlashAttention-2's loops, one query row at a time.
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
// Run its tests: build/tests/test_ops_attention.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/philox.h"
#include "kernels/attention.h"
#include "kernels/cpu/compute_type.h"

namespace mg::kernels::cpu {

namespace {

constexpr std::int64_t kBlock = 64;  // keys per block of the online softmax: 4 AVX-512 registers of f32 scores
constexpr std::int64_t kChunk = 32;  // output columns summed in registers at once (two registers of f32)

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

// The loops below keep their sums in vector registers, as Eigen's packets (16 f32 or 8 f64 lanes with
// AVX-512): an array of plain floats would be kept in memory, each add a store and a reload.
namespace ei = Eigen::internal;
template <class C>
using Packet = typename ei::packet_traits<C>::type;
template <class C>
constexpr int kLanes = ei::unpacket_traits<Packet<C>>::size;
template <class C>
constexpr int kParts = static_cast<int>(kBlock) / kLanes<C>;

// One query row's kBlock scores (then weights) for the keys [s0, s0 + kBlock), in registers.
template <class C>
struct Row {
  Packet<C> part[kParts<C>];
};

// row = a . column (s0 + j) of m for each j: m is [rows][stride] (K^T or V^T), a has `rows` elements.
// Only the first P packets are summed (the lanes a causal row can see); the rest are 0.
template <class C, int P>
void dots(const C* a, const C* m, std::int64_t rows, std::int64_t stride, Row<C>& row) {
  Packet<C> acc[P];
  for (auto& x : acc) x = ei::pset1<Packet<C>>(C(0));
  for (std::int64_t d = 0; d < rows; ++d) {
    const Packet<C> ad = ei::pset1<Packet<C>>(a[d]);
    for (int i = 0; i < P; ++i) acc[i] = ei::pmadd(ad, ei::ploadu<Packet<C>>(m + d * stride + i * kLanes<C>), acc[i]);
  }
  for (int i = 0; i < kParts<C>; ++i) row.part[i] = i < P ? acc[i] : ei::pset1<Packet<C>>(C(0));
}
template <class C, int P = kParts<C>>
void block_dots(const C* a, const std::vector<C>& m, std::int64_t rows, std::int64_t stride, std::int64_t s0,
                std::int64_t n, Row<C>& row) {
  if constexpr (P > 1) {
    if (n <= (P - 1) * kLanes<C>) return block_dots<C, P - 1>(a, m, rows, stride, s0, n, row);
  }
  dots<C, P>(a, m.data() + s0, rows, stride, row);
}

// row * scale - shift, and -inf in the lanes [n, kBlock) the query does not see.
template <class C>
void scale_and_mask(Row<C>& row, C scale, C shift, std::int64_t n) {
  const Packet<C> none = ei::pset1<Packet<C>>(-std::numeric_limits<C>::infinity());
  for (int i = 0; i < kParts<C>; ++i) {
    const Packet<C> lane = ei::plset<Packet<C>>(static_cast<C>(i * kLanes<C>));
    const Packet<C> x = ei::psub(ei::pmul(row.part[i], ei::pset1<Packet<C>>(scale)), ei::pset1<Packet<C>>(shift));
    row.part[i] = ei::pselect(ei::pcmp_lt(lane, ei::pset1<Packet<C>>(static_cast<C>(n))), x, none);
  }
}

// exp of every lane (each <= 0 here): Eigen's packet exp, and 0 below -87 (f32; -708 for f64), where
// it stops being accurate: such a weight is below 2^-125 of the row's largest, which is 1.
template <class C>
void exp_lanes(Row<C>& row) {
  const Packet<C> floor = ei::pset1<Packet<C>>(std::is_same_v<C, float> ? C(-87) : C(-708));
  for (auto& x : row.part) x = ei::pselect(ei::pcmp_lt(x, floor), ei::pset1<Packet<C>>(C(0)), ei::pexp(x));
}

template <class C>
C row_max(const Row<C>& row) {
  Packet<C> m = row.part[0];
  for (int i = 1; i < kParts<C>; ++i) m = ei::pmax(m, row.part[i]);
  return ei::predux_max(m);
}
template <class C>
C row_sum(const Row<C>& row) {
  Packet<C> sum = row.part[0];
  for (int i = 1; i < kParts<C>; ++i) sum = ei::padd(sum, row.part[i]);
  return ei::predux(sum);
}
template <class C>
void store_row(const Row<C>& row, C* out) {
  for (int i = 0; i < kParts<C>; ++i) ei::pstoreu(out + i * kLanes<C>, row.part[i]);
}

// out[0, stride) += sum_{j < n} w[j] rows[j], rows [n][stride] (stride a multiple of kChunk):
// kChunk columns at a time, in two register sets for alternate j (two chains of adds).
template <class C>
void add_weighted_rows(const C* w, const C* rows, std::int64_t n, std::int64_t stride, C* out) {
  constexpr int kChunkParts = static_cast<int>(kChunk) / kLanes<C>;
  for (std::int64_t c0 = 0; c0 < stride; c0 += kChunk) {
    Packet<C> even[kChunkParts], odd[kChunkParts];
    for (int i = 0; i < kChunkParts; ++i) even[i] = odd[i] = ei::pset1<Packet<C>>(C(0));
    std::int64_t j = 0;
    for (; j + 1 < n; j += 2) {
      const C* r0 = rows + j * stride + c0;
      const Packet<C> w0 = ei::pset1<Packet<C>>(w[j]), w1 = ei::pset1<Packet<C>>(w[j + 1]);
      for (int i = 0; i < kChunkParts; ++i) {
        even[i] = ei::pmadd(w0, ei::ploadu<Packet<C>>(r0 + i * kLanes<C>), even[i]);
        odd[i] = ei::pmadd(w1, ei::ploadu<Packet<C>>(r0 + stride + i * kLanes<C>), odd[i]);
      }
    }
    if (j < n) {
      const Packet<C> wj = ei::pset1<Packet<C>>(w[j]);
      for (int i = 0; i < kChunkParts; ++i)
        even[i] = ei::pmadd(wj, ei::ploadu<Packet<C>>(rows + j * stride + c0 + i * kLanes<C>), even[i]);
    }
    for (int i = 0; i < kChunkParts; ++i) {
      C* o = out + c0 + i * kLanes<C>;
      ei::pstoreu(o, ei::padd(ei::ploadu<Packet<C>>(o), ei::padd(even[i], odd[i])));
    }
  }
}

template <class C>
void forward_heads(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& s, Tensor& out, Tensor& lse,
                   std::int64_t begin, std::int64_t end) {
  const std::int64_t D = s.head_dim, Dv = s.value_dim, kv_stride = round_up(s.kv_len, kBlock),
                     v_stride = round_up(Dv, kChunk);
  std::vector<C> kt, values, queries, scratch, factor(kBlock), o(static_cast<std::size_t>(v_stride));
  alignas(64) C p[kBlock];
  std::vector<C> out_rows(static_cast<std::size_t>(s.q_len * Dv));
  C* lse_out = lse.data<C>();
  for (std::int64_t b = begin; b < end; ++b) {
    widen(k, b, s.kv_len, D, scratch);
    transpose(scratch, s.kv_len, D, kv_stride, kt);  // K^T [D][kv_stride]
    widen(v, b, s.kv_len, Dv, scratch);
    pad_rows(scratch, s.kv_len, Dv, v_stride, values);  // V [kv_len][v_stride]
    widen(q, b, s.q_len, D, queries);  // read as it is
    for (std::int64_t t = 0; t < s.q_len; ++t) {
      C m = -std::numeric_limits<C>::infinity(), l = 0;
      std::fill(o.begin(), o.end(), C(0));
      const std::int64_t seen = keys_seen(s, t);
      for (std::int64_t s0 = 0; s0 < seen; s0 += kBlock) {
        const std::int64_t n = std::min(kBlock, seen - s0);
        Row<C> scores;
        block_dots(queries.data() + t * D, kt, D, kv_stride, s0, n, scores);
        scale_and_mask(scores, static_cast<C>(s.scale), C(0), n);
        const C new_max = std::max(m, row_max(scores));
        // The online softmax: what was summed against the old max is rescaled to the new one.
        const C rescale = m == new_max ? C(1) : std::exp(m - new_max);
        l *= rescale;
        for (C& x : o) x *= rescale;
        m = new_max;
        scale_and_mask(scores, C(1), m, n);
        exp_lanes(scores);  // 0 past n
        l += row_sum(scores);
        store_row(scores, p);
        if (s.dropout > 0) {
          dropout_factors(s, b, t, s0, n, factor.data());
          for (std::int64_t j = 0; j < n; ++j) p[j] *= factor[j];
        }
        add_weighted_rows(p, values.data() + s0 * v_stride, n, v_stride, o.data());
      }
      const C inv_l = C(1) / l;
      for (std::int64_t d = 0; d < Dv; ++d) out_rows[t * Dv + d] = o[d] * inv_l;
      lse_out[b * s.q_len + t] = m + std::log(l);
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
  std::vector<C> queries, keys, kt, vt, outs, d_outs, scratch, factor(kBlock), dq_rows, dk_rows, dv_rows;
  alignas(64) C p[kBlock], dp[kBlock];
  const C* lse_in = lse.data<C>();
  for (std::int64_t b = begin; b < end; ++b) {
    widen(q, b, s.q_len, D, scratch);
    pad_rows(scratch, s.q_len, D, k_stride, queries);
    widen(k, b, s.kv_len, D, scratch);  // both layouts of K from one conversion
    pad_rows(scratch, s.kv_len, D, k_stride, keys);
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
    for (std::int64_t t = 0; t < s.q_len; ++t) {
      const C* qt = queries.data() + t * k_stride;
      const C* dot = d_outs.data() + t * v_stride;
      C row_dot = 0;  // D_t = dO_t . O_t: the softmax backward's sum_s P_ts dP_ts, dropout included
      for (std::int64_t d = 0; d < Dv; ++d) row_dot += dot[d] * outs[t * v_stride + d];
      const C row_lse = lse_in[b * s.q_len + t];
      const std::int64_t seen = keys_seen(s, t);
      for (std::int64_t s0 = 0; s0 < seen; s0 += kBlock) {
        const std::int64_t n = std::min(kBlock, seen - s0);
        Row<C> weights, d_weights;
        block_dots(qt, kt, D, kv_stride, s0, n, weights);  // P recomputed from the saved log-sum-exp
        scale_and_mask(weights, scale, row_lse, n);
        exp_lanes(weights);  // 0 past n
        store_row(weights, p);
        block_dots(dot, vt, Dv, kv_stride, s0, n, d_weights);  // dO_t . v_s
        store_row(d_weights, dp);
        if (s.dropout > 0) dropout_factors(s, b, t, s0, n, factor.data());
        C kept[kBlock], ds[kBlock];
        for (std::int64_t j = 0; j < kBlock; ++j) {
          const C f = s.dropout > 0 && j < n ? factor[j] : C(1);
          kept[j] = p[j] * f;  // the weight O used
          ds[j] = scale * p[j] * (dp[j] * f - row_dot);  // dS, times the scale of q k^T
        }
        for (std::int64_t j = 0; j < n; ++j) {
          C* dvj = dv_rows.data() + (s0 + j) * v_stride;
          for (std::int64_t d = 0; d < v_stride; ++d) dvj[d] += kept[j] * dot[d];
          C* dkj = dk_rows.data() + (s0 + j) * k_stride;
          for (std::int64_t d = 0; d < k_stride; ++d) dkj[d] += ds[j] * qt[d];
        }
        add_weighted_rows(ds, keys.data() + s0 * k_stride, n, k_stride, dq_rows.data() + t * k_stride);
      }
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

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& s, Tensor& out,
                       Tensor& lse) {
  visit_floating(q.dtype(), "attention_forward", [&](auto zero) {
    using C = compute_t<decltype(zero)>;
    parallel_for(s.batch, head_grain(s),
                 [&](std::int64_t begin, std::int64_t end) { forward_heads<C>(q, k, v, s, out, lse, begin, end); });
  });
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& d_out,
                        const Tensor& lse, const AttentionShape& s, Tensor& dq, Tensor& dk, Tensor& dv) {
  visit_floating(q.dtype(), "attention_backward", [&](auto zero) {
    using C = compute_t<decltype(zero)>;
    parallel_for(s.batch, head_grain(s), [&](std::int64_t begin, std::int64_t end) {
      backward_heads<C>(q, k, v, out, d_out, lse, s, dq, dk, dv, begin, end);
    });
  });
}

}  // namespace mg::kernels::cpu
