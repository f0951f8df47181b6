// One warpgroup running one wgmma (wgmma_probe.h says what for). One block of 128 threads; nothing here
// is fast or meant to be.
#include "kernels/cuda/wgmma_probe.h"

#include <fmt/format.h>

#include <cstring>

#include "core/factory.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/mma_fp8.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/wgmma_layout.h"

namespace mg::kernels::cuda {

namespace {

namespace layout = wgmma_layout;

constexpr int kM = 64, kN = 128, kK = 16;
constexpr std::uint32_t kTileA = 0, kTileB = 16 * 1024;  // window offsets from the aligned start
constexpr int kSharedBytes = 48 * 1024 + 1024;  // f16: A 8 KiB, B 16 KiB; FP8: 16 and 32; room to align to 1024

// D, 64 x kN row-major, from where accumulator_cell says each thread of the warpgroup holds it.
__device__ void store_sums(const float (&sums)[kN / 2], float* d) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  for (int v = 0; v < kN / 2; ++v) {
    const mma_layout::Cell at = layout::accumulator_cell(warp, lane, v);
    d[kN * at.row + at.column] = sums[v];
  }
}

template <class In, bool kAMn, bool kBMn>
__global__ void wgmma_probe_kernel(const float* a, const float* b, float* d) {
  MG_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* const shared = hopper::align_to_swizzle_period(raw);
  const std::uint32_t base = hopper::window_address(shared);
  // The operands where the descriptors of rung 4's tiles (k step 0) say: 64-element rows of 128 bytes.
  const layout::Descriptor da = layout::tile_descriptor(base + kTileA, !kAMn, 0, 64 * 128);
  const layout::Descriptor db = layout::tile_descriptor(base + kTileB, !kBMn, 0, 64 * 128);
  const int t = static_cast<int>(threadIdx.x);
  // Each element by one 16-bit store (a memcpy into the bytes is miscompiled by ptxas 13.0:
  // wgmma_pipeline.cuh's store_rows says how).
  for (int i = t; i < kM * kK; i += 128) {
    const In value = from_float<In>(a[i]);
    *reinterpret_cast<In*>(shared + (layout::element_address(da, !kAMn, 2, i / kK, i % kK) - base)) = value;
  }
  for (int i = t; i < kK * kN; i += 128) {  // b[k][n]: element (n, k) of the operand
    const In value = from_float<In>(b[i]);
    *reinterpret_cast<In*>(shared + (layout::element_address(db, !kBMn, 2, i % kN, i / kN) - base)) = value;
  }
  hopper::fence_proxy_async();  // ordinary stores, read by wgmma
  __syncthreads();
  float sums[kN / 2];
  wgmma::fence_operands(sums);
  wgmma::fence();
  wgmma::mma<In, kN, kAMn, kBMn>(sums, layout::encode(da), layout::encode(db), false);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operands(sums);
  store_sums(sums, d);
}

// FP8: A's 128-code blocks of k at kFp8TileA + 8 KiB t, B's at kFp8TileB + 16 KiB t, rows of 128 bytes.
constexpr std::uint32_t kFp8TileA = 0, kFp8TileB = 16 * 1024;
constexpr int kFp8K = 256;  // 8 instructions: a constant count, so that nvcc issues them back to back

template <DType kA, DType kB>
__global__ void wgmma_fp8_probe_kernel(const std::uint8_t* a, const std::uint8_t* b, float* d) {
  constexpr int k = kFp8K;
  MG_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* const shared = hopper::align_to_swizzle_period(raw);
  const std::uint32_t base = hopper::window_address(shared);
  // Instruction i reads k block i / 4 at step i % 4 (32 codes each).
  const auto descriptor = [&](bool is_a, int i) {
    const std::uint32_t tile = base + (is_a ? kFp8TileA + 8192u * static_cast<std::uint32_t>(i / 4)
                                            : kFp8TileB + 16384u * static_cast<std::uint32_t>(i / 4));
    return layout::tile_descriptor(tile, true, i % 4, 0);
  };
  const int t = static_cast<int>(threadIdx.x);
  for (int i = t; i < kM * k; i += 128) {
    const int row = i / k, kk = i % k;
    shared[layout::element_address(descriptor(true, kk / 32), true, 1, row, kk % 32) - base] = a[i];
  }
  for (int i = t; i < kN * k; i += 128) {
    const int n = i / k, kk = i % k;
    shared[layout::element_address(descriptor(false, kk / 32), true, 1, n, kk % 32) - base] = b[i];
  }
  hopper::fence_proxy_async();
  __syncthreads();
  float sums[kN / 2];
  wgmma::fence_operands(sums);
  wgmma::fence();
#pragma unroll
  for (int i = 0; i < k / 32; ++i)
    wgmma::mma_fp8<kA, kB, kN>(sums, layout::encode(descriptor(true, i)), layout::encode(descriptor(false, i)), i > 0);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operands(sums);
  store_sums(sums, d);
}

// Throws unless the current device is compute capability 9.0, naming `what`.
void require_hopper(const char* what) {
  int device = 0, major = 0, minor = 0;
  MG_CUDA_CHECK(cudaGetDevice(&device));
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  MG_CHECK(major == 9 && minor == 0, "{}: wgmma needs compute capability 9.0, this device has {}.{}", what, major,
           minor);
}

}  // namespace

std::vector<float> probe_wgmma_fp8(DType fa, DType fb, const std::vector<std::uint8_t>& a,
                                   const std::vector<std::uint8_t>& b) {
  MG_CHECK(a.size() == static_cast<std::size_t>(kM * kFp8K) && b.size() == static_cast<std::size_t>(kN * kFp8K),
           "probe_wgmma_fp8: needs A of 64 x {} and B of 128 x {} codes, got {} and {}", kFp8K, kFp8K, a.size(),
           b.size());
  require_hopper("probe_wgmma_fp8");
  const auto codes = [](const std::vector<std::uint8_t>& bytes) {  // in an i32 tensor's bytes
    std::vector<std::int32_t> words((bytes.size() + 3) / 4, 0);
    std::memcpy(words.data(), bytes.data(), bytes.size());
    return from_vector(std::vector<double>(words.begin(), words.end()), {static_cast<std::int64_t>(words.size())},
                       {.dtype = DType::I32})
        .to(Device::cuda());
  };
  const Tensor a_device = codes(a), b_device = codes(b);
  Tensor d = Tensor::empty({kM, kN}, {.device = Device::cuda()});
  const cudaStream_t stream = stream_of(d);
  with_fp8_formats(fa, fb, [&]<DType kA, DType kB>() {
    MG_CUDA_CHECK(cudaFuncSetAttribute(wgmma_fp8_probe_kernel<kA, kB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       kSharedBytes));
    MG_LAUNCH((wgmma_fp8_probe_kernel<kA, kB>), 1, 128, kSharedBytes, stream)
    (static_cast<const std::uint8_t*>(a_device.data_ptr()), static_cast<const std::uint8_t*>(b_device.data_ptr()),
     device_ptr<float>(d));
  });
  MG_CUDA_LAUNCHED();
  return d.to(Device::cpu()).to_vector<float>();
}

std::vector<float> probe_wgmma(DType dtype, bool a_mn_major, bool b_mn_major, const std::vector<float>& a,
                               const std::vector<float>& b) {
  MG_CHECK(dtype == DType::F16 || dtype == DType::BF16, "probe_wgmma: wgmma m64n128k16 takes f16 or bf16, not {}",
           dtype);
  MG_CHECK(a.size() == std::size_t{kM * kK} && b.size() == std::size_t{kK * kN},
           "probe_wgmma: needs A of 64 x 16 and B of 16 x 128 values, got {} and {}", a.size(), b.size());
  require_hopper("probe_wgmma");
  const Tensor a_device = from_vector(std::vector<double>(a.begin(), a.end()), {kM, kK}).to(Device::cuda());
  const Tensor b_device = from_vector(std::vector<double>(b.begin(), b.end()), {kK, kN}).to(Device::cuda());
  Tensor d = Tensor::empty({kM, kN}, {.device = Device::cuda()});
  const cudaStream_t stream = stream_of(d);
  const auto launch = [&]<class In, bool kAMn, bool kBMn>() {
    MG_CUDA_CHECK(cudaFuncSetAttribute(wgmma_probe_kernel<In, kAMn, kBMn>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       kSharedBytes));
    MG_LAUNCH((wgmma_probe_kernel<In, kAMn, kBMn>), 1, 128, kSharedBytes, stream)
    (device_ptr<const float>(a_device), device_ptr<const float>(b_device), device_ptr<float>(d));
  };
  const auto with_majors = [&]<class In>() {
    if (a_mn_major && b_mn_major) return launch.template operator()<In, true, true>();
    if (a_mn_major) return launch.template operator()<In, true, false>();
    if (b_mn_major) return launch.template operator()<In, false, true>();
    launch.template operator()<In, false, false>();
  };
  if (dtype == DType::F16)
    with_majors.template operator()<__half>();
  else
    with_majors.template operator()<bf16>();
  MG_CUDA_LAUNCHED();
  return d.to(Device::cpu()).to_vector<float>();
}

}  // namespace mg::kernels::cuda
