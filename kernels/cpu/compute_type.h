// Working in the compute type C (f32, f64 for f64) on tensors that may hold f16/bf16: the CPU
// kernels' one way to read a tensor as C (widened once, F16C for f16; no copy when it already
// holds C) and to write results back rounded once.
//
//   bytes_at(t, start)                 the address of element `start` of a contiguous tensor
//   values_at<C>(t, start, n, buffer)  n values from `start` as C: t's memory, or converted into buffer
//   widened<C>(t)                      the whole tensor as C: t itself, or one converted copy
//
// Accumulator: the scatter-add kernels' f32 sum (col2im, pooling backward, the embedding gradient).
//
// A scatter adds many values into one element (a pixel read by 9 windows, a token seen 1000 times);
// adding them in f16 would round after every addition. So the sums are kept in the compute type C
// (f32, f64 for f64) and rounded into the output once. An output already of type C is its own
// accumulator: no extra buffer, no final copy.
//
//   Accumulator<C> sum(dx);          // zeroed
//   sum.data()[i] += value;
//   sum.store();                     // dx = round(sum)
//
// With zero = false it is just the C-typed place a kernel writes its results before one rounding
// pass (pooling's forward): not zeroed, since every element is written.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/convert.h"
#include "core/tensor.h"
#include "kernels/cpu/parallel.h"

namespace mg::kernels::cpu {

inline char* bytes_at(const Tensor& t, std::int64_t start) {
  return static_cast<char*>(t.data_ptr()) + dtype_bytes(t.dtype(), start);
}

template <class C>
C* values_at(const Tensor& t, std::int64_t start, std::int64_t n, C* buffer) {
  if (t.dtype() == dtype_of<C>()) return reinterpret_cast<C*>(bytes_at(t, start));
  convert(bytes_at(t, start), t.dtype(), buffer, dtype_of<C>(), n);
  return buffer;
}

// convert() of n elements, cut into chunks for the thread pool: each element converts alone, so the
// chunks change nothing in the result. Chunks are cut in groups that fill whole bytes (E2M1's pairs).
constexpr std::int64_t kConvertGrain = 32 * 1024;
inline void convert_parallel(const void* src, DType from, void* dst, DType to, std::int64_t n) {
  const std::int64_t group = std::max(packed_group(from), packed_group(to));
  (void)dtype_bytes(from, n), (void)dtype_bytes(to, n);  // a packed count that ends inside a byte: an error
  parallel_for(n / group, kConvertGrain / group, [&](std::int64_t begin, std::int64_t end) {
    convert(static_cast<const char*>(src) + dtype_bytes(from, begin * group), from,
            static_cast<char*>(dst) + dtype_bytes(to, begin * group), to, (end - begin) * group);
  });
}

template <class C>
Tensor widened(const Tensor& t) {
  if (t.dtype() == dtype_of<C>()) return t;
  Tensor copy = Tensor::empty(t.shape(), {.dtype = dtype_of<C>()});
  convert_parallel(t.data_ptr(), t.dtype(), copy.data_ptr(), dtype_of<C>(), t.numel());
  return copy;
}

template <class C>
class Accumulator {
 public:
  explicit Accumulator(Tensor& out, bool zero = true)
      : out_(out), sum_(out.dtype() == dtype_of<C>() ? out : Tensor::empty(out.shape(), {.dtype = dtype_of<C>()})) {
    if (zero && sum_.numel() > 0) {  // all-zero bits are 0.0; in chunks for the thread pool
      parallel_for(static_cast<std::int64_t>(sum_.nbytes()), 4 * kConvertGrain,
                   [&](std::int64_t begin, std::int64_t end) {
                     std::memset(static_cast<char*>(sum_.data_ptr()) + begin, 0, static_cast<std::size_t>(end - begin));
                   });
    }
  }
  C* data() { return sum_.data<C>(); }
  // Rounds the sums into the output (nothing to do when the output was the accumulator).
  void store() {
    if (!sum_.shares_storage_with(out_))
      convert_parallel(sum_.data_ptr(), dtype_of<C>(), out_.data_ptr(), out_.dtype(), out_.numel());
  }

 private:
  Tensor& out_;
  Tensor sum_;
};

}  // namespace mg::kernels::cpu
