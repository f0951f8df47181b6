// The register loops of the CPU fused attention (kernels/cpu/attention.cpp): a query row's block of
// kBlock scores held in vector registers, the dot products that make kRows rows' blocks together, the
// softmax's per-lane steps, and the sums of weighted rows the forward (P V) and the backward
// (dV = P^T dO, dK = dS^T Q) add. attention.cpp says which loop calls which.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

namespace mg::kernels::cpu::attention_rows {

constexpr std::int64_t kBlock = 64;  // keys per block of the online softmax: 4 AVX-512 registers of f32 scores
constexpr std::int64_t kChunk = 32;  // output columns summed in registers at once (two registers of f32)

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

// Query rows whose scores are made together: each load of K^T (or V^T) feeds that many multiply-adds,
// which the loads would otherwise bound (a load per multiply-add). 4 rows of 4 packets of f32 are 16
// registers of sums with AVX-512; with wider rows (f64, or 8-lane packets) one.
template <class C>
constexpr int kRows = kParts<C> <= 4 ? 4 : 1;

// rows[r] = a[r] . column (s0 + j) of m for each j and each of R query rows: m is [depth][stride]
// (K^T or V^T), each a[r] has `depth` elements. Only the first P packets are summed (the lanes a causal
// row can see); the rest are 0.
template <class C, int P, int R>
void dots(const C* const* a, const C* m, std::int64_t depth, std::int64_t stride, Row<C>* rows) {
  Packet<C> acc[R][P];
  for (auto& row : acc)
    for (auto& x : row) x = ei::pset1<Packet<C>>(C(0));
  for (std::int64_t d = 0; d < depth; ++d) {
    Packet<C> md[P];
    for (int i = 0; i < P; ++i) md[i] = ei::ploadu<Packet<C>>(m + d * stride + i * kLanes<C>);
    for (int r = 0; r < R; ++r) {
      const Packet<C> ad = ei::pset1<Packet<C>>(a[r][d]);
      for (int i = 0; i < P; ++i) acc[r][i] = ei::pmadd(ad, md[i], acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < kParts<C>; ++i) rows[r].part[i] = i < P ? acc[r][i] : ei::pset1<Packet<C>>(C(0));
}
template <class C, int P = kParts<C>>
void block_dots(const C* const* a, const std::vector<C>& m, std::int64_t depth, std::int64_t stride, std::int64_t s0,
                std::int64_t n, Row<C>* rows) {
  if constexpr (P > 1) {
    if (n <= (P - 1) * kLanes<C>) return block_dots<C, P - 1>(a, m, depth, stride, s0, n, rows);
  }
  dots<C, P, kRows<C>>(a, m.data() + s0, depth, stride, rows);
}

// The rows [t, t + kRows) of a group, as pointers into `base` (rows `stride` apart); past the last row
// the group repeats it (computed, then ignored).
template <class C>
std::array<const C*, kRows<C>> group_rows(const C* base, std::int64_t stride, std::int64_t t, std::int64_t last) {
  std::array<const C*, kRows<C>> rows{};
  for (int r = 0; r < kRows<C>; ++r) rows[r] = base + std::min<std::int64_t>(t + r, last) * stride;
  return rows;
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

// out[s][0, stride) += sum_{first(s) <= t < rows} w[t][s] x[t][0, stride) for each s < cols, where w[t][s]
// is 0 for the rows t < first(s) = max(0, s - diagonal) (a causal block: row t sees keys up to
// t + diagonal; diagonal = cols for none) which are skipped: w is [rows][w_stride],
// x [rows][stride] and out [cols][stride], stride a multiple of kChunk, and w's columns up to the next
// multiple of kGroup exist (they may hold anything past cols: those sums are not stored). kGroup rows of
// out at a time, kChunk columns each, summed in registers down the t rows: dV = P^T dO and dK = dS^T Q
// for one block of queries, with a load of x and kGroup broadcasts of w per kGroup * kChunk multiply-adds.
constexpr std::int64_t kGroup = 4;
template <class C>
void add_transposed_products(const C* w, std::int64_t w_stride, std::int64_t rows, std::int64_t cols, const C* x,
                             std::int64_t stride, std::int64_t diagonal, C* out) {
  constexpr int kChunkParts = static_cast<int>(kChunk) / kLanes<C>;
  for (std::int64_t s0 = 0; s0 < cols; s0 += kGroup) {
    const std::int64_t group = std::min(kGroup, cols - s0), first = std::max<std::int64_t>(0, s0 - diagonal);
    for (std::int64_t c0 = 0; c0 < stride; c0 += kChunk) {
      Packet<C> acc[kGroup][kChunkParts];
      for (auto& row : acc)
        for (auto& a : row) a = ei::pset1<Packet<C>>(C(0));
      for (std::int64_t t = first; t < rows; ++t) {
        Packet<C> xt[kChunkParts];
        for (int i = 0; i < kChunkParts; ++i) xt[i] = ei::ploadu<Packet<C>>(x + t * stride + c0 + i * kLanes<C>);
        for (std::int64_t g = 0; g < kGroup; ++g) {
          const Packet<C> wg = ei::pset1<Packet<C>>(w[t * w_stride + s0 + g]);
          for (int i = 0; i < kChunkParts; ++i) acc[g][i] = ei::pmadd(wg, xt[i], acc[g][i]);
        }
      }
      for (std::int64_t g = 0; g < group; ++g)
        for (int i = 0; i < kChunkParts; ++i) {
          C* o = out + (s0 + g) * stride + c0 + i * kLanes<C>;
          ei::pstoreu(o, ei::padd(ei::ploadu<Packet<C>>(o), acc[g][i]));
        }
    }
  }
}
}  // namespace mg::kernels::cpu::attention_rows
