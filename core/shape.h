// Shape: the sizes of a tensor's dimensions, outermost first (row-major). {} is a scalar.
// fmt prints a Shape as [2, 3].
#pragma once

#include <cstdint>
#include <vector>

namespace mg {

using Shape = std::vector<std::int64_t>;

std::int64_t numel(const Shape& shape);  // product of the sizes; 1 for a scalar

// Checks that a shape can describe a tensor: no negative size, and few enough elements that their
// bytes fit in 63 bits (at most 2^60 elements). Throws naming `op` otherwise.
void check_shape(const Shape& shape, const char* op);

// Turns a possibly negative dim (-1 is the last) into 0..rank-1; an error naming `op` otherwise
// (a 0-d tensor has no dims at all).
int normalize_dim(std::int64_t dim, std::size_t rank, const char* op);

// NumPy broadcasting: shapes are aligned at their last dims; each pair of sizes must be equal or
// one of them 1. Returns the result shape or throws naming `op`, both shapes and the clashing dim.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Product of the sizes in [begin, end); an mg::Error if it overflows 64 bits.
std::int64_t product(const Shape& shape, std::size_t begin, std::size_t end);

}  // namespace mg
