// One warp running one ldmatrix or one mma.sync (mma_probe.h says what for). The launches are one
// block of 32 threads; nothing here is fast or meant to be.
#include <fmt/format.h>

#include <cstring>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/mma_layout.h"
#include "core/factory.h"
#include "kernels/cuda/mma_probe.h"

namespace mg::kernels::cuda {

namespace {

namespace layout = mma_layout;

template <int kMatrices, bool kTranspose>
__global__ void ldmatrix_probe_kernel(std::uint32_t* out) {
  MG_SHARED_ALIGNED(16, std::uint16_t[32 * 8], rows);
  const int lane = static_cast<int>(threadIdx.x);
  for (int e = 0; e < 8; ++e) rows[8 * lane + e] = static_cast<std::uint16_t>(8 * lane + e);
  __syncwarp();
  std::uint32_t registers[kMatrices];
  ldmatrix<kMatrices, kTranspose>(registers, rows + 8 * lane);
  for (int i = 0; i < kMatrices; ++i) out[kMatrices * lane + i] = registers[i];
}

// The 16-bit pattern of x rounded into In (the values are exact in it).
template <class In>
__device__ std::uint32_t bits16(float x) {
  const In value = from_float<In>(x);
  std::uint16_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

template <class In>
__global__ void mma_probe_kernel(const float* a, const float* b, float* d) {
  const int lane = static_cast<int>(threadIdx.x);
  MmaA fragment_a{};
  std::uint32_t b0 = 0, b1 = 0;
  if constexpr (std::is_same_v<In, float>) {
    for (int r = 0; r < 4; ++r) {
      const layout::Cell at = layout::tf32_a(lane, r);
      std::memcpy(&fragment_a.x[r], &a[8 * at.row + at.column], 4);
    }
    const layout::Cell b_at0 = layout::tf32_b(lane, 0), b_at1 = layout::tf32_b(lane, 1);
    std::memcpy(&b0, &b[8 * b_at0.row + b_at0.column], 4);
    std::memcpy(&b1, &b[8 * b_at1.row + b_at1.column], 4);
  } else {
    for (int e = 0; e < 8; ++e) {
      const layout::Cell at = layout::f16_a(lane, e);
      fragment_a.x[e / 2] |= bits16<In>(a[16 * at.row + at.column]) << (16 * (e % 2));
    }
    for (int e = 0; e < 4; ++e) {
      const layout::Cell at = layout::f16_b(lane, e);
      (e < 2 ? b0 : b1) |= bits16<In>(b[8 * at.row + at.column]) << (16 * (e % 2));
    }
  }
  MmaAccumulator sum{};
  mma<In>(sum, fragment_a, b0, b1);
  for (int r = 0; r < 4; ++r) {
    const layout::Cell at = layout::accumulator(lane, r);
    d[8 * at.row + at.column] = sum.x[r];
  }
}

}  // namespace

std::vector<std::uint32_t> probe_ldmatrix(int matrices, bool transpose) {
  MG_CHECK(matrices == 1 || matrices == 2 || matrices == 4, "probe_ldmatrix: ldmatrix loads 1, 2 or 4 matrices, not {}",
           matrices);
  Tensor out = Tensor::empty({32 * matrices}, {.dtype = DType::I32, .device = Device::cuda()});
  auto* registers = device_ptr<std::uint32_t>(out);
  const cudaStream_t stream = stream_of(out);
  const auto launch = [&]<int kMatrices, bool kTranspose>() {
    MG_LAUNCH((ldmatrix_probe_kernel<kMatrices, kTranspose>), 1, 32, 0, stream)(registers);
  };
  if (matrices == 1)
    transpose ? launch.template operator()<1, true>() : launch.template operator()<1, false>();
  else if (matrices == 2)
    transpose ? launch.template operator()<2, true>() : launch.template operator()<2, false>();
  else
    transpose ? launch.template operator()<4, true>() : launch.template operator()<4, false>();
  MG_CUDA_LAUNCHED();
  std::vector<std::uint32_t> values;
  for (const std::int32_t v : out.to(Device::cpu()).to_vector<std::int32_t>())
    values.push_back(static_cast<std::uint32_t>(v));
  return values;
}

std::vector<float> probe_mma(DType dtype, const std::vector<float>& a, const std::vector<float>& b) {
  const std::int64_t depth = dtype == DType::F32 ? 8 : 16;
  MG_CHECK(static_cast<std::int64_t>(a.size()) == 16 * depth && static_cast<std::int64_t>(b.size()) == 8 * depth,
           "probe_mma: {} needs A of 16 x {} and B of {} x 8 values, got {} and {}", dtype, depth, depth, a.size(),
           b.size());
  const Tensor a_device = from_vector(std::vector<double>(a.begin(), a.end()), {16, depth}).to(Device::cuda());
  const Tensor b_device = from_vector(std::vector<double>(b.begin(), b.end()), {depth, 8}).to(Device::cuda());
  Tensor d = Tensor::empty({16, 8}, {.device = Device::cuda()});
  const auto* a_in = device_ptr<const float>(a_device);
  const auto* b_in = device_ptr<const float>(b_device);
  auto* d_out = device_ptr<float>(d);
  const cudaStream_t stream = stream_of(d);
  if (dtype == DType::F16) {
    MG_LAUNCH(mma_probe_kernel<__half>, 1, 32, 0, stream)(a_in, b_in, d_out);
  } else if (dtype == DType::BF16) {
    MG_LAUNCH(mma_probe_kernel<bf16>, 1, 32, 0, stream)(a_in, b_in, d_out);
  } else if (dtype == DType::F32) {
    MG_LAUNCH(mma_probe_kernel<float>, 1, 32, 0, stream)(a_in, b_in, d_out);
  } else {
    throw Error(fmt::format("probe_mma: mma.sync has no {} form here; use f16, bf16 or f32 (TF32)", dtype));
  }
  MG_CUDA_LAUNCHED();
  return d.to(Device::cpu()).to_vector<float>();
}

}  // namespace mg::kernels::cuda
