// CPU fused layer norm (formulas in kernels/layer_norm.h): one row at a time, in the compute type C.
//
// A row is read once into a buffer of C, its mean and variance taken in two
// passes over it (the variance as a mean of squares of the centred values, never E[x^2] - E[x]^2,
// which cancels), and y written in one more, rounded once to y's dtype. A row's sums are made a block
// of kSumBlock values at a time in C packets (Eigen's sum: many lanes, each adding a few values), and
// the blocks' sums added in f64, so a row of 10^5 values is as accurate as a pairwise sum and costs
// nothing next to reading it. The buffers a sum reads are Eigen's own (64-byte aligned), so its
// packets start at the same elements wherever x lies in memory: a sum that peeled a misaligned start
// would add in another order for an f32 x (read in place) than for a bf16 x (widened), and their bits
// would differ. The backward recomputes xhat from the saved mean and rstd.
//
// Rows are independent: the thread pool takes chunks of them. dweight and dbias are sums down the
// rows: each chunk keeps its own partial sums in C, and the partials are added in chunk order in f64
// afterwards (the same chunks for any thread count: the same bits, kernels/cpu/parallel.h).
// Run its tests: build/tests/test_ops_layer_norm (and build/tests/test_ops_norm).
#include <Eigen/Core>

#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/compute_type.h"
#include "kernels/layer_norm.h"

namespace mg::kernels::cpu {

namespace {

constexpr std::int64_t kSumBlock = 256;  // values per block of a row's sum: 16 per lane of an AVX-512 f32 sum
constexpr std::int64_t kLayerNormGrain = 16 * 1024;  // elements per chunk of the thread pool (parallel.h)

template <class C>
using Buffer = Eigen::Array<C, Eigen::Dynamic, 1>;  // aligned
template <class C>
using Values = Eigen::Map<Buffer<C>>;
template <class C>
using ConstValues = Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>;

// sum over [0, n) of the values block(start, count) sums, block by block, the blocks' sums in f64.
template <class Block>
double row_sum(std::int64_t n, const Block& block) {
  double total = 0.0;
  for (std::int64_t start = 0; start < n; start += kSumBlock)
    total += static_cast<double>(block(start, std::min(kSumBlock, n - start)));
  return total;
}

// weight or bias as C (widened once: outside autocast they may be f16 or bf16); empty when undefined.
template <class C>
std::vector<C> affine_values(const Tensor& t) {
  std::vector<C> values;
  if (!t.defined()) return values;
  values.resize(static_cast<std::size_t>(t.numel()));
  convert(t.data_ptr(), t.dtype(), values.data(), dtype_of<C>(), t.numel());
  return values;
}

// The rows' grain: about kLayerNormGrain elements a chunk, at least one row.
std::int64_t row_grain(const LayerNormShape& s) { return std::max<std::int64_t>(1, kLayerNormGrain / s.features); }

template <class C>
void forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const LayerNormShape& s, Tensor& y,
             Tensor& mean, Tensor& rstd) {
  const std::int64_t f = s.features;
  const std::vector<C> w = affine_values<C>(weight), b = affine_values<C>(bias);
  C* means = mean.data<C>();
  C* rstds = rstd.data<C>();
  parallel_for(s.rows, row_grain(s), [&](std::int64_t begin, std::int64_t end) {
    Buffer<C> row(f), y_buffer(f);
    for (std::int64_t r = begin; r < end; ++r) {
      convert(bytes_at(x, r * f), x.dtype(), row.data(), dtype_of<C>(), f);
      const C m = static_cast<C>(row_sum(f, [&](auto i, auto n) { return row.segment(i, n).sum(); }) /
                                 static_cast<double>(f));
      const double squares = row_sum(f, [&](auto i, auto n) { return (row.segment(i, n) - m).square().sum(); });
      const C inv_std = static_cast<C>(1.0 / std::sqrt(squares / static_cast<double>(f) + s.eps));
      means[r] = m;
      rstds[r] = inv_std;
      C* out = y.dtype() == dtype_of<C>() ? y.data<C>() + r * f : y_buffer.data();
      Values<C> y_row(out, f);
      y_row = (row - m) * inv_std;
      if (!w.empty()) y_row *= ConstValues<C>(w.data(), f);
      if (!b.empty()) y_row += ConstValues<C>(b.data(), f);
      if (out == y_buffer.data()) convert(out, dtype_of<C>(), bytes_at(y, r * f), y.dtype(), f);
    }
  });
}

template <class C>
void backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
              const LayerNormShape& s, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  const std::int64_t f = s.features;
  const std::vector<C> w = affine_values<C>(weight);
  const C* means = mean.data<C>();
  const C* rstds = rstd.data<C>();
  const Chunks chunks = chunks_of(s.rows, row_grain(s));
  // Each chunk's sums of dy xhat and of dy down its rows, [chunk][feature].
  std::vector<C> partial_w(dweight.defined() ? static_cast<std::size_t>(chunks.count * f) : 0);
  std::vector<C> partial_b(dbias.defined() ? static_cast<std::size_t>(chunks.count * f) : 0);
  for_each_chunk(chunks, [&](std::int64_t chunk, std::int64_t begin, std::int64_t end) {
    Buffer<C> xh(f), g_buffer(f), gw(f), dx_buffer(f);
    for (std::int64_t r = begin; r < end; ++r) {
      convert(bytes_at(x, r * f), x.dtype(), xh.data(), dtype_of<C>(), f);
      xh = (xh - means[r]) * rstds[r];
      const ConstValues<C> g(values_at<C>(dy, r * f, f, g_buffer.data()), f);
      if (!partial_w.empty()) Values<C>(partial_w.data() + chunk * f, f) += g * xh;
      if (!partial_b.empty()) Values<C>(partial_b.data() + chunk * f, f) += g;
      if (!dx.defined()) continue;
      if (w.empty())
        gw = g;
      else
        gw = g * ConstValues<C>(w.data(), f);
      const auto per_feature = static_cast<double>(f);
      const C mean_gw = static_cast<C>(row_sum(f, [&](auto i, auto n) { return gw.segment(i, n).sum(); }) /
                                       per_feature);
      const C mean_gw_xhat = static_cast<C>(
          row_sum(f, [&](auto i, auto n) { return (gw.segment(i, n) * xh.segment(i, n)).sum(); }) / per_feature);
      C* out = dx.dtype() == dtype_of<C>() ? dx.data<C>() + r * f : dx_buffer.data();
      Values<C>(out, f) = rstds[r] * (gw - mean_gw - xh * mean_gw_xhat);
      if (out == dx_buffer.data()) convert(out, dtype_of<C>(), bytes_at(dx, r * f), dx.dtype(), f);
    }
  });
  // The chunks' partial sums, added in chunk order in f64 and rounded once.
  auto combine = [&](const std::vector<C>& partial, Tensor& out) {
    if (partial.empty()) return;
    std::vector<double> total(static_cast<std::size_t>(f), 0.0);
    for (std::int64_t c = 0; c < chunks.count; ++c)
      for (std::int64_t i = 0; i < f; ++i) total[i] += static_cast<double>(partial[c * f + i]);
    convert(total.data(), DType::F64, out.data_ptr(), out.dtype(), f);
  };
  combine(partial_w, dweight);
  combine(partial_b, dbias);
}

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const LayerNormShape& s, Tensor& y,
                        Tensor& mean, Tensor& rstd) {
  if (x.dtype() == DType::F64) return forward<double>(x, weight, bias, s, y, mean, rstd);
  forward<float>(x, weight, bias, s, y, mean, rstd);
}

void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const LayerNormShape& s, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  if (x.dtype() == DType::F64) return backward<double>(dy, x, weight, mean, rstd, s, dx, dweight, dbias);
  backward<float>(dy, x, weight, mean, rstd, s, dx, dweight, dbias);
}

}  // namespace mg::kernels::cpu
