// Reductions along one dim. The input is viewed as [outer, n, inner] (dims before, the reduced
// dim, dims after); the output has outer * inner elements.
//
// Accumulation is in f32 (f64 for f64) whatever the input dtype; the result is rounded once into
// out's dtype, which may differ from the input's (an f32 `out` keeps an f16 sum exact). Sums are
// pairwise (short runs in order, then a tree), so each term meets about log2(n) roundings: the error
// stays within about log2(n) eps of sum |x|, where a running sum's grows with n.
// Max propagates NaN and writes, when `indices` is given (i32), the position of the first maximum.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/backends.h"

namespace mg::kernels {

// Along a dimension here; across processes in dist/ (process_group.h), the same enum.
enum class ReduceOp : std::uint8_t { Sum, Mean, Max };

struct ReduceShape {
  std::int64_t outer = 1, n = 1, inner = 1;
};

MG_KERNELS(void reduce(ReduceOp op, const Tensor& x, const ReduceShape& shape, Tensor& out, Tensor* indices = nullptr);)

}  // namespace mg::kernels
