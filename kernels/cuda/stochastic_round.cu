// CUDA stochastic rounding (kernels/stochastic_round.h): thread i rounds element i with Philox word i
// (core/stochastic_round.h, the CPU's code), so the result is the CPU's bit for bit. E2M1 codes are two
// a byte: a thread rounds a pair and writes its byte.
// Launch geometry: a grid-stride loop over the elements (pairs for E2M1), 256 threads a block.
// Tests: build/tests/test_cuda_stochastic_round.
#include "kernels/cuda/common.cuh"
#include "kernels/stochastic_round.h"

namespace mg::kernels::cuda {

namespace {

constexpr int kThreads = 256;

// The rounded value (a value of kFormat, exactly) stored as kFormat: a code or a 16-bit float.
template <DType kFormat>
__device__ float rounded(const float* x, std::int64_t i, const stochastic::RoundingStream& stream) {
  return stochastic::stochastic_round(x[i], kFormat, stochastic::rounding_word(stream, static_cast<std::uint64_t>(i)));
}

template <DType kFormat, class T>
__global__ void stochastic_round_kernel(const float* x, T* out, std::int64_t n, stochastic::RoundingStream stream) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    out[i] = from_float<T>(rounded<kFormat>(x, i, stream));
}

template <DType kFormat>
__global__ void stochastic_codes_kernel(const float* x, std::uint8_t* codes, std::int64_t n,
                                        stochastic::RoundingStream stream) {
  constexpr fp8::Overflow kSaturate = fp8::Overflow::Saturate;
  if constexpr (kFormat == DType::E2M1) {
    for (std::int64_t k = first_index(); k < n / 2; k += grid_stride())
      codes[k] = fp8::pack_codes(fp8::encode(rounded<kFormat>(x, 2 * k, stream), kFormat, kSaturate),
                                 fp8::encode(rounded<kFormat>(x, 2 * k + 1, stream), kFormat, kSaturate));
  } else {
    for (std::int64_t i = first_index(); i < n; i += grid_stride())
      codes[i] = fp8::encode(rounded<kFormat>(x, i, stream), kFormat, kSaturate);
  }
}

template <DType kFormat>
void launch_codes(const Tensor& x, Tensor& out, std::int64_t n, const stochastic::RoundingStream& stream) {
  MG_LAUNCH((stochastic_codes_kernel<kFormat>), blocks_for(n, kThreads), kThreads, 0, stream_of(out))
  (device_ptr<const float>(x), device_ptr<std::uint8_t>(out), n, stream);
}

template <DType kFormat, class T>
void launch_values(const Tensor& x, Tensor& out, std::int64_t n, const stochastic::RoundingStream& stream) {
  MG_LAUNCH((stochastic_round_kernel<kFormat, T>), blocks_for(n, kThreads), kThreads, 0, stream_of(out))
  (device_ptr<const float>(x), device_ptr<T>(out), n, stream);
}

}  // namespace

void stochastic_round(const Tensor& x, Tensor& out, const stochastic::RoundingStream& stream) {
  const std::int64_t n = x.numel();
  if (n == 0) return;
  mg::cuda::DeviceGuard guard(out.device().index);
  // The formats rounds_to() takes, a closed set (the entry point has checked out's dtype).
  const DType format = out.dtype();
  if (format == DType::F16)
    launch_values<DType::F16, __half>(x, out, n, stream);
  else if (format == DType::BF16)
    launch_values<DType::BF16, bf16>(x, out, n, stream);
  else if (format == DType::E4M3)
    launch_codes<DType::E4M3>(x, out, n, stream);
  else if (format == DType::E5M2)
    launch_codes<DType::E5M2>(x, out, n, stream);
  else if (format == DType::E2M1)
    launch_codes<DType::E2M1>(x, out, n, stream);
  else
    throw Error(fmt::format("CUDA kernel stochastic_round: no kernel for {} output", format));
  MG_CUDA_LAUNCHED();
}

}  // namespace mg::kernels::cuda
