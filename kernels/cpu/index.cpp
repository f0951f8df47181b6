// CPU row gather and scatter-add: the embedding lookup and its gradient; the gradients of max
// (kernels/index.h). Run their tests: build/tests/test_ops_index, build/tests/test_ops_reduce.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "kernels/cpu/compute_type.h"
#include "kernels/index.h"

namespace mg::kernels::cpu {

void gather_rows(const Tensor& table, const Tensor& indices, Tensor& out) {
  const std::int64_t count = indices.numel();
  const std::size_t row_bytes = dtype_bytes(table.dtype(), table.size(1));
  const auto* src = static_cast<const char*>(table.data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  const std::int32_t* index = indices.data<std::int32_t>();
  if (row_bytes == 0) return;  // rows of width 0: nothing to move (and the data pointers are null)
  for (std::int64_t i = 0; i < count; ++i)
    std::memcpy(dst + static_cast<std::size_t>(i) * row_bytes, src + static_cast<std::size_t>(index[i]) * row_bytes,
                row_bytes);
}

void scatter_add_rows(const Tensor& grad, const Tensor& indices, Tensor& grad_table) {
  visit_floating(grad_table.dtype(), "scatter_add_rows", [&](auto zero) {
    using C = compute_t<decltype(zero)>;
    const std::int64_t width = grad_table.size(1);
    const std::int64_t count = indices.numel();
    if (grad_table.numel() == 0) return;
    Accumulator<C> accumulator(grad_table);  // repeated tokens add up in f32
    C* sum = accumulator.data();
    std::vector<C> row(static_cast<std::size_t>(width));
    const auto* src = static_cast<const char*>(grad.data_ptr());
    const std::size_t row_bytes = dtype_bytes(grad.dtype(), width);
    const std::int32_t* index = indices.data<std::int32_t>();
    for (std::int64_t i = 0; i < count; ++i) {
      convert(src + static_cast<std::size_t>(i) * row_bytes, grad.dtype(), row.data(), dtype_of<C>(), width);
      C* target = sum + static_cast<std::int64_t>(index[i]) * width;
      for (std::int64_t j = 0; j < width; ++j) target[j] += row[static_cast<std::size_t>(j)];
    }
    accumulator.store();
  });
}

void scatter_along_dim(const Tensor& values, const Tensor& indices, const ReduceShape& s, Tensor& out) {
  const std::size_t element = dtype_size(out.dtype());
  if (out.numel() == 0) return;
  std::memset(out.data_ptr(), 0, out.nbytes());  // all-zero bits are 0.0 in every floating dtype
  const auto* src = static_cast<const char*>(values.data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  const std::int32_t* index = indices.data<std::int32_t>();
  for (std::int64_t o = 0; o < s.outer; ++o) {
    for (std::int64_t i = 0; i < s.inner; ++i) {
      std::int64_t from = o * s.inner + i;
      std::int64_t to = (o * s.n + index[from]) * s.inner + i;
      std::memcpy(dst + static_cast<std::size_t>(to) * element, src + static_cast<std::size_t>(from) * element,
                  element);
    }
  }
}

void share_among_ties(const Tensor& g, const Tensor& x, const Tensor& max, Tensor& dx) {
  visit_floating(x.dtype(), "max backward", [&](auto zero) {
    using C = compute_t<decltype(zero)>;
    constexpr std::int64_t kChunk = 512;
    C g_value, max_value;
    convert(g.data_ptr(), g.dtype(), &g_value, dtype_of<C>(), 1);
    convert(max.data_ptr(), max.dtype(), &max_value, dtype_of<C>(), 1);
    const bool max_is_nan = max_value != max_value;
    auto tied = [&](C v) { return max_is_nan ? v != v : v == max_value; };
    // First count the ties (integers: the same total in any order), then share g among them.
    std::atomic<std::int64_t> ties{0};
    parallel_for(x.numel(), kConvertGrain, [&](std::int64_t begin, std::int64_t end) {
      C buffer[kChunk];
      std::int64_t found = 0;
      for (std::int64_t start = begin; start < end; start += kChunk) {
        const std::int64_t n = std::min(kChunk, end - start);
        const C* v = values_at(x, start, n, buffer);
        for (std::int64_t i = 0; i < n; ++i) found += tied(v[i]);
      }
      ties += found;
    });
    const C share = g_value / static_cast<C>(ties.load());  // rounded into dx's dtype on store
    parallel_for(x.numel(), kConvertGrain, [&](std::int64_t begin, std::int64_t end) {
      C buffer[kChunk], out[kChunk];
      for (std::int64_t start = begin; start < end; start += kChunk) {
        const std::int64_t n = std::min(kChunk, end - start);
        const C* v = values_at(x, start, n, buffer);
        for (std::int64_t i = 0; i < n; ++i) out[i] = tied(v[i]) ? share : C(0);
        convert(out, dtype_of<C>(), bytes_at(dx, start), dx.dtype(), n);
      }
    });
  });
}

}  // namespace mg::kernels::cpu
