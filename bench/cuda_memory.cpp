// bench/cuda_memory: the memory-bound CUDA kernels in TB/s, against the GPU's peak bandwidth.
//
//   build/bench/cuda_memory               2^24 .. 2^28 elements
//   build/bench/cuda_memory 20 26         2^20 .. 2^26
//
// Kernels (each with the bytes it must move: every input read once, every output written once):
//   cast f32->f16, f16->f32       kernels::cuda::cast                               6 bytes/element
//   add f32, add f16              kernels::cuda::binary(Add), no broadcasting        12 / 6
//   unscale f32 in place          kernels::cuda::unscale over a transformer's gradient list (12 layers:
//                                 the weights and biases of attention and MLP, two layer norms, and an
//                                 embedding that brings the total to the size): 145 tensors, 2 launches  8
//   unscale f16 -> f32            the same list into f32 master gradients                               6
//   sgd momentum f32              kernels::cuda::sgd on one tensor: p, g, buf read; p, buf written      20
//   adam f32                      kernels::cuda::adam: p, g, m, v read; p, m, v written                 28
//   adam fused master             f32 master, f16 gradient unscaled on read, f16 model copy written     28
// Timing: CUDA events around one call on the device's stream, 3 warm-up calls, then the median of
// 25 timed calls; TB/s = bytes / median time. Tensors are filled with the byte 0x3c, a finite value
// in every dtype (f16 1.06, f32 and bf16 0.0115), so no inf reaches found_inf.
// Reference: the peak is 2 x memory clock x bus width from the driver (an H100 SXM: 3.35 TB/s);
// a bandwidth-bound kernel should reach 2.5 TB/s or more there.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "bench/machine.h"
#include "bench/timing.h"
#include "core/device.h"
#include "core/factory.h"
#include "core/tensor.h"
#include "kernels/amp.h"
#include "kernels/copy.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/runtime.h"
#include "kernels/elementwise.h"
#include "kernels/optim.h"

namespace {

using namespace mg;

constexpr int kWarmup = 3;
constexpr int kRuns = 25;

Tensor filled(std::int64_t numel, DType dtype) {
  Tensor t = Tensor::empty({numel}, {.dtype = dtype, .device = Device::cuda()});
  MG_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0x3c, t.nbytes(), mg::cuda::stream(0)));
  return t;
}

// The median time of one call of fn, in seconds, measured on the device's stream.
double median_seconds(const std::function<void()>& fn) {
  const cudaStream_t stream = mg::cuda::stream(0);
  cudaEvent_t start, stop;
  MG_CUDA_CHECK(cudaEventCreate(&start));
  MG_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < kWarmup; ++i) fn();
  std::vector<double> seconds;
  for (int i = 0; i < kRuns; ++i) {
    MG_CUDA_CHECK(cudaEventRecord(start, stream));
    fn();
    MG_CUDA_CHECK(cudaEventRecord(stop, stream));
    MG_CUDA_CHECK(cudaEventSynchronize(stop));
    float milliseconds = 0.0f;
    MG_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, start, stop));
    seconds.push_back(milliseconds * 1e-3);
  }
  MG_CUDA_CHECK(cudaEventDestroy(start));
  MG_CUDA_CHECK(cudaEventDestroy(stop));
  return bench::median(seconds);
}

// Gradient sizes of a 12-layer transformer of width d (multiple of 64), plus an embedding that
// makes the total exactly `total` elements.
std::vector<std::int64_t> transformer_gradients(std::int64_t total) {
  const std::int64_t layers = 12;
  std::int64_t d = static_cast<std::int64_t>(std::sqrt(static_cast<double>(total) / (layers * 14))) / 64 * 64;
  d = d < 64 ? 64 : d;
  std::vector<std::int64_t> sizes;
  for (std::int64_t layer = 0; layer < layers; ++layer) {
    for (std::int64_t size : {3 * d * d, 3 * d, d * d, d, 4 * d * d, 4 * d, 4 * d * d, d, d, d, d, d})
      sizes.push_back(size);
  }
  std::int64_t used = 0;
  for (std::int64_t size : sizes) used += size;
  sizes.push_back(total > used ? total - used : 1);
  return sizes;
}

struct Row {
  std::string name;
  double bytes_per_element;
  std::function<void()> run;  // one call of the kernel
};

}  // namespace

// The whole body is a try block: an mg::Error (a bad MG_GEMM) ends the run with its message and status 1.
int main(int argc, char** argv) try {
  const int first = argc > 1 ? std::atoi(argv[1]) : 24, last = argc > 2 ? std::atoi(argv[2]) : 28;
  if (cuda_device_count() == 0) {
    std::printf("cuda_memory: no CUDA device visible; nothing to measure\n");
    return 0;
  }
  cudaDeviceProp properties{};
  MG_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  int memory_clock_khz = 0;
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&memory_clock_khz, cudaDevAttrMemoryClockRate, 0));
  const double peak = 2.0 * memory_clock_khz * 1e3 * properties.memoryBusWidth / 8.0;  // bytes/s: double data rate
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::localtime(&now));
  std::printf("cuda_memory: %s, %s; peak %.2f TB/s (%d-bit bus at %.0f MHz)\n", properties.name, date, peak * 1e-12,
              properties.memoryBusWidth, memory_clock_khz * 1e-3);
  std::printf("%s\n", bench::machine_lines().c_str());
  std::printf("median of %d timed calls after %d warm-up calls\n\n", kRuns, kWarmup);
  std::printf("| kernel | elements | bytes | time (us) | TB/s | of peak |\n|---|---|---|---|---|---|\n");

  for (int log2 = first; log2 <= last; ++log2) {
    const std::int64_t n = std::int64_t{1} << log2;
    std::vector<Row> rows;
    {
      Tensor x32 = filled(n, DType::F32), y32 = filled(n, DType::F32), out32 = filled(n, DType::F32);
      Tensor x16 = filled(n, DType::F16), y16 = filled(n, DType::F16), out16 = filled(n, DType::F16);
      rows.push_back({"cast f32->f16", 6, [=]() mutable { kernels::cuda::cast(x32, out16); }});
      rows.push_back({"cast f16->f32", 6, [=]() mutable { kernels::cuda::cast(x16, out32); }});
      const auto add = kernels::BinaryOp::Add;
      rows.push_back({"add f32", 12, [=]() mutable { kernels::cuda::binary(add, x32, y32, out32); }});
      rows.push_back({"add f16", 6, [=]() mutable { kernels::cuda::binary(add, x16, y16, out16); }});
    }
    {
      std::vector<Tensor> grads32, grads16, masters;
      for (std::int64_t size : transformer_gradients(n)) {
        grads32.push_back(filled(size, DType::F32));
        grads16.push_back(filled(size, DType::F16));
        masters.push_back(filled(size, DType::F32));
      }
      Tensor found_inf = filled(1, DType::F32);
      MG_CUDA_CHECK(cudaMemsetAsync(found_inf.data_ptr(), 0, sizeof(float), mg::cuda::stream(0)));
      const Tensor inv_scale = full({}, 1.0 / 65536, {.device = Device::cuda()});
      rows.push_back({"unscale f32 in place", 8,
                      [=]() mutable { kernels::cuda::unscale(grads32, grads32, inv_scale, found_inf); }});
      rows.push_back(
          {"unscale f16 -> f32", 6, [=]() mutable { kernels::cuda::unscale(grads16, masters, inv_scale, found_inf); }});
    }
    {
      Tensor p = filled(n, DType::F32), g = filled(n, DType::F32), m = filled(n, DType::F32);
      Tensor v = filled(n, DType::F32), g16 = filled(n, DType::F16), model = filled(n, DType::F16);
      Tensor found_inf = filled(1, DType::F32);
      MG_CUDA_CHECK(cudaMemsetAsync(found_inf.data_ptr(), 0, sizeof(float), mg::cuda::stream(0)));
      const Tensor inv_scale = full({}, 1.0 / 65536, {.device = Device::cuda()});
      Tensor steps = zeros({}, {.dtype = DType::I32, .device = Device::cuda()});
      rows.push_back({"sgd momentum f32", 20, [=]() mutable {
                        kernels::UpdateCount count;
                        kernels::cuda::sgd(p, g, &m, {.lr = 1e-3, .momentum = 0.9}, count);
                      }});
      rows.push_back({"adam f32", 28, [=]() mutable {
                        kernels::UpdateCount count;
                        kernels::cuda::adam(p, g, m, v, steps, {.lr = 1e-3}, count);
                      }});
      rows.push_back(
          {"adam fused master", 28, [=]() mutable {
             kernels::UpdateCount count;
             kernels::cuda::adam(p, g16, m, v, steps, {.lr = 1e-3}, count,
                                 {.scaling = {.inv_scale = &inv_scale, .found_inf = &found_inf}, .model_copy = &model});
           }});
    }
    for (const Row& row : rows) {
      const double seconds = median_seconds(row.run), bytes = row.bytes_per_element * static_cast<double>(n);
      std::printf("| %s | 2^%d | %.0f MB | %.1f | %.2f | %.0f%% |\n", row.name.c_str(), log2, bytes * 1e-6,
                  seconds * 1e6, bytes / seconds * 1e-12, 100.0 * bytes / seconds / peak);
    }
    rows.clear();  // the tensors go back to the cache, which is emptied before the next size
    kernels::clear_update_count(Device::cuda());
    mg::cuda::synchronize(0);
    mg::cuda::allocator().empty_cache();
  }
  return 0;
} catch (const mg::Error& error) {
  std::fprintf(stderr, "error: %s\n", error.what());
  return 1;
}
