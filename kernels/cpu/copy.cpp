// CPU data movement: casts, permutations and block copies along a dim (kernels/copy.h).
// Bytes are moved without arithmetic, so these kernels work for every dtype. Casts and permutations
// are cut into chunks of elements (rows) for the thread pool.
// Run their tests: build/tests/test_ops_shape.
#include <cstring>

#include "kernels/copy.h"
#include "kernels/cpu/compute_type.h"

namespace mg::kernels::cpu {

void cast(const Tensor& x, Tensor& out) {
  convert_parallel(x.data_ptr(), x.dtype(), out.data_ptr(), out.dtype(), x.numel());
}

namespace {

// out's last dim, gathered from x with a stride: one typed loop per row (a memcpy per element would
// cost a call each). Bits is an unsigned integer of the element's size: a permute only moves bytes.
template <class Bits>
void gather_row(const char* src, std::int64_t stride, std::int64_t count, char* dst) {
  const auto* from = reinterpret_cast<const Bits*>(src);
  auto* to = reinterpret_cast<Bits*>(dst);
  for (std::int64_t i = 0; i < count; ++i) to[i] = from[i * stride];
}

}  // namespace

void permute(const Tensor& x, const std::vector<int>& perm, Tensor& out) {
  if (out.numel() == 0) return;
  const std::size_t rank = perm.size();
  const std::size_t element = dtype_size(x.dtype());
  // x's stride for each dim of out: stepping out's dim d steps x's dim perm[d].
  std::vector<std::int64_t> x_stride(rank), source_stride(rank);
  for (std::size_t d = rank, stride = 1; d-- > 0; stride *= static_cast<std::size_t>(x.shape()[d]))
    x_stride[d] = static_cast<std::int64_t>(stride);
  for (std::size_t d = 0; d < rank; ++d) source_stride[d] = x_stride[static_cast<std::size_t>(perm[d])];

  // Row by row over out's last dim: whole rows are contiguous in x when the last dim stays last
  // (one memcpy), strided otherwise (one typed loop).
  const bool rows_contiguous = rank > 0 && perm.back() == static_cast<int>(rank) - 1;
  const std::int64_t row = rank > 0 ? out.shape().back() : 1;
  const std::int64_t row_stride = rank > 0 ? source_stride.back() : 1;
  const std::size_t outer_rank = rank > 0 ? rank - 1 : 0;

  const auto* src = static_cast<const char*>(x.data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  // Rows [begin, end) of out; the thread pool takes chunks of rows (each row is written once).
  auto copy_rows = [&](std::int64_t begin, std::int64_t end) {
    std::vector<std::int64_t> index(outer_rank, 0);
    std::int64_t source = 0;
    for (std::int64_t d = static_cast<std::int64_t>(outer_rank) - 1, rest = begin; d >= 0; --d) {
      index[d] = rest % out.shape()[d];
      rest /= out.shape()[d];
      source += index[d] * source_stride[d];
    }
    for (std::int64_t r = begin; r < end; ++r) {
      const char* from = src + static_cast<std::size_t>(source) * element;
      char* to = dst + static_cast<std::size_t>(r * row) * element;
      if (rows_contiguous)
        std::memcpy(to, from, static_cast<std::size_t>(row) * element);
      else if (element == 2)
        gather_row<std::uint16_t>(from, row_stride, row, to);
      else if (element == 4)
        gather_row<std::uint32_t>(from, row_stride, row, to);
      else
        gather_row<std::uint64_t>(from, row_stride, row, to);
      for (std::size_t d = outer_rank; d-- > 0;) {  // odometer over out's outer dims
        source += source_stride[d];
        if (++index[d] < out.shape()[d]) break;
        source -= source_stride[d] * out.shape()[d];
        index[d] = 0;
      }
    }
  };
  parallel_for(out.numel() / row, std::max<std::int64_t>(1, kConvertGrain / row), copy_rows);
}

void copy_along_dim(const Tensor& src, std::int64_t src_start, Tensor& dst, std::int64_t dst_start, int dim,
                    std::int64_t length) {
  const auto d = static_cast<std::size_t>(dim);
  const DType dtype = src.dtype();
  const std::int64_t outer = product(src.shape(), 0, d);
  const std::int64_t inner = product(src.shape(), d + 1, src.shape().size());
  const std::int64_t src_dim = src.shape()[d], dst_dim = dst.shape()[d];
  const auto* from = static_cast<const char*>(src.data_ptr());
  auto* to = static_cast<char*>(dst.data_ptr());
  // Offsets in elements, made bytes by dtype_bytes: a block of a packed dtype (E2M1) that would start
  // or end inside a byte is an error there.
  const std::size_t block = dtype_bytes(dtype, length * inner);
  if (block == 0) return;
  for (std::int64_t o = 0; o < outer; ++o) {
    std::memcpy(to + dtype_bytes(dtype, (o * dst_dim + dst_start) * inner),
                from + dtype_bytes(dtype, (o * src_dim + src_start) * inner), block);
  }
}

}  // namespace mg::kernels::cpu
