// CUDA loss-scaling kernels (kernels/amp.h): the unscale (or the check alone) of every gradient in
// one multi-tensor launch, and the scale update, leaving the factor, found_inf and the scale on the
// device: nothing here waits for the GPU.
//
// unscale (PyTorch's _amp_foreach_non_finite_check_and_unscale_): dst[t][i] = src[t][i] * factor in
//   f32, rounded once into dst's dtype; found_inf[0] = 1 (a plain store, never a clear) when a
//   stored value is inf or NaN. The same arithmetic as the CPU (one f32 product, the check on what
//   was stored), so both agree to the bit. find_non_finite is the same launch with no destination:
//   the products are checked and dropped. Each thread reads the factor (one f32 element) itself.
//   Launch geometry: the tensors are cut into chunks of kChunk elements and each block of
//   kThreads threads handles one chunk. A batch of up to kMaxTensors tensors travels as one kernel
//   parameter (a table of pointers, sizes, dtypes and each tensor's first chunk; kept under the
//   4 KB that every CUDA version accepts); a block finds its tensor by binary search over the first
//   chunks. Longer lists are launched again per batch. Within a chunk, a thread moves 4 elements
//   per vector access (when the tensor's pointers allow) and has kLoadsInFlight accesses in flight
//   before it stores, so that a bandwidth-bound pass keeps enough bytes moving.
// update_scale (PyTorch's _amp_update_scale_): one thread runs update_scale_step (kernels/amp.h).
// Tests: build/tests/test_cuda_amp (GPU vs CPU). Benchmark: build/bench/cuda_memory (unscale).
#include <cfloat>

#include "kernels/amp.h"
#include "kernels/cuda/common.cuh"

namespace mg::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kLoadsInFlight = 4;  // vector loads a thread issues before its first store
constexpr std::int64_t kChunk = 4 * kLoadsInFlight * kPack * kThreads;  // 16384 elements, 4 rounds a block
constexpr int kMaxTensors = 120;

struct UnscaleTensor {
  const void* src;
  void* dst;  // null: check only (find_non_finite)
  std::int64_t numel;
  std::int32_t first_chunk;  // the batch's chunk (block) index of this tensor's element 0
  DType src_dtype, dst_dtype;
  bool vectorized;  // both pointers aligned to a Pack, so every chunk's packs are too
};

struct UnscaleBatch {
  UnscaleTensor tensors[kMaxTensors];
  int count = 0;
  std::int32_t chunks = 0;  // the grid: every tensor's chunks, one after the other
};
static_assert(sizeof(UnscaleBatch) + sizeof(float) + sizeof(float*) <= 4096, "kernel parameters: 4 KB at most");

// Unscales src[i] into dst[i] for i in [begin, end) of one tensor, with the block's threads; returns
// whether this thread stored an inf or NaN. src == dst is allowed (in place): each element is read
// and then written by the same thread. dst == nullptr: the products are only checked (as f32).
template <class Src, class Dst>
__device__ bool unscale_chunk(const Src* src, Dst* dst, std::int64_t begin, std::int64_t end, float factor,
                              bool vectorized) {
  bool non_finite = false;
  auto unscale_one = [&](Src x) {
    const Dst stored = from_float<Dst>(to_float(x) * factor);
    non_finite |= !isfinite(to_float(stored));  // what was stored: an f16 overflows at 65520
    return stored;
  };
  if (dst == nullptr) {  // find_non_finite: Dst is float, the compute type; nothing is written
    for (std::int64_t i = begin + threadIdx.x; i < end; i += kThreads) unscale_one(src[i]);
    return non_finite;
  }
  std::int64_t done = begin;
  if (vectorized) {
    const auto* src_packs = reinterpret_cast<const Pack<Src>*>(src + begin);
    auto* dst_packs = reinterpret_cast<Pack<Dst>*>(dst + begin);
    const std::int64_t packs = (end - begin) / kPack;
    for (std::int64_t first = threadIdx.x; first < packs; first += kLoadsInFlight * kThreads) {
      Pack<Src> in[kLoadsInFlight];
#pragma unroll
      for (int k = 0; k < kLoadsInFlight; ++k)
        if (first + k * kThreads < packs) in[k] = src_packs[first + k * kThreads];
#pragma unroll
      for (int k = 0; k < kLoadsInFlight; ++k) {
        if (first + k * kThreads < packs) {
          Pack<Dst> out;
#pragma unroll
          for (int j = 0; j < kPack; ++j) out.v[j] = unscale_one(in[k].v[j]);
          dst_packs[first + k * kThreads] = out;
        }
      }
    }
    done = begin + packs * kPack;
  }
  for (std::int64_t i = done + threadIdx.x; i < end; i += kThreads) dst[i] = unscale_one(src[i]);
  return non_finite;
}

// Block b handles chunk b of the batch: elements [c * kChunk, (c + 1) * kChunk) of the tensor whose
// chunks include b, with c = b - that tensor's first chunk.
__global__ void __launch_bounds__(kThreads)
    unscale_kernel(const __grid_constant__ UnscaleBatch batch, const float* factor, float* found_inf) {
  const auto chunk = static_cast<std::int32_t>(blockIdx.x);
  int low = 0, high = batch.count - 1;  // the last tensor whose first chunk is <= this one
  while (low < high) {
    const int middle = (low + high + 1) / 2;
    if (batch.tensors[middle].first_chunk <= chunk)
      low = middle;
    else
      high = middle - 1;
  }
  const UnscaleTensor& t = batch.tensors[low];
  const std::int64_t begin = static_cast<std::int64_t>(chunk - t.first_chunk) * kChunk;
  const std::int64_t end = begin + kChunk < t.numel ? begin + kChunk : t.numel;
  bool non_finite = false;
  visit_floating_on_device(t.src_dtype, [&](auto src_type) {
    visit_floating_on_device(t.dst_dtype, [&](auto dst_type) {
      non_finite = unscale_chunk(static_cast<const decltype(src_type)*>(t.src), static_cast<decltype(dst_type)*>(t.dst),
                                 begin, end, *factor, t.vectorized);
    });
  });
  if (non_finite) *found_inf = 1.0f;  // every writer stores the same value: no atomics needed
}

// overflow_streak is null when the rule's hysteresis is 1.
__global__ void update_scale_kernel(float* scale, std::int32_t* growth_tracker, std::int32_t* overflow_streak,
                                    const float* found_inf, ScaleRule rule) {
  std::int32_t no_streak = 0;
  update_scale_step(*scale, *growth_tracker, overflow_streak ? *overflow_streak : no_streak, *found_inf != 0.0f, rule);
}

}  // namespace

void unscale(const std::vector<Tensor>& src, const std::vector<Tensor>& dst, const Tensor& factor, Tensor& found_inf) {
  constexpr std::int64_t kMaxChunks = std::int64_t{1} << 30;  // a grid holds 2^31 - 1 blocks
  const bool check_only = dst.empty();
  for (std::size_t i = 0; i < src.size(); ++i) {  // refused before anything is queued
    visit_device_floating(src[i].dtype(), "unscale", [](auto) {});
    if (!check_only) visit_device_floating(dst[i].dtype(), "unscale", [](auto) {});
    MG_CHECK(src[i].numel() <= kMaxChunks * kChunk,
             "CUDA kernel unscale: gradient {} has {} elements, more than "
             "the {} one launch can take",
             i, src[i].numel(), kMaxChunks * kChunk);
  }
  mg::cuda::DeviceGuard guard(found_inf.device().index);
  UnscaleBatch batch{};
  auto launch = [&] {
    if (batch.count == 0) return;
    MG_LAUNCH(unscale_kernel, batch.chunks, kThreads, 0, stream_of(found_inf))
    (batch, device_ptr<const float>(factor), device_ptr<float>(found_inf));
    MG_CUDA_LAUNCHED();
    batch.count = 0;
    batch.chunks = 0;
  };
  for (std::size_t i = 0; i < src.size(); ++i) {
    const std::int64_t numel = src[i].numel();
    if (numel == 0) continue;
    const std::int64_t chunks = (numel + kChunk - 1) / kChunk;
    if (batch.count == kMaxTensors || batch.chunks + chunks > kMaxChunks) launch();
    const DType dst_dtype = check_only ? DType::F32 : dst[i].dtype();  // checked as f32, the compute type
    batch.tensors[batch.count++] = {.src = src[i].data_ptr(),
                                    .dst = check_only ? nullptr : dst[i].data_ptr(),
                                    .numel = numel,
                                    .first_chunk = batch.chunks,
                                    .src_dtype = src[i].dtype(),
                                    .dst_dtype = dst_dtype,
                                    .vectorized = !check_only &&
                                                  aligned(src[i].data_ptr(), kPack * dtype_size(src[i].dtype())) &&
                                                  aligned(dst[i].data_ptr(), kPack * dtype_size(dst_dtype))};
    batch.chunks += static_cast<std::int32_t>(chunks);
  }
  launch();
}

void update_scale(Tensor& scale, Tensor& growth_tracker, Tensor& overflow_streak, const Tensor& found_inf,
                  const ScaleRule& rule) {
  mg::cuda::DeviceGuard guard(scale.device().index);
  MG_LAUNCH(update_scale_kernel, 1, 1, 0, stream_of(scale))
  (device_ptr<float>(scale), device_ptr<std::int32_t>(growth_tracker),
   overflow_streak.defined() ? device_ptr<std::int32_t>(overflow_streak) : nullptr, device_ptr<const float>(found_inf),
   rule);
  MG_CUDA_LAUNCHED();
}

}  // namespace mg::kernels::cuda
