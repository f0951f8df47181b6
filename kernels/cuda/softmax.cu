// CUDA softmax, log-softmax and fused cross-entropy (contract: kernels/softmax.h; reference:
// kernels/cpu/softmax.cpp, whose formulas these kernels repeat in the same order).
//
//   softmax / log_softmax   x, y, dy, dx [outer, n, inner] (one dtype), taken along n
//   cross_entropy           logits [rows, classes], labels i32 [rows] -> loss f32 [rows], row_stats f32
//                           [rows, 2] (the row's max and log(sum(exp(x - max))), kept apart)
//   cross_entropy_backward  + row_stats, row_weight f32 [rows] -> dlogits [rows, classes] (logits' dtype)
//
// All math is f32 (exp of an f16 logit is exactly what overflows) with the row's max subtracted
// before exponentiating; values are rounded once on store. A row holding +inf or NaN, or only -inf,
// comes out NaN throughout (x - max is NaN somewhere, and so is the sum), as on the CPU and in PyTorch.
//
// Launch geometry: 1-D grid-stride loops of 256-thread blocks over "rows" (the n elements of one
// (o, i), `inner` apart). A team owns a row and makes three (backward: two) passes over it:
//   inner == 1, n <= 1024   a warp per row (8 rows per block), shuffles only
//   inner == 1, n > 1024    the whole block per row (block_max/block_sum of common.cuh)
//   inner > 1               a thread per row, walking j in order (adjacent threads read adjacent i:
//                           coalesced), which is also the CPU's order of additions
// cross_entropy_backward needs no reduction: one thread per logit.
//
// Test: build/tests/test_cuda_kernels -tc='cuda softmax*' -tc='cuda cross_entropy*'. Benchmark: none
// of its own yet; profile it inside build/bench/train_step with nsys.
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/softmax.h"

namespace mg::kernels::cuda {

namespace {

constexpr int kBlock = 256;

template <int kTeam>
__device__ __forceinline__ float team_sum(float v) {
  if constexpr (kTeam == 1)
    return v;
  else if constexpr (kTeam == 32)
    return warp_sum(v);
  else {
    MG_SHARED(float[32], scratch);
    return block_sum(v, scratch);
  }
}

// NaN need not survive the max: a NaN element makes the row's sum of exponentials NaN anyway, so
// the whole row comes out NaN, as on the CPU.
template <int kTeam>
__device__ __forceinline__ float team_max(float v) {
  if constexpr (kTeam == 1)
    return v;
  else if constexpr (kTeam == 32)
    return warp_max(v);
  else {
    MG_SHARED(float[32], scratch);
    return block_max(v, scratch);
  }
}

// Row `id` of an [outer, n, inner] view, (o, i) = (id / inner, id % inner): where it starts, how far
// apart its elements are, and which of them this thread visits (j = rank, rank + kTeam, ...).
template <int kTeam>
struct Row {
  std::int64_t id, start, n, stride;
  int rank;
  __device__ std::int64_t at(std::int64_t j) const { return start + j * stride; }
};

// Calls body(row) for every row this thread's team owns. The loop bound is the same for the whole
// team (the whole block when kTeam == kBlock), so the team's barriers and shuffles are safe inside.
template <int kTeam, class Body>
__device__ __forceinline__ void for_each_row(const ReduceShape& s, Body&& body) {
  constexpr int kTeamsPerBlock = kBlock / kTeam;
  const std::int64_t rows = s.outer * s.inner;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kTeamsPerBlock + threadIdx.x / kTeam; r < rows;
       r += static_cast<std::int64_t>(gridDim.x) * kTeamsPerBlock)
    body(Row<kTeam>{r, r / s.inner * s.n * s.inner + r % s.inner, s.n, s.inner, static_cast<int>(threadIdx.x % kTeam)});
}

// The CPU's row_max_logsum: the row's max and log(sum(exp(x - max))); NaN when the max is not finite.
template <int kTeam, class T>
__device__ __forceinline__ void max_logsum(const T* x, const Row<kTeam>& row, float& max, float& log_sum) {
  float m = -INFINITY;
  for (std::int64_t j = row.rank; j < row.n; j += kTeam) m = fmaxf(m, to_float(x[row.at(j)]));
  m = team_max<kTeam>(m);
  float sum = 0.0f;
  for (std::int64_t j = row.rank; j < row.n; j += kTeam) sum += expf(to_float(x[row.at(j)]) - m);
  max = m;
  log_sum = logf(team_sum<kTeam>(sum));
}

template <class T, int kTeam>
__global__ void __launch_bounds__(kBlock) softmax_forward(const T* x, ReduceShape s, bool log, T* y) {
  for_each_row<kTeam>(s, [&](const Row<kTeam>& row) {
    float max, log_sum;
    max_logsum(x, row, max, log_sum);
    for (std::int64_t j = row.rank; j < row.n; j += kTeam) {
      const float v = to_float(x[row.at(j)]);
      y[row.at(j)] = from_float<T>(log ? v - max - log_sum : expf(v - max - log_sum));
    }
  });
}

// softmax: dx = y (dy - sum(dy y));  log_softmax: dx = dy - exp(y) sum(dy).
template <class T, int kTeam>
__global__ void __launch_bounds__(kBlock)
    softmax_backward_kernel(const T* y, const T* dy, ReduceShape s, bool log, T* dx) {
  for_each_row<kTeam>(s, [&](const Row<kTeam>& row) {
    float dot = 0.0f;
    for (std::int64_t j = row.rank; j < row.n; j += kTeam) {
      const float g = to_float(dy[row.at(j)]);
      dot += log ? g : g * to_float(y[row.at(j)]);
    }
    dot = team_sum<kTeam>(dot);
    for (std::int64_t j = row.rank; j < row.n; j += kTeam) {
      const float g = to_float(dy[row.at(j)]), v = to_float(y[row.at(j)]);
      dx[row.at(j)] = from_float<T>(log ? g - expf(v) * dot : v * (g - dot));
    }
  });
}

// loss[r] = log_sum - (x[r, label[r]] - max) (0 for an ignored row); row_stats[r] = (max, log_sum),
// never added into one logsumexp, which would round at the scale of max (kernels/softmax.h).
template <class T, int kTeam>
__global__ void __launch_bounds__(kBlock)
    cross_entropy_forward(const T* logits, const std::int32_t* labels, ReduceShape s, std::int64_t ignore_index,
                          float* loss, float* row_stats) {
  for_each_row<kTeam>(s, [&](const Row<kTeam>& row) {
    float max, log_sum;
    max_logsum(logits, row, max, log_sum);
    if (row.rank != 0) return;
    const std::int64_t r = row.id;
    row_stats[2 * r] = max;
    row_stats[2 * r + 1] = log_sum;
    // An ignored label may be out of range (-100): it is never read.
    loss[r] = labels[r] == ignore_index ? 0.0f : log_sum - (to_float(logits[row.at(labels[r])]) - max);
  });
}

// dx[r, c] = row_weight[r] * (exp((x[r, c] - max) - log_sum) - [c == label[r]]), 0 for an ignored row.
template <class T>
__global__ void __launch_bounds__(kBlock)
    cross_entropy_backward_kernel(const T* logits, const std::int32_t* labels, const float* row_stats,
                                  const float* row_weight, std::int64_t rows, std::int64_t classes,
                                  std::int64_t ignore_index, T* dlogits) {
  for (std::int64_t t = first_index(); t < rows * classes; t += grid_stride()) {
    const std::int64_t r = t / classes, c = t % classes;
    const bool ignored = labels[r] == ignore_index;
    const float p = expf((to_float(logits[t]) - row_stats[2 * r]) - row_stats[2 * r + 1]);
    dlogits[t] = from_float<T>(ignored ? 0.0f : row_weight[r] * (p - (c == labels[r] ? 1.0f : 0.0f)));
  }
}

// Calls launch(team, blocks) with the team size for the rows of `s` (see the file comment) and the
// grid that gives every row a team.
template <class Launch>
void with_team(const ReduceShape& s, Launch&& launch) {
  const std::int64_t rows = s.outer * s.inner;
  if (s.inner > 1)
    launch(std::integral_constant<int, 1>{}, blocks_for(rows, kBlock));
  else if (s.n <= 1024)
    launch(std::integral_constant<int, 32>{}, blocks_for(rows * 32, kBlock));
  else
    launch(std::integral_constant<int, kBlock>{}, blocks_for(rows * kBlock, kBlock));
  MG_CUDA_LAUNCHED();
}

}  // namespace

void softmax(const Tensor& x, const ReduceShape& s, bool log, Tensor& y) {
  if (y.numel() == 0) return;
  mg::cuda::DeviceGuard guard(y.device().index);
  visit_device_floating(x.dtype(), "softmax", [&](auto zero) {
    using T = decltype(zero);
    with_team(s, [&]<int kTeam>(std::integral_constant<int, kTeam>, unsigned blocks) {
      MG_LAUNCH((softmax_forward<T, kTeam>), blocks, kBlock, 0, stream_of(y))
      (device_ptr<T>(x), s, log, device_ptr<T>(y));
    });
  });
}

void softmax_backward(const Tensor& y, const Tensor& dy, const ReduceShape& s, bool log, Tensor& dx) {
  if (dx.numel() == 0) return;
  mg::cuda::DeviceGuard guard(dx.device().index);
  visit_device_floating(y.dtype(), "softmax_backward", [&](auto zero) {
    using T = decltype(zero);
    with_team(s, [&]<int kTeam>(std::integral_constant<int, kTeam>, unsigned blocks) {
      MG_LAUNCH((softmax_backward_kernel<T, kTeam>), blocks, kBlock, 0, stream_of(dx))
      (device_ptr<T>(y), device_ptr<T>(dy), s, log, device_ptr<T>(dx));
    });
  });
}

void cross_entropy(const Tensor& logits, const Tensor& labels, std::int64_t ignore_index, Tensor& loss,
                   Tensor& row_stats) {
  if (loss.numel() == 0) return;
  mg::cuda::DeviceGuard guard(loss.device().index);
  const ReduceShape s{logits.size(0), logits.size(1), 1};
  visit_device_floating(logits.dtype(), "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    with_team(s, [&]<int kTeam>(std::integral_constant<int, kTeam>, unsigned blocks) {
      MG_LAUNCH((cross_entropy_forward<T, kTeam>), blocks, kBlock, 0, stream_of(loss))
      (device_ptr<T>(logits), device_ptr<std::int32_t>(labels), s, ignore_index, device_ptr<float>(loss),
       device_ptr<float>(row_stats));
    });
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& row_stats,
                            const Tensor& row_weight, std::int64_t ignore_index, Tensor& dlogits) {
  if (dlogits.numel() == 0) return;
  mg::cuda::DeviceGuard guard(dlogits.device().index);
  visit_device_floating(logits.dtype(), "cross_entropy_backward", [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t rows = logits.size(0), classes = logits.size(1);
    MG_LAUNCH((cross_entropy_backward_kernel<T>), blocks_for(rows * classes, kBlock), kBlock, 0, stream_of(dlogits))
    (device_ptr<T>(logits), device_ptr<std::int32_t>(labels), device_ptr<float>(row_stats),
     device_ptr<float>(row_weight), rows, classes, ignore_index, device_ptr<T>(dlogits));
    MG_CUDA_LAUNCHED();
  });
}

}  // namespace mg::kernels::cuda
