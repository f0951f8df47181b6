// FP4 on a GPU: block scales, codes and their decoding (kernels/fp4.h), with kernels/fp4_scale.h's rules,
// the CPU's code (kernels/cpu/fp4.cpp), so the bits are the CPU's. A thread writes one byte of codes (a
// pair of elements, each with its own block's scale) or decodes one element. No FP4 Tensor Core runs
// here (Hopper has none): fp4_gemm decodes into bf16 inside rung 3's copies (gemm_mma.cu), or by a pass
// of its own where rung 3 does not take the operands (fp4_gemm_decoded).
// Launch geometry: grid-stride loops, 256 threads a block.
// Tests: build/tests/test_cuda_fp4 (the CPU's bits on the emulator).
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_mma.h"
#include "kernels/fp4.h"
#include "kernels/pointwise.h"

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
    const std::uint32_t random = rule.stochastic ? stochastic::rounding_word(rule.stream, static_cast<std::uint64_t>(i))
                                                 : 0u;
    return fp4_encode_value(to_float(x[i]), factor, rule, random);
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

// The FP4 GEMM's epilogue on the bf16 GEMM's f32 sums: the two tensors' factors (read on the device: no
// host wait), the bias, the activation, one rounding into C (the CPU's order, kernels/cpu/gemm_packed.cpp).
template <class Out>
__global__ void factor_kernel(const float* sum, const float* factor_a, const float* factor_b, const float* bias,
                              std::int64_t count, std::int64_t n, Activation activation, Out* c) {
  const float alpha = factor_a[0] * factor_b[0];
  for (std::int64_t i = first_index(); i < count; i += grid_stride()) {
    float v = sum[i] * alpha;
    if (bias) v += bias[i % n];
    if (activation == Activation::Relu) v = functors::Relu{}(v);
    if (activation == Activation::Gelu) v = functors::Gelu{}(v);
    c[i] = from_float<Out>(v);
  }
}

}  // namespace

namespace {

// Whether rung 3 takes these operands with Copy::Fp4 (gemm_mma.h's Fp4Source): k even, so that every
// row of codes starts on a byte, and blocks along k a multiple of 8, one scale a chunk; sizes that fit.
bool fused(const Fp4Tensor& a, const Fp4Tensor& b) {
  const auto fits = [](const Fp4Tensor& x) {
    return Fp4BlockIndex(x.codes.shape(), x.blocks).block_cols % 8 == 0 && x.codes.size(0) <= kMaxGemmDim;
  };
  return a.codes.size(1) % 2 == 0 && a.codes.size(1) <= kMaxGemmDim && fits(a) && fits(b);
}

mma_pipelined::Fp4Source source(const Fp4Tensor& x) {
  const Fp4BlockIndex blocks(x.codes.shape(), x.blocks);
  return {.codes = device_ptr<std::uint8_t>(x.codes),
          .scales = device_ptr<std::uint8_t>(x.scales),
          .factor = device_ptr<float>(x.tensor_factor),
          .extent_x = static_cast<int>(x.codes.size(0)),
          .extent_k = static_cast<int>(x.codes.size(1)),
          .block_rows = static_cast<int>(blocks.block_rows),
          .block_cols = static_cast<int>(blocks.block_cols),
          .scale_cols = static_cast<int>(blocks.scale_cols),
          .format = x.format};
}

}  // namespace

// Hopper has no FP4 Tensor Core and ldmatrix has no 4-bit form: rung 3 decodes each chunk of codes in
// registers between its global load and its shared store (gemm_mma.cu's Copy::Fp4), so no decoded
// operand is ever written; what it does not take runs fp4_gemm_decoded.
void fp4_gemm(const Fp4Tensor& a, const Fp4Tensor& b, Tensor& c, const GemmEpilogue& epilogue) {
  if (!fused(a, b)) return fp4_gemm_decoded(a, b, c, epilogue);
  const Tensor bias = epilogue.bias.defined() ? epilogue.bias.to(DType::F32) : Tensor();
  const int m = static_cast<int>(c.size(0)), n = static_cast<int>(c.size(1)), k = static_cast<int>(a.codes.size(1));
  mg::cuda::DeviceGuard guard(c.device().index);
  visit_device_floating(c.dtype(), "fp4_gemm", [&](auto zero) {
    using Out = decltype(zero);
    if constexpr (std::is_same_v<Out, double>) {
      throw Error("CUDA kernel fp4_gemm: C must be f32, f16 or bf16");  // kernels::fp4_gemm checked it already
    } else {
      const GemmArgs<bf16, Out> args{.a = nullptr,
                                     .b = nullptr,
                                     .c = device_ptr<Out>(c),
                                     .batch = 1,
                                     .m = m,
                                     .n = n,
                                     .k = k,
                                     .bias = bias.defined() ? bias.data_ptr() : nullptr,
                                     .bias_f32 = true,
                                     .activation = epilogue.activation,
                                     .slices = 1,
                                     .k_slice = k,
                                     .partial = nullptr};
      mma_pipelined::launch_fp4(args, {source(a), source(b)}, stream_of(c));
    }
  });
}

std::string fp4_gemm_kernel_name(const Fp4Tensor& a, const Fp4Tensor& b) {
  if (fused(a, b)) return "fp4 mma 128x128x64, decoded in registers";
  return "decode pass + the bf16 gemm";
}

// The decoding pass: both operands into bf16 tensors (2 bytes an element written and read again), the
// bf16 GEMM into f32, then the factors, the bias and the activation in one more pass.
void fp4_gemm_decoded(const Fp4Tensor& a, const Fp4Tensor& b, Tensor& c, const GemmEpilogue& epilogue) {
  const Device device = c.device();
  const std::int64_t m = c.size(0), n = c.size(1), k = a.codes.size(1);
  Tensor a16 = Tensor::empty(a.codes.shape(), {.dtype = DType::BF16, .device = device});
  Tensor b16 = Tensor::empty(b.codes.shape(), {.dtype = DType::BF16, .device = device});
  fp4_decode(a, a16);
  fp4_decode(b, b16);
  Tensor sum = c.dtype() == DType::F32 ? c : Tensor::empty({m, n}, {.dtype = DType::F32, .device = device});
  gemm(a16, b16, sum, {.m = m, .n = n, .k = k, .transpose_b = true});
  const Tensor bias = epilogue.bias.defined() ? epilogue.bias.to(DType::F32) : Tensor();
  mg::cuda::DeviceGuard guard(device.index);
  visit_device_floating(c.dtype(), "fp4_gemm", [&](auto zero) {
    using Out = decltype(zero);
    MG_LAUNCH((factor_kernel<Out>), blocks_for(m * n, kThreads), kThreads, 0, stream_of(c))
    (device_ptr<float>(sum), device_ptr<float>(a.tensor_factor), device_ptr<float>(b.tensor_factor),
     bias.defined() ? device_ptr<float>(bias) : nullptr, m * n, n, epilogue.activation, device_ptr<Out>(c));
    MG_CUDA_LAUNCHED();
  });
}

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
