// CPU reductions over the n of an [outer, n, inner] view: sum, mean and max (kernels/reduce.h).
//
// Two loops, one per memory pattern, both cut into chunks for the thread pool by the shape alone:
//   inner == 1  the reduced elements are contiguous (a row): converted in chunks, each leaf of 128
//               elements summed into eight lanes (vectorised) and the lanes added in order; the
//               leaves' sums are added pairwise (PairwiseSum), per block of 64 Ki elements and then
//               across the blocks;
//   inner > 1   rows of `inner` contiguous elements are added into an accumulator row, 16 rows to a
//               leaf, and the leaves' rows are added pairwise.
// Sums are pairwise because a running sum of n terms rounds each term into up to n partial sums (a
// running f32 sum of 10^6 copies of 0.1f is 1% off); pairwise, a term meets about log2(n) roundings,
// so the error stays within log2(n) eps of sum |x| (PyTorch's cascade sum does the same). Every tree
// is cut by n alone, so the result is the same on any thread count.
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

constexpr std::int64_t kReduceChunk = 512;
constexpr int kReduceLanes = 8;
constexpr std::int64_t kLeaf = 128;  // contiguous elements summed in eight lanes: 16 additions a lane
constexpr std::int64_t kLeafRows = 16;  // strided rows added in order before they join the pairwise sum
// A contiguous row is reduced in blocks of kReduceBlock elements, each into its own partial result, and
// the partials are combined in block order (pairwise, for sums): the blocks are the thread pool's
// chunks, and they are cut by n alone, so the result is the same on any thread count. A row of at
// most kReduceBlock elements is one block.
constexpr std::int64_t kReduceBlock = 64 * 1024;
constexpr std::int64_t kReduceGrain = 32 * 1024;  // elements per chunk of the thread pool (parallel.h)

template <class C>
bool greater_or_nan(C value, C best) {
  return value > best || (value != value && best == best);  // the first NaN wins and stays
}

// A pairwise sum of rows of `width` values pushed in order, kept like the carries of a binary counter:
// the 2k-th and (2k+1)-th rows pushed are added, then pairs of those sums, and so on. total() adds the
// partials left, the smallest (latest) first. The tree depends on the number of pushes alone.
template <class C>
class PairwiseSum {
 public:
  explicit PairwiseSum(std::int64_t width) : width_(width) {}

  void push(const C* values) {
    partials_.insert(partials_.end(), values, values + width_);
    for (std::int64_t pushed = pushes_++; pushed & 1; pushed >>= 1) merge_last();
  }
  // The sum of everything pushed (width_ values, 0 when nothing was); ends the sum.
  const C* total() {
    if (partials_.empty()) partials_.assign(static_cast<std::size_t>(width_), C(0));
    while (static_cast<std::int64_t>(partials_.size()) > width_) merge_last();
    return partials_.data();
  }

 private:
  // Adds the last partial into the one before it (earlier terms on the left).
  void merge_last() {
    C* last = partials_.data() + partials_.size() - width_;
    for (std::int64_t i = 0; i < width_; ++i) last[i - width_] += last[i];
    partials_.resize(partials_.size() - static_cast<std::size_t>(width_));
  }

  std::int64_t width_, pushes_ = 0;
  std::vector<C> partials_;
};

// The sum of count <= kLeaf values: eight lanes (the tail goes to lane 0), then the lanes in order.
// A row of at most kLeaf elements is one leaf, summed as this file always summed it.
template <class C>
C leaf_sum(const C* values, std::int64_t count) {
  C lanes[kReduceLanes] = {};
  std::int64_t i = 0;
  for (; i + kReduceLanes <= count; i += kReduceLanes)
    for (int l = 0; l < kReduceLanes; ++l) lanes[l] += values[i + l];
  for (; i < count; ++i) lanes[0] += values[i];
  C sum = 0;
  for (C lane : lanes) sum += lane;
  return sum;
}

// One block's result: a sum (pairwise over leaves of kLeaf elements), or the block's first maximum
// and where it is.
template <class C>
struct Partial {
  C value = 0;
  std::int64_t at = -1;
};

template <class C>
Partial<C> reduce_block(bool is_max, const char* first, DType dtype, std::int64_t begin, std::int64_t end) {
  C buffer[kReduceChunk];
  PairwiseSum<C> leaves(1);
  Partial<C> best;
  for (std::int64_t start = begin; start < end; start += kReduceChunk) {
    const std::int64_t count = std::min(kReduceChunk, end - start);
    convert(first + dtype_bytes(dtype, start), dtype, buffer, dtype_of<C>(), count);
    if (is_max) {
      for (std::int64_t i = 0; i < count; ++i) {
        if (best.at < 0 || greater_or_nan(buffer[i], best.value)) best = {buffer[i], start + i};
      }
    } else {
      for (std::int64_t leaf = 0; leaf < count; leaf += kLeaf) {
        const C sum = leaf_sum(buffer + leaf, std::min(kLeaf, count - leaf));
        leaves.push(&sum);
      }
    }
  }
  if (!is_max) best.value = *leaves.total();
  return best;
}

// inner == 1: every output reduces one contiguous row of n elements.
template <class C>
void reduce_rows(bool is_max, const Tensor& x, const ReduceShape& s, C* acc, std::int32_t* index) {
  const auto* base = static_cast<const char*>(x.data_ptr());
  const std::size_t row_bytes = dtype_bytes(x.dtype(), s.n);
  auto store = [&](std::int64_t o, const Partial<C>& result) {
    acc[o] = result.value;
    if (index) index[o] = static_cast<std::int32_t>(std::max<std::int64_t>(result.at, 0));
  };
  if (s.n <= kReduceBlock) {  // one block per row: the rows are the chunks
    parallel_for(s.outer, std::max<std::int64_t>(1, kReduceGrain / std::max<std::int64_t>(1, s.n)),
                 [&](std::int64_t begin, std::int64_t end) {
                   for (std::int64_t o = begin; o < end; ++o)
                     store(o,
                           reduce_block<C>(is_max, base + static_cast<std::size_t>(o) * row_bytes, x.dtype(), 0, s.n));
                 });
    return;
  }
  // Long rows: every block of every row is a chunk; then each row's blocks are combined (a block is
  // 512 leaves, a power of two: the blocks' pairwise sum continues the blocks' own trees).
  const std::int64_t blocks = (s.n + kReduceBlock - 1) / kReduceBlock;
  std::vector<Partial<C>> partials(static_cast<std::size_t>(s.outer * blocks));
  parallel_for(s.outer * blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t o = item / blocks, b = item % blocks;
      partials[static_cast<std::size_t>(item)] = reduce_block<C>(is_max, base + static_cast<std::size_t>(o) * row_bytes,
                                                                 x.dtype(), b * kReduceBlock,
                                                                 std::min(s.n, (b + 1) * kReduceBlock));
    }
  });
  for (std::int64_t o = 0; o < s.outer; ++o) {
    Partial<C> total = partials[static_cast<std::size_t>(o * blocks)];
    PairwiseSum<C> block_sums(1);
    for (std::int64_t b = 0; b < blocks; ++b) {
      const Partial<C>& next = partials[static_cast<std::size_t>(o * blocks + b)];
      if (!is_max)
        block_sums.push(&next.value);
      else if (b > 0 && greater_or_nan(next.value, total.value))
        total = next;  // ties keep the earlier block's
    }
    if (!is_max) total.value = *block_sums.total();
    store(o, total);
  }
}

// inner > 1: rows of `inner` contiguous elements are added (or compared) into an accumulator row, j
// in order; sums go through a PairwiseSum every kLeafRows rows. Outputs are independent, so the pool
// takes slices of the accumulator row.
template <class C>
void reduce_columns(bool is_max, const Tensor& x, const ReduceShape& s, C* acc, std::int32_t* index) {
  const auto* base = static_cast<const char*>(x.data_ptr());
  const std::size_t element = dtype_size(x.dtype());
  const std::int64_t slice_grain = std::max<std::int64_t>(kReduceChunk, kReduceGrain / std::max<std::int64_t>(1, s.n));
  const std::int64_t slices = (s.inner + slice_grain - 1) / slice_grain;
  parallel_for(s.outer * slices, 1, [&](std::int64_t begin, std::int64_t end) {
    C buffer[kReduceChunk];
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t o = item / slices;
      for (std::int64_t first = (item % slices) * slice_grain, stop = std::min(s.inner, first + slice_grain);
           first < stop; first += kReduceChunk) {
        const std::int64_t count = std::min(kReduceChunk, stop - first);
        C* out = acc + o * s.inner + first;
        std::int32_t* out_index = index ? index + o * s.inner + first : nullptr;
        PairwiseSum<C> leaves(count);
        if (!is_max) std::fill(out, out + count, C(0));  // the running leaf
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
          if (!is_max && (j % kLeafRows == kLeafRows - 1 || j == s.n - 1)) {
            leaves.push(out);
            std::fill(out, out + count, C(0));
          }
        }
        if (!is_max) std::copy_n(leaves.total(), count, out);  // an empty sum is 0
      }
    }
  });
}

// Reduces x as [outer, n, inner] into acc[outer * inner] (C), with argmax into index when max.
template <class C>
void reduce_into(ReduceOp op, const Tensor& x, const ReduceShape& s, C* acc, std::int32_t* index) {
  const bool is_max = op == ReduceOp::Max;
  if (s.inner == 1)
    reduce_rows(is_max, x, s, acc, index);
  else
    reduce_columns(is_max, x, s, acc, index);
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
