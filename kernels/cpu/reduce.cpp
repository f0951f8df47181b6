// CPU reductions over the n of an [outer, n, inner] view: sum, mean and max (kernels/reduce.h).
//
// Two loops, one per memory pattern:
//   inner == 1  the reduced elements are contiguous (a row): converted in chunks and summed into
//               eight independent partial sums (vectorised, and more accurate than one running sum);
//   inner > 1   rows of `inner` contiguous elements are added into an accumulator row.
// Accumulators are f32, or f64 for f64; the result is rounded once into out's dtype.
// Run its tests: build/tests/test_ops_reduce.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

#include "kernels/reduce.h"

namespace mg::kernels::cpu {

namespace {

constexpr std::int64_t kChunk = 512;
constexpr int kLanes = 8;

template <class C>
bool greater_or_nan(C value, C best) {
  return value > best || (value != value && best == best);  // the first NaN wins and stays
}

// Reduces x as [outer, n, inner] into acc[outer * inner] (C), with argmax into index when max.
template <class C>
void reduce_into(ReduceOp op, const Tensor& x, const ReduceShape& s, C* acc, std::int32_t* index) {
  const auto* base = static_cast<const char*>(x.data_ptr());
  const std::size_t element = dtype_size(x.dtype());
  const bool is_max = op == ReduceOp::Max;
  std::vector<C> buffer(static_cast<std::size_t>(std::max(kChunk, s.inner)));
  for (std::int64_t o = 0; o < s.outer; ++o) {
    const char* block = base + static_cast<std::size_t>(o * s.n * s.inner) * element;
    C* out = acc + o * s.inner;
    std::int32_t* out_index = index ? index + o * s.inner : nullptr;
    if (s.inner == 1) {
      C lanes[kLanes] = {};
      C best = 0;
      std::int64_t best_at = 0;
      for (std::int64_t start = 0; start < s.n; start += kChunk) {
        std::int64_t count = std::min(kChunk, s.n - start);
        convert(block + static_cast<std::size_t>(start) * element, x.dtype(), buffer.data(), dtype_of<C>(), count);
        if (is_max) {
          for (std::int64_t i = 0; i < count; ++i) {
            if ((start == 0 && i == 0) || greater_or_nan(buffer[i], best)) {
              best = buffer[i];
              best_at = start + i;
            }
          }
        } else {
          std::int64_t i = 0;
          for (; i + kLanes <= count; i += kLanes)
            for (int l = 0; l < kLanes; ++l) lanes[l] += buffer[i + l];
          for (; i < count; ++i) lanes[0] += buffer[i];
        }
      }
      if (is_max) {
        out[0] = best;
        if (out_index) out_index[0] = static_cast<std::int32_t>(best_at);
      } else {
        C total = 0;
        for (C lane : lanes) total += lane;
        out[0] = total;
      }
    } else {
      if (!is_max) std::fill(out, out + s.inner, C(0));  // an empty sum is 0
      for (std::int64_t j = 0; j < s.n; ++j) {
        convert(block + static_cast<std::size_t>(j * s.inner) * element, x.dtype(), buffer.data(), dtype_of<C>(),
                s.inner);
        for (std::int64_t i = 0; i < s.inner; ++i) {
          if (!is_max) {
            out[i] += buffer[i];
          } else if (j == 0 || greater_or_nan(buffer[i], out[i])) {
            out[i] = buffer[i];
            if (out_index) out_index[i] = static_cast<std::int32_t>(j);
          }
        }
      }
    }
  }
  if (op == ReduceOp::Mean) {
    for (std::int64_t i = 0; i < s.outer * s.inner; ++i) acc[i] /= static_cast<C>(s.n);
  }
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, const ReduceShape& s, Tensor& out, Tensor* indices) {
  assert(x.numel() == s.outer * s.n * s.inner && out.numel() == s.outer * s.inner);
  assert(!indices || (op == ReduceOp::Max && indices->numel() == out.numel()));
  visit_floating(x.dtype(), "reduce", [&](auto zero) {
    using C = compute_t<decltype(zero)>;
    std::int32_t* index = indices ? indices->data<std::int32_t>() : nullptr;
    if (out.dtype() == dtype_of<C>()) {
      reduce_into<C>(op, x, s, out.data<C>(), index);
    } else {
      Tensor acc = Tensor::empty(out.shape(), {.dtype = dtype_of<C>()});
      reduce_into<C>(op, x, s, acc.data<C>(), index);
      convert(acc.data_ptr(), acc.dtype(), out.data_ptr(), out.dtype(), out.numel());
    }
  });
}

}  // namespace mg::kernels::cpu
