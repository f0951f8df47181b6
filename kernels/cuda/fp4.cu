// FP4 on a GPU: block scales, codes and their decoding (kernels/fp4.h), with kernels/fp4_scale.h's rules,
// the CPU's code (kernels/cpu/fp4.cpp), so the bits are the CPU's. A thread writes one byte of codes (a
// pair of elements, each with its own block's scale) or decodes one element. No FP4 Tensor Core runs
// here (Hopper has none): autograd/fp4.cpp's GEMM decodes into bf16 and runs the bf16 rungs.
// Launch geometry: grid-stride loops, 256 threads a block.
// Tests: build/tests/test_cuda_fp4 (the CPU's bits on the emulator).
#include "kernels/cuda/common.cuh"
#include "kernels/fp4.h"

namespace mg::kernels::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void scales_kernel(const float* block_amax, const float* tensor_amax, std::int64_t n, Fp4Rule rule,
                              std::uint8_t* scales, float* tensor_factor) {
  const float amax = tensor_amax[0];
  for (std::int64_t b = first_index(); b < n; b += grid_stride())
    scales[b] = fp4_block_scale(block_amax[b], amax, rule.format);
  if (first_index() == 0) tensor_factor[0] = fp4_tensor_factor(amax, rule);
}

template <class In>
__global__ void encode_kernel(const In* x, const std::uint8_t* scales, const float* tensor_amax, std::int64_t n,
                              Fp4BlockIndex block_of, Fp4Rule rule, std::uint8_t* codes) {
  const float amax = tensor_amax[0];
  auto code = [&](std::int64_t i) {
    if (i >= n) return std::uint8_t{0};  // the high nibble of an odd tensor's last byte
    const float factor = fp4_encode_factor(scales[block_of(i)], amax, rule);
    return fp4_encode_value(to_float(x[i]), factor, rule, static_cast<std::uint64_t>(i));
  };
  for (std::int64_t k = first_index(); k < (n + 1) / 2; k += grid_stride())
    codes[k] = fp8::pack_codes(code(2 * k), code(2 * k + 1));
}

template <class Out>
__global__ void decode_kernel(const std::uint8_t* codes, const std::uint8_t* scales, std::int64_t n,
                              Fp4BlockIndex block_of, Fp4Format format, Out* out) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    out[i] = from_float<Out>(fp4_decode_value(fp8::load_code(codes, i, DType::E2M1), scales[block_of(i)], format));
}

}  // namespace

void fp4_scales(const Tensor& block_amax, const Tensor& tensor_amax, const Fp4Rule& rule, Tensor& scales,
                Tensor& tensor_factor) {
  mg::cuda::DeviceGuard guard(scales.device().index);
  MG_LAUNCH(scales_kernel, blocks_for(block_amax.numel(), kThreads), kThreads, 0, stream_of(scales))
  (device_ptr<float>(block_amax), device_ptr<float>(tensor_amax), block_amax.numel(), rule,
   device_ptr<std::uint8_t>(scales), device_ptr<float>(tensor_factor));
  MG_CUDA_LAUNCHED();
}

void fp4_encode(const Tensor& x, const Tensor& scales, const Tensor& tensor_amax, Fp8Blocks blocks, const Fp4Rule& rule,
                Tensor& codes) {
  const std::int64_t n = x.numel();
  if (n == 0) return;
  mg::cuda::DeviceGuard guard(codes.device().index);
  visit_device_floating(x.dtype(), "fp4_encode", [&](auto in) {
    using In = decltype(in);
    MG_LAUNCH((encode_kernel<In>), blocks_for((n + 1) / 2, kThreads), kThreads, 0, stream_of(codes))
    (device_ptr<In>(x), device_ptr<std::uint8_t>(scales), device_ptr<float>(tensor_amax), n,
     Fp4BlockIndex(x.shape(), blocks), rule, device_ptr<std::uint8_t>(codes));
    MG_CUDA_LAUNCHED();
  });
}

void fp4_decode(const Fp4Tensor& x, Tensor& out) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  mg::cuda::DeviceGuard guard(out.device().index);
  visit_device_floating(out.dtype(), "fp4_decode", [&](auto zero) {
    using Out = decltype(zero);
    MG_LAUNCH((decode_kernel<Out>), blocks_for(n, kThreads), kThreads, 0, stream_of(out))
    (device_ptr<std::uint8_t>(x.codes), device_ptr<std::uint8_t>(x.scales), n, Fp4BlockIndex(x.codes.shape(), x.blocks),
     x.format, device_ptr<Out>(out));
    MG_CUDA_LAUNCHED();
  });
}

}  // namespace mg::kernels::cuda
