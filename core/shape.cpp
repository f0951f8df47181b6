#include "core/shape.h"

#include <algorithm>

#include "core/error.h"

namespace mg {

std::int64_t product(const Shape& shape, std::size_t begin, std::size_t end) {
  std::int64_t result = 1;
  for (std::size_t i = begin; i < end; ++i)
    MG_CHECK(!__builtin_mul_overflow(result, shape[i], &result), "shape {}: the number of elements overflows 64 bits",
             shape);
  return result;
}

std::int64_t numel(const Shape& shape) { return product(shape, 0, shape.size()); }

void check_shape(const Shape& shape, const char* op) {
  for (std::int64_t size : shape) MG_CHECK(size >= 0, "{}: negative size in shape {}", op, shape);
  std::int64_t count = 1;
  bool overflow = false;
  for (std::int64_t size : shape) overflow = overflow || __builtin_mul_overflow(count, size, &count);
  MG_CHECK(!overflow && count <= (std::int64_t{1} << 60), "{}: shape {} has too many elements for memory", op, shape);
}

int normalize_dim(std::int64_t dim, std::size_t rank, const char* op) {
  auto r = static_cast<std::int64_t>(rank);
  MG_CHECK(rank > 0, "{}: the tensor is 0-d (a scalar) and has no dim {}; reshape it to [1] first", op, dim);
  MG_CHECK(dim >= -r && dim < r, "{}: dim {} is out of range for a tensor with {} dims (use -{}..{})", op, dim, rank,
           rank, r - 1);
  return static_cast<int>(dim < 0 ? dim + r : dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (std::size_t i = 0; i < rank; ++i) {  // i counts from the last dim
    std::int64_t sa = i < a.size() ? a[a.size() - 1 - i] : 1;
    std::int64_t sb = i < b.size() ? b[b.size() - 1 - i] : 1;
    MG_CHECK(sa == sb || sa == 1 || sb == 1,
             "{}: shapes {} and {} cannot be broadcast (dim -{}: {} vs {}); sizes must match or be 1", op, a, b, i + 1,
             sa, sb);
    out[rank - 1 - i] = sa == 1 ? sb : sa;
  }
  return out;
}

}  // namespace mg
