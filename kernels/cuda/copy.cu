// CUDA data movement (kernels/copy.h): casts, dim permutations, block copies along a dim, and the
// fill that the factories use (core/device_ops.h). No arithmetic, so results are bit-identical to
// the CPU's: casts round to nearest even with subnormals kept, integers saturate (common.cuh, convert).
//
// Launch geometry: grid-stride loops, 256 threads a block.
//   cast     4 elements per thread with vector loads and stores when both pointers are aligned
//   permute  one thread per element of out, decomposing its index over out's dims (at most 8)
//   fill     one thread per element, writing the element's bit pattern
// copy_along_dim needs no kernel: a block of `length` rows along `dim` is, for each of the `outer`
// slices before it, one contiguous run of bytes, so the whole copy is one cudaMemcpy2DAsync (one
// cudaMemcpyAsync when the runs touch, and one per run for pitches beyond the 2-D copy's limit).
// Casts to and from codes (FP8, E2M1, E8M0) decode and encode with core/fp8.h, the CPU's codec.
// Tests: build/tests/test_cuda_ops, test_cuda_fp4 (codes). Benchmark: build/bench/cuda_memory (cast).
#include <algorithm>

#include "core/fp8.h"
#include "kernels/copy.h"
#include "kernels/cuda/common.cuh"

namespace mg::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxDims = 8;

template <class From, class To>
__global__ void cast_kernel(const From* x, To* out, std::int64_t n, bool vectorized) {
  std::int64_t done = 0;
  if (vectorized) {
    const std::int64_t packs = n / kPack;
    for (std::int64_t p = first_index(); p < packs; p += grid_stride()) {
      const Pack<From> in = reinterpret_cast<const Pack<From>*>(x)[p];
      Pack<To> result;
      for (int j = 0; j < kPack; ++j) result.v[j] = convert<To>(in.v[j]);
      reinterpret_cast<Pack<To>*>(out)[p] = result;
    }
    done = packs * kPack;
  }
  for (std::int64_t i = done + first_index(); i < n; i += grid_stride()) out[i] = convert<To>(x[i]);
}

// A cast that reads or writes codes (core/fp8.h: FP8, E2M1, E8M0), element by element through f32 as
// the CPU's convert() does, with the format's own overflow rule (Overflow::NonFinite); `from` and `to`
// name the coded side's format. A thread takes `group` elements (2 where E2M1 packs them in a byte).
// Code is the type of a coded side (its bytes); the other side is f32, f16 or bf16's device type.
struct Code {
  std::uint8_t bits;
};

template <class From>
__device__ float cast_source(const From* x, std::int64_t i, DType from) {
  if constexpr (std::is_same_v<From, Code>)
    return fp8::decode(fp8::load_code(reinterpret_cast<const std::uint8_t*>(x), i, from), from);
  else
    return to_float(x[i]);
}

template <class From, class To>
__global__ void coded_cast_kernel(const From* x, To* out, DType from, DType to, std::int64_t n, int group) {
  constexpr fp8::Overflow kRule = fp8::Overflow::NonFinite;
  for (std::int64_t g = first_index(); g < n / group; g += grid_stride()) {
    const std::int64_t i = g * group;
    if constexpr (!std::is_same_v<To, Code>) {
      for (int j = 0; j < group; ++j) out[i + j] = from_float<To>(cast_source(x, i + j, from));
    } else if (to == DType::E2M1) {
      reinterpret_cast<std::uint8_t*>(out)[g] = fp8::pack_codes(fp8::encode(cast_source(x, i, from), to, kRule),
                                                                fp8::encode(cast_source(x, i + 1, from), to, kRule));
    } else {
      for (int j = 0; j < group; ++j) out[i + j].bits = fp8::encode(cast_source(x, i + j, from), to, kRule);
    }
  }
}

// Calls fn(T{}) with the type of one side of a coded cast: Code, or f32, f16 and bf16's device types
// (what a coded value is made from or read into; a GPU has no f64, and integers go through f32 first).
template <class Fn>
void visit_coded_side(DType dtype, Fn&& fn) {
  if (is_coded(dtype)) return fn(Code{});
  if (dtype == DType::F32) return fn(float{});
  if (dtype == DType::F16) return fn(__half{});
  if (dtype == DType::BF16) return fn(bf16{});
  throw Error(fmt::format("CUDA kernel cast: {} to or from codes runs through f32, f16 or bf16 on a GPU; cast the {} "
                          "tensor to f32 first (x.to(DType::F32))",
                          dtype, dtype));
}

// out[i] = x[sum_d index_d(i) * source_stride[d]], with index_d(i) i's coordinates in out's shape.
struct PermutePlan {
  int rank = 0;
  std::int64_t out_sizes[kMaxDims] = {};
  std::int64_t source_stride[kMaxDims] = {};
};

template <class Bits>
__global__ void permute_kernel(const Bits* x, Bits* out, PermutePlan plan, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    std::int64_t rest = i, offset = 0;
    for (int d = plan.rank - 1; d >= 0; --d) {
      offset += (rest % plan.out_sizes[d]) * plan.source_stride[d];
      rest /= plan.out_sizes[d];
    }
    out[i] = x[offset];
  }
}

template <class Bits>
__global__ void fill_kernel(Bits* out, Bits pattern, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) out[i] = pattern;
}

// Calls fn(Bits{}) with an unsigned integer as wide as one element: moving bytes needs no dtype.
// GPU dtypes are 1 (FP8, u8, bool), 2, 4 or 8 (i64) bytes; f64 never gets here (to_device refuses it).
template <class Fn>
void visit_bits(DType dtype, const char* kernel, Fn&& fn) {
  switch (dtype_size(dtype)) {
    case 1:
      return fn(std::uint8_t{});
    case 2:
      return fn(std::uint16_t{});
    case 4:
      return fn(std::uint32_t{});
    case 8:
      return fn(std::uint64_t{});
    default:
      break;
  }
  throw Error(fmt::format("CUDA kernel {}: no kernel for {} tensors", kernel, dtype));
}

// Calls fn(T{}) with the device type a cast reads or writes: the compute dtypes' (visit_device_dtype)
// and the storage-only integers' (i64, u8, bool), which a cast is the one kernel to touch.
template <class Fn>
void visit_cast_type(DType dtype, Fn&& fn) {
  if (dtype == DType::I64) return fn(std::int64_t{});
  if (dtype == DType::U8) return fn(std::uint8_t{});
  if (dtype == DType::BOOL) return fn(bool{});
  return visit_device_dtype(dtype, "cast", std::forward<Fn>(fn));
}

}  // namespace

void cast(const Tensor& x, Tensor& out) {
  const std::int64_t n = x.numel();
  if (n == 0) return;
  mg::cuda::DeviceGuard guard(out.device().index);
  if (is_coded(x.dtype()) || is_coded(out.dtype())) {
    const int group = static_cast<int>(std::max(packed_group(x.dtype()), packed_group(out.dtype())));
    visit_coded_side(x.dtype(), [&](auto from_zero) {
      using From = decltype(from_zero);
      visit_coded_side(out.dtype(), [&](auto to_zero) {
        using To = decltype(to_zero);
        MG_LAUNCH((coded_cast_kernel<From, To>), blocks_for(n / group, kThreads), kThreads, 0, stream_of(out))
        (device_ptr<const From>(x), device_ptr<To>(out), x.dtype(), out.dtype(), n, group);
      });
    });
    MG_CUDA_LAUNCHED();
    return;
  }
  visit_cast_type(x.dtype(), [&](auto from_zero) {
    using From = decltype(from_zero);
    visit_cast_type(out.dtype(), [&](auto to_zero) {
      using To = decltype(to_zero);
      const bool vectorized = aligned(x.data_ptr(), sizeof(Pack<From>)) && aligned(out.data_ptr(), sizeof(Pack<To>));
      MG_LAUNCH(cast_kernel, blocks_for((n + kPack - 1) / kPack, kThreads), kThreads, 0, stream_of(out))
      (device_ptr<const From>(x), device_ptr<To>(out), n, vectorized);
    });
  });
  MG_CUDA_LAUNCHED();
}

void permute(const Tensor& x, const std::vector<int>& perm, Tensor& out) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  const std::size_t rank = perm.size();
  MG_CHECK(rank <= static_cast<std::size_t>(kMaxDims), "CUDA kernel permute: {} dims, more than the {} it takes", rank,
           kMaxDims);
  PermutePlan plan;
  plan.rank = static_cast<int>(rank);
  std::int64_t x_stride[kMaxDims] = {};
  for (std::size_t d = rank, stride = 1; d-- > 0;) {
    x_stride[d] = static_cast<std::int64_t>(stride);
    stride *= static_cast<std::size_t>(x.shape()[d]);
  }
  // Stepping out's dim d steps x's dim perm[d].
  for (std::size_t d = 0; d < rank; ++d) {
    plan.out_sizes[d] = out.shape()[d];
    plan.source_stride[d] = x_stride[static_cast<std::size_t>(perm[d])];
  }
  mg::cuda::DeviceGuard guard(out.device().index);
  visit_bits(out.dtype(), "permute", [&](auto zero) {
    using Bits = decltype(zero);
    MG_LAUNCH(permute_kernel, blocks_for(n, kThreads), kThreads, 0, stream_of(out))
    (device_ptr<const Bits>(x), device_ptr<Bits>(out), plan, n);
  });
  MG_CUDA_LAUNCHED();
}

void copy_along_dim(const Tensor& src, std::int64_t src_start, Tensor& dst, std::int64_t dst_start, int dim,
                    std::int64_t length) {
  const auto d = static_cast<std::size_t>(dim);
  std::int64_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < d; ++i) outer *= src.shape()[i];
  for (std::size_t i = d + 1; i < src.shape().size(); ++i) inner *= src.shape()[i];
  // Byte counts from element counts (dtype_bytes refuses a packed block that ends inside a byte).
  const DType dtype = src.dtype();
  const std::size_t width = dtype_bytes(dtype, length * inner);
  if (width == 0 || outer == 0) return;
  // One row per outer slice: `width` bytes at the start offset, rows a whole slice of each tensor apart.
  const std::size_t src_pitch = dtype_bytes(dtype, src.shape()[d] * inner);
  const std::size_t dst_pitch = dtype_bytes(dtype, dst.shape()[d] * inner);
  const auto* from = static_cast<const char*>(src.data_ptr()) + dtype_bytes(dtype, src_start * inner);
  auto* to = static_cast<char*>(dst.data_ptr()) + dtype_bytes(dtype, dst_start * inner);
  mg::cuda::DeviceGuard guard(dst.device().index);
  const cudaStream_t stream = stream_of(dst);
  if (outer == 1 || (src_pitch == width && dst_pitch == width)) {  // one contiguous run
    MG_CUDA_CHECK(cudaMemcpyAsync(to, from, width * static_cast<std::size_t>(outer), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  // A 2-D copy refuses pitches above the device's limit (2^31 - 1 bytes on current GPUs); rows that
  // long are few (outer * pitch fits in memory), so they go one cudaMemcpyAsync each.
  int max_pitch = 0;
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, dst.device().index));
  if (std::max(src_pitch, dst_pitch) > static_cast<std::size_t>(max_pitch)) {
    for (std::size_t o = 0; o < static_cast<std::size_t>(outer); ++o)
      MG_CUDA_CHECK(cudaMemcpyAsync(to + o * dst_pitch, from + o * src_pitch, width, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  MG_CUDA_CHECK(cudaMemcpy2DAsync(to, dst_pitch, from, src_pitch, width, static_cast<std::size_t>(outer),
                                  cudaMemcpyDeviceToDevice, stream));
}

void fill(void* dst, Device device, DType dtype, std::uint32_t pattern, std::int64_t count) {
  if (count == 0) return;
  mg::cuda::DeviceGuard guard(device.index);
  const cudaStream_t stream = mg::cuda::stream(device.index);
  visit_bits(dtype, "fill", [&](auto zero) {
    using Bits = decltype(zero);
    MG_LAUNCH(fill_kernel, blocks_for(count, kThreads), kThreads, 0, stream)
    (static_cast<Bits*>(dst), static_cast<Bits>(pattern), count);
  });
  MG_CUDA_LAUNCHED();
}

}  // namespace mg::kernels::cuda
