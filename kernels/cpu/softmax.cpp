// CPU softmax, log-softmax and fused cross-entropy (formulas in kernels/softmax.h).
//
// Every row (the n elements along the softmax dim) is gathered into an f32 (f64 for f64) buffer,
// processed there with the max subtracted before exponentiating (so exp never overflows), and
// scattered back rounded to the storage dtype. For the common inner == 1 case the gather is a
// contiguous conversion. Rows are independent: the thread pool takes chunks of them.
// Run its tests: build/tests/test_ops_softmax.
#include <cassert>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/softmax.h"

namespace mg::kernels::cpu {

namespace {

constexpr std::int64_t kRowGrain = 16 * 1024;  // elements per chunk of the thread pool (parallel.h)

// Moves row (o, i) of an [outer, n, inner] tensor between its storage and a compute-type buffer.
// With inner == 1 the row is contiguous and converts in one call; otherwise its elements are
// `inner` apart.
template <class C>
struct RowAccess {
  const ReduceShape& s;

  std::size_t byte_offset(const Tensor& t, std::int64_t o, std::int64_t j, std::int64_t i) const {
    return dtype_bytes(t.dtype(), (o * s.n + j) * s.inner + i);
  }
  void load(const Tensor& t, std::int64_t o, std::int64_t i, C* buffer) const {
    const auto* base = static_cast<const char*>(t.data_ptr());
    if (s.inner == 1) return convert(base + byte_offset(t, o, 0, 0), t.dtype(), buffer, dtype_of<C>(), s.n);
    for (std::int64_t j = 0; j < s.n; ++j)
      convert(base + byte_offset(t, o, j, i), t.dtype(), buffer + j, dtype_of<C>(), 1);
  }
  void store(const C* buffer, Tensor& t, std::int64_t o, std::int64_t i) const {
    auto* base = static_cast<char*>(t.data_ptr());
    if (s.inner == 1) return convert(buffer, dtype_of<C>(), base + byte_offset(t, o, 0, 0), t.dtype(), s.n);
    for (std::int64_t j = 0; j < s.n; ++j)
      convert(buffer + j, dtype_of<C>(), base + byte_offset(t, o, j, i), t.dtype(), 1);
  }
};

// max and log(sum(exp(x - max))) of one row; scratch holds n values. A row holding +inf or NaN, or
// only -inf, has no finite max to subtract: x - max is NaN somewhere (inf - inf, -inf + inf, NaN), so
// the sum and every value made from it are NaN, which is PyTorch's answer for such a row. A -inf
// beside a finite max is exp(-inf) = 0: a probability of 0, as it should be.
template <class C>
void row_max_logsum(const C* x, std::int64_t n, C& max, C& log_sum, C* scratch) {
  max = -std::numeric_limits<C>::infinity();
  for (std::int64_t j = 0; j < n; ++j) max = std::max(max, x[j]);
  for (std::int64_t j = 0; j < n; ++j) scratch[j] = x[j] - max;
  vector_math::exp(scratch, scratch, n);
  C sum = 0;
  for (std::int64_t j = 0; j < n; ++j) sum += scratch[j];
  log_sum = std::log(sum);
}

// Runs fn(o, i, buffer, second_buffer) for every row (o, i) of an [outer, n, inner] view, with two
// n-element buffers per chunk; rows are independent, so the thread pool takes chunks of them.
template <class C, class Fn>
void for_each_row(const ReduceShape& s, const Fn& fn) {
  parallel_for(s.outer * s.inner, std::max<std::int64_t>(1, kRowGrain / std::max<std::int64_t>(1, s.n)),
               [&](std::int64_t begin, std::int64_t end) {
                 std::vector<C> buffer(static_cast<std::size_t>(s.n)), second(static_cast<std::size_t>(s.n));
                 for (std::int64_t r = begin; r < end; ++r) fn(r / s.inner, r % s.inner, buffer, second);
               });
}

template <class Fn>
void visit_compute(DType dtype, const char* op, Fn&& fn) {
  visit_floating(dtype, op, [&](auto zero) { fn(compute_t<decltype(zero)>{}); });
}

}  // namespace

void softmax(const Tensor& x, const ReduceShape& s, bool log, Tensor& y) {
  assert(x.numel() == s.outer * s.n * s.inner && y.numel() == x.numel() && y.dtype() == x.dtype());
  visit_compute(x.dtype(), "softmax", [&](auto zero) {
    using C = decltype(zero);
    RowAccess<C> rows{s};
    for_each_row<C>(s, [&](std::int64_t o, std::int64_t i, std::vector<C>& row, std::vector<C>& scratch) {
      rows.load(x, o, i, row.data());
      C max, log_sum;
      row_max_logsum(row.data(), s.n, max, log_sum, scratch.data());
      for (C& v : row) v = v - max - log_sum;
      if (!log) vector_math::exp(row.data(), row.data(), s.n);
      rows.store(row.data(), y, o, i);
    });
  });
}

void softmax_backward(const Tensor& y, const Tensor& dy, const ReduceShape& s, bool log, Tensor& dx) {
  visit_compute(y.dtype(), "softmax backward", [&](auto zero) {
    using C = decltype(zero);
    RowAccess<C> rows{s};
    for_each_row<C>(s, [&](std::int64_t o, std::int64_t i, std::vector<C>& yr, std::vector<C>& gr) {
      rows.load(y, o, i, yr.data());
      rows.load(dy, o, i, gr.data());
      C dot = 0;  // softmax: sum(dy * y); log_softmax: sum(dy)
      for (std::int64_t j = 0; j < s.n; ++j) dot += log ? gr[j] : gr[j] * yr[j];
      if (log) vector_math::exp(yr.data(), yr.data(), s.n);  // the softmax itself, from the saved log-softmax
      for (std::int64_t j = 0; j < s.n; ++j) gr[j] = log ? gr[j] - yr[j] * dot : yr[j] * (gr[j] - dot);
      rows.store(gr.data(), dx, o, i);
    });
  });
}

// Loads each row of logits [rows, classes] into a compute-type buffer and calls fn(r, row, access,
// scratch) with a second buffer of the row's length; fn may write the row back through access.store.
template <class C, class Fn>
void for_each_logit_row(const Tensor& logits, Fn&& fn) {
  const ReduceShape s{logits.size(0), logits.size(1), 1};
  RowAccess<C> access{s};
  for_each_row<C>(s, [&](std::int64_t r, std::int64_t, std::vector<C>& row, std::vector<C>& scratch) {
    access.load(logits, r, 0, row.data());
    fn(r, row.data(), access, scratch.data());
  });
}

void cross_entropy(const Tensor& logits, const Tensor& labels, std::int64_t ignore_index, Tensor& loss,
                   Tensor& row_stats) {
  visit_compute(logits.dtype(), "cross_entropy", [&](auto zero) {
    using C = decltype(zero);
    const std::int32_t* label = labels.data<std::int32_t>();
    C* loss_out = loss.data<C>();
    C* stats_out = row_stats.data<C>();
    for_each_logit_row<C>(logits, [&](std::int64_t r, C* row, const RowAccess<C>&, C* scratch) {
      C max, log_sum;
      row_max_logsum(row, logits.size(1), max, log_sum, scratch);
      stats_out[2 * r] = max;
      stats_out[2 * r + 1] = log_sum;
      // -log_softmax at the label, (x - max) first: exact, where max + log_sum would round at max's scale.
      loss_out[r] = label[r] == ignore_index ? C(0) : log_sum - (row[label[r]] - max);
    });
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& row_stats,
                            const Tensor& row_weight, std::int64_t ignore_index, Tensor& dlogits) {
  visit_compute(logits.dtype(), "cross_entropy backward", [&](auto zero) {
    using C = decltype(zero);
    const std::int32_t* label = labels.data<std::int32_t>();
    const C* stats = row_stats.data<C>();
    const C* weight = row_weight.data<C>();
    for_each_logit_row<C>(logits, [&](std::int64_t r, C* row, const RowAccess<C>& access, C*) {
      const bool ignored = label[r] == ignore_index;
      const C max = stats[2 * r], log_sum = stats[2 * r + 1];
      for (std::int64_t c = 0; c < logits.size(1); ++c) row[c] = (row[c] - max) - log_sum;
      vector_math::exp(row, row, logits.size(1));  // the softmax p
      for (std::int64_t c = 0; c < logits.size(1); ++c)
        row[c] = ignored ? C(0) : weight[r] * (row[c] - (c == label[r] ? C(1) : C(0)));
      access.store(row, dlogits, r, 0);
    });
  });
}

}  // namespace mg::kernels::cpu
