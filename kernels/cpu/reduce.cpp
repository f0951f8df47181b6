// CPU reductions over the n of an [outer, n, inner] view: sum, mean and max (kernels/reduce.h).
//
// Two loops, one per memory pattern, both cut into chunks for the thread pool by the shape alone:
//   inner == 1  the reduced elements are contiguous (a row): converted in chunks and summed into
//               eight independent partial sums (vectorised, and more accurate than one running sum),
//               per block of 64 Ki elements; the blocks' sums are added in order;
//   inner > 1   rows of `inner` contiguous elements are added into an accumulator row, in order.
// Accumulators are f32, or f64 for f64; the result is rounded once into out's dtype.
// Run its tests: build/tests/test_ops_reduce.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/reduce.h"

namespace mg::kernels::cpu {

namespace {

constexpr std::int64_t kChunk = 512;
constexpr int kLanes = 8;
// A contiguous row is reduced in blocks of kBlock elements, each into its own partial result, and
// the partials are combined in block order: the blocks are the thread pool's chunks, and they are
// cut by n alone, so the result is the same on any thread count. A row of at most kBlock elements is
// one block.
constexpr std::int64_t kBlock = 64 * 1024;
constexpr std::int64_t kGrain = 32 * 1024;  // elements per chunk of the thread pool (parallel.h)

template <class C>
bool greater_or_nan(C value, C best) {
  return value > best || (value != value && best == best);  // the first NaN wins and stays
}

// One block's result: a sum (eight lanes, vectorised and more accurate than one running sum), or
// the block's first maximum and where it is.
template <class C>
struct Partial {
  C value = 0;
  std::int64_t at = -1;
};

template <class C>
Partial<C> reduce_block(bool is_max, const char* first, DType dtype, std::int64_t begin, std::int64_t end) {
  C buffer[kChunk];
  C lanes[kLanes] = {};
  Partial<C> best;
  for (std::int64_t start = begin; start < end; start += kChunk) {
    const std::int64_t count = std::min(kChunk, end - start);
    convert(first + static_cast<std::size_t>(start) * dtype_size(dtype), dtype, buffer, dtype_of<C>(), count);
    if (is_max) {
      for (std::int64_t i = 0; i < count; ++i) {
        if (best.at < 0 || greater_or_nan(buffer[i], best.value)) best = {buffer[i], start + i};
      }
    } else {
      std::int64_t i = 0;
      for (; i + kLanes <= count; i += kLanes)
        for (int l = 0; l < kLanes; ++l) lanes[l] += buffer[i + l];
      for (; i < count; ++i) lanes[0] += buffer[i];
    }
  }
  if (!is_max) {
    for (C lane : lanes) best.value += lane;
  }
  return best;
}

// inner == 1: every output reduces one contiguous row of n elements.
template <class C>
void reduce_rows(bool is_max, const Tensor& x, const ReduceShape& s, C* acc, std::int32_t* index) {
  const auto* base = static_cast<const char*>(x.data_ptr());
  const std::size_t row_bytes = static_cast<std::size_t>(s.n) * dtype_size(x.dtype());
  auto store = [&](std::int64_t o, const Partial<C>& result) {
    acc[o] = result.value;
    if (index) index[o] = static_cast<std::int32_t>(std::max<std::int64_t>(result.at, 0));
  };
  if (s.n <= kBlock) {  // one block per row: the rows are the chunks
    parallel_for(s.outer, std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, s.n)),
                 [&](std::int64_t begin, std::int64_t end) {
                   for (std::int64_t o = begin; o < end; ++o)
                     store(o, reduce_block<C>(is_max, base + static_cast<std::size_t>(o) * row_bytes, x.dtype(), 0, s.n));
                 });
    return;
  }
  // Long rows: every block of every row is a chunk; then each row's blocks are combined in order.
  const std::int64_t blocks = (s.n + kBlock - 1) / kBlock;
  std::vector<Partial<C>> partials(static_cast<std::size_t>(s.outer * blocks));
  parallel_for(s.outer * blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t o = item / blocks, b = item % blocks;
      partials[static_cast<std::size_t>(item)] = reduce_block<C>(
          is_max, base + static_cast<std::size_t>(o) * row_bytes, x.dtype(), b * kBlock, std::min(s.n, (b + 1) * kBlock));
    }
  });
  for (std::int64_t o = 0; o < s.outer; ++o) {
    Partial<C> total = partials[static_cast<std::size_t>(o * blocks)];
    for (std::int64_t b = 1; b < blocks; ++b) {
      const Partial<C>& next = partials[static_cast<std::size_t>(o * blocks + b)];
      if (!is_max) total.value += next.value;
      else if (greater_or_nan(next.value, total.value)) total = next;  // ties keep the earlier block's
    }
    store(o, total);
  }
}

// inner > 1: rows of `inner` contiguous elements are added (or compared) into an accumulator row, j
// in order. Outputs are independent, so the pool takes slices of the accumulator row.
template <class C>
void reduce_columns(bool is_max, const Tensor& x, const ReduceShape& s, C* acc, std::int32_t* index) {
  const auto* base = static_cast<const char*>(x.data_ptr());
  const std::size_t element = dtype_size(x.dtype());
  const std::int64_t slice_grain = std::max<std::int64_t>(kChunk, kGrain / std::max<std::int64_t>(1, s.n));
  const std::int64_t slices = (s.inner + slice_grain - 1) / slice_grain;
  parallel_for(s.outer * slices, 1, [&](std::int64_t begin, std::int64_t end) {
    C buffer[kChunk];
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t o = item / slices;
      for (std::int64_t first = (item % slices) * slice_grain, stop = std::min(s.inner, first + slice_grain);
           first < stop; first += kChunk) {
        const std::int64_t count = std::min(kChunk, stop - first);
        C* out = acc + o * s.inner + first;
        std::int32_t* out_index = index ? index + o * s.inner + first : nullptr;
        if (!is_max) std::fill(out, out + count, C(0));  // an empty sum is 0
        for (std::int64_t j = 0; j < s.n; ++j) {
          convert(base + static_cast<std::size_t>((o * s.n + j) * s.inner + first) * element, x.dtype(), buffer,
                  dtype_of<C>(), count);
          for (std::int64_t i = 0; i < count; ++i) {
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
  });
}

// Reduces x as [outer, n, inner] into acc[outer * inner] (C), with argmax into index when max.
template <class C>
void reduce_into(ReduceOp op, const Tensor& x, const ReduceShape& s, C* acc, std::int32_t* index) {
  const bool is_max = op == ReduceOp::Max;
  if (s.inner == 1) reduce_rows(is_max, x, s, acc, index);
  else reduce_columns(is_max, x, s, acc, index);
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
