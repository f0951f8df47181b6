// CPU elementwise kernels: out = f(inputs...) with NumPy broadcasting, for one, two or three inputs.
//
// How the loop works (one function, elementwise_loop, serves every op):
//   1. Plan (kernels/loop_plan.h, shared with the CUDA kernel): each input gets a stride per output
//      dim (0 where it is broadcast), and dims contiguous for every operand are merged, so same-shape
//      ops become one flat loop and a bias add becomes [rows] x [cols] with the bias's row stride 0.
//   2. Rows of the plan (or, for one flat row, its elements) are cut into chunks for the thread pool.
//   3. The innermost dim is walked in chunks of kElementwiseChunk elements. Each input chunk is converted to
//      the compute type C (f32, or f64 for f64) into a small buffer (a broadcast input is filled
//      with its single value), the functor runs over plain arrays, which the compiler vectorises
//      (exp, log, tanh, sigmoid and GELU call their vectorised float twins in vector_math.h), and
//      the result chunk is rounded to out's dtype on store.
// Run its tests: build/tests/test_ops_elementwise.
#include <array>
#include <cassert>
#include <type_traits>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/elementwise_table.h"
#include "kernels/loop_plan.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_math.h"

namespace mg::kernels::cpu {

namespace {

constexpr std::int64_t kElementwiseChunk = 256;  // elements per buffer: 4 buffers of f64 stay within 8 KiB of L1
constexpr std::int64_t kElementwiseGrain = 32 * 1024;  // elements per chunk of the thread pool (parallel.h)

// Converts `count` elements of an operand into the compute-type buffer. A broadcast operand
// (stride 0) repeats its single element.
template <class C>
void load_chunk(const char* base, DType dtype, std::int64_t stride, std::int64_t count, C* buffer) {
  if (stride == 0) {
    C value;
    convert(base, dtype, &value, dtype_of<C>(), 1);
    for (std::int64_t i = 0; i < count; ++i) buffer[i] = value;
  } else {
    convert(base, dtype, buffer, dtype_of<C>(), count);
  }
}

// The functors whose math has a vectorised float twin (kernels/cpu/vector_math.h): runs it over a
// chunk and returns true; false for every other functor and for f64, which loop over the scalar one.
template <class F, class C, std::size_t N>
bool vectorised(const F&, const std::array<const C*, N>& x, C* y, std::int64_t count) {
  if constexpr (std::is_same_v<C, float> && N == 1) {
    if constexpr (std::is_same_v<F, functors::Exp>) return vector_math::exp(x[0], y, count), true;
    if constexpr (std::is_same_v<F, functors::Log>) return vector_math::log(x[0], y, count), true;
    if constexpr (std::is_same_v<F, functors::Tanh>) return vector_math::tanh(x[0], y, count), true;
    if constexpr (std::is_same_v<F, functors::Sigmoid>) return vector_math::sigmoid(x[0], y, count), true;
    if constexpr (std::is_same_v<F, functors::Gelu>) return vector_math::gelu(x[0], y, count), true;
  }
  if constexpr (std::is_same_v<C, float> && N == 2 && std::is_same_v<F, functors::Backward<functors::Gelu>>)
    return vector_math::gelu_grad(x[0], x[1], y, count), true;
  return false;
}

// out = f(inputs...) elementwise; C is the compute type.
template <class C, std::size_t N, class F>
void elementwise_loop(Tensor& out, const std::array<const Tensor*, N>& inputs, const F& f) {
  if (out.numel() == 0) return;
  LoopPlan<N> plan = make_plan(out.shape(), inputs);
  const std::size_t rank = plan.sizes.size();
  const std::int64_t inner = plan.sizes.back();
  const auto& inner_stride = plan.strides.back();

  std::array<char*, N + 1> base{};
  std::array<std::size_t, N + 1> element_size{};
  base[0] = static_cast<char*>(out.data_ptr());
  element_size[0] = dtype_size(out.dtype());
  for (std::size_t k = 0; k < N; ++k) {
    base[k + 1] = static_cast<char*>(inputs[k]->data_ptr());
    element_size[k + 1] = dtype_size(inputs[k]->dtype());
  }

  // Rows [row_begin, row_end), and of each row the elements [inner_begin, inner_end).
  auto run_range = [&](std::int64_t row_begin, std::int64_t row_end, std::int64_t inner_begin, std::int64_t inner_end) {
    alignas(64) C in[N][kElementwiseChunk];
    alignas(64) C result[kElementwiseChunk];
    std::vector<std::int64_t> index(rank, 0);  // odometer over the outer dims
    std::array<std::int64_t, N + 1> offset{};  // element offset of the current row per operand
    for (std::int64_t d = static_cast<std::int64_t>(rank) - 2, rest = row_begin; d >= 0; --d) {
      index[d] = rest % plan.sizes[d];
      rest /= plan.sizes[d];
      for (std::size_t k = 0; k <= N; ++k) offset[k] += index[d] * plan.strides[d][k];
    }
    for (std::int64_t row = row_begin; row < row_end; ++row) {
      for (std::int64_t start = inner_begin; start < inner_end; start += kElementwiseChunk) {
        std::int64_t count = std::min(kElementwiseChunk, inner_end - start);
        // An operand already in the compute type and contiguous is read (or, for out, written) in
        // place; the others go through the buffers.
        std::array<const C*, N> x{};
        for (std::size_t k = 0; k < N; ++k) {
          const char* ptr = base[k + 1] + (offset[k + 1] + start * inner_stride[k + 1]) * element_size[k + 1];
          if (inputs[k]->dtype() == dtype_of<C>() && inner_stride[k + 1] == 1) {
            x[k] = reinterpret_cast<const C*>(ptr);
          } else {
            load_chunk<C>(ptr, inputs[k]->dtype(), inner_stride[k + 1], count, in[k]);
            x[k] = in[k];
          }
        }
        char* target = base[0] + (offset[0] + start) * element_size[0];
        C* y = out.dtype() == dtype_of<C>() ? reinterpret_cast<C*>(target) : result;
        if (!vectorised(f, x, y, count)) {
          for (std::int64_t i = 0; i < count; ++i) {
            if constexpr (N == 1)
              y[i] = f(x[0][i]);
            else if constexpr (N == 2)
              y[i] = f(x[0][i], x[1][i]);
            else
              y[i] = f(x[0][i], x[1][i], x[2][i]);
          }
        }
        if (y == result) convert(result, dtype_of<C>(), target, out.dtype(), count);
      }
      // Advance the odometer over the outer dims (all but the last).
      for (std::size_t d = rank - 1; d-- > 0;) {
        for (std::size_t k = 0; k <= N; ++k) offset[k] += plan.strides[d][k];
        if (++index[d] < plan.sizes[d]) break;
        for (std::size_t k = 0; k <= N; ++k) offset[k] -= plan.strides[d][k] * plan.sizes[d];
        index[d] = 0;
      }
    }
  };
  // The thread pool takes chunks of rows, or of the one row's elements (a same-shape op is one flat
  // row); every element is computed alone, so the chunks do not change the results.
  const std::int64_t rows = out.numel() / inner;
  if (rows == 1) {
    parallel_for(inner, kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) { run_range(0, 1, begin, end); });
  } else {
    parallel_for(rows, std::max<std::int64_t>(1, kElementwiseGrain / inner),
                 [&](std::int64_t begin, std::int64_t end) { run_range(begin, end, 0, inner); });
  }
}

// Runs the loop with the compute type of out's dtype.
template <std::size_t N, class F>
void run(Tensor& out, const std::array<const Tensor*, N>& inputs, const F& f, const char* op) {
  for (const Tensor* input : inputs) assert(input->device() == out.device() && input->dim() <= out.dim());
  visit_floating(out.dtype(), op, [&](auto zero) {
    using C = compute_t<decltype(zero)>;
    elementwise_loop<C>(out, inputs, f);
  });
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, Tensor& out, Scalars s) {
  visit_unary(op, s, [&](auto f, const char* name) { run(out, std::array<const Tensor*, 1>{&x}, f, name); });
}

void unary_grad(UnaryOp op, const Tensor& g, const Tensor& saved, Tensor& dx, Scalars s) {
  visit_unary_grad(op, s, [&](auto f, const char* name) {
    run(dx, std::array<const Tensor*, 2>{&g, &saved}, f, name);
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  visit_binary(op, [&](auto f, const char* name) { run(out, std::array<const Tensor*, 2>{&a, &b}, f, name); });
}

void ternary(TernaryOp op, const Tensor& x, const Tensor& y, const Tensor& z, Tensor& out) {
  visit_ternary(op, [&](auto f, const char* name) { run(out, std::array<const Tensor*, 3>{&x, &y, &z}, f, name); });
}

}  // namespace mg::kernels::cpu
