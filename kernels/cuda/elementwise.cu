// CUDA elementwise kernels: out = f(inputs...) with NumPy broadcasting, for one, two or three
// inputs (kernels/elementwise.h). The math is the functors of kernels/pointwise.h, the same ones the
// CPU loop calls, in f32 and rounded once on store, so CPU and GPU agree to the last bit wherever
// the device's math library does (+ - * / and sqrt are correctly rounded on both; exp, tanh, erf
// differ by an ulp or so of f32, far below an f16 or bf16 ulp).
//
// Launch geometry: one grid-stride loop over out's elements, 256 threads a block, blocks_for(n)
// blocks. Two shapes of the loop:
//   flat       every operand has out's shape (the loop plan of kernels/loop_plan.h merged all dims
//              into one of stride 1): thread t handles elements 4t..4t+3 with one vector load per
//              operand when every pointer is aligned to 4 elements, then the tail element by element.
//   broadcast  the general case: element i of out is decomposed over the merged dims (at most
//              kMaxDims) into each input's offset, with stride 0 along broadcast dims.
// Where's mask may be i32 or any floating dtype: operand 0 has its own element type M.
// Tests: build/tests/test_cuda_ops (GPU vs CPU). Benchmark: build/bench/cuda_memory.
#include "kernels/cuda/common.cuh"
#include "kernels/elementwise.h"
#include "kernels/elementwise_table.h"
#include "kernels/loop_plan.h"

namespace mg::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxDims = 8;  // merged dims; broadcasting a rank-9 tensor with no mergeable dim is refused

// The loop plan in a form a kernel takes by value.
template <int N>
struct DevicePlan {
  int rank = 0;
  std::int64_t sizes[kMaxDims] = {};
  std::int64_t strides[kMaxDims][N] = {};  // each input's element stride along each merged dim
};

// Operand 0 has element type M (Where's mask), the others T.
template <class M, class T, int N>
struct Inputs {
  const M* first;
  const T* rest[N > 1 ? N - 1 : 1];
};

template <class M, class T, int N>
__device__ __forceinline__ float load(const Inputs<M, T, N>& in, int k, std::int64_t offset) {
  return k == 0 ? to_float(in.first[offset]) : to_float(in.rest[k - 1][offset]);
}

template <int N, class F>
__device__ __forceinline__ float apply(const F& f, const float (&x)[N]) {
  if constexpr (N == 1)
    return f(x[0]);
  else if constexpr (N == 2)
    return f(x[0], x[1]);
  else
    return f(x[0], x[1], x[2]);
}

// Every operand has out's shape. `vectorized`: all pointers are aligned to a Pack.
template <class M, class T, int N, class F>
__global__ void flat_kernel(T* out, Inputs<M, T, N> in, std::int64_t n, bool vectorized, F f) {
  std::int64_t done = 0;
  if (vectorized) {
    const std::int64_t packs = n / kPack;
    for (std::int64_t p = first_index(); p < packs; p += grid_stride()) {
      float x[N][kPack];
      const Pack<M> first = reinterpret_cast<const Pack<M>*>(in.first)[p];
      for (int j = 0; j < kPack; ++j) x[0][j] = to_float(first.v[j]);
      for (int k = 1; k < N; ++k) {
        const Pack<T> pack = reinterpret_cast<const Pack<T>*>(in.rest[k - 1])[p];
        for (int j = 0; j < kPack; ++j) x[k][j] = to_float(pack.v[j]);
      }
      Pack<T> result;
      for (int j = 0; j < kPack; ++j) {
        float args[N];
        for (int k = 0; k < N; ++k) args[k] = x[k][j];
        result.v[j] = from_float<T>(apply<N>(f, args));
      }
      reinterpret_cast<Pack<T>*>(out)[p] = result;
    }
    done = packs * kPack;
  }
  for (std::int64_t i = done + first_index(); i < n; i += grid_stride()) {
    float args[N];
    for (int k = 0; k < N; ++k) args[k] = load(in, k, i);
    out[i] = from_float<T>(apply<N>(f, args));
  }
}

template <class M, class T, int N, class F>
__global__ void broadcast_kernel(T* out, Inputs<M, T, N> in, DevicePlan<N> plan, std::int64_t n, F f) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    std::int64_t offset[N] = {};
    std::int64_t rest = i;  // out is contiguous: its offset is i itself
    for (int d = plan.rank - 1; d >= 0; --d) {
      const std::int64_t index = rest % plan.sizes[d];
      rest /= plan.sizes[d];
      for (int k = 0; k < N; ++k) offset[k] += index * plan.strides[d][k];
    }
    float args[N];
    for (int k = 0; k < N; ++k) args[k] = load(in, k, offset[k]);
    out[i] = from_float<T>(apply<N>(f, args));
  }
}

template <class M, class T, std::size_t N, class F>
void launch(Tensor& out, const std::array<const Tensor*, N>& inputs, const F& f, const char* name) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  Inputs<M, T, static_cast<int>(N)> in{};
  in.first = device_ptr<const M>(*inputs[0]);
  for (std::size_t k = 1; k < N; ++k) in.rest[k - 1] = device_ptr<const T>(*inputs[k]);

  const LoopPlan<N> plan = make_plan(out.shape(), inputs);
  bool flat = plan.sizes.size() == 1;
  for (std::size_t k = 1; k <= N; ++k) flat = flat && plan.strides[0][k] == 1;
  mg::cuda::DeviceGuard guard(out.device().index);
  const unsigned blocks = blocks_for(flat ? (n + kPack - 1) / kPack : n, kThreads);
  if (flat) {
    bool vectorized = aligned(out.data_ptr(), sizeof(Pack<T>)) && aligned(in.first, sizeof(Pack<M>));
    for (std::size_t k = 1; k < N; ++k) vectorized = vectorized && aligned(in.rest[k - 1], sizeof(Pack<T>));
    MG_LAUNCH(flat_kernel, blocks, kThreads, 0, stream_of(out))(device_ptr<T>(out), in, n, vectorized, f);
  } else {
    MG_CHECK(plan.sizes.size() <= static_cast<std::size_t>(kMaxDims),
             "CUDA kernel {}: broadcasting to {} needs {} loop dims, more than the {} the kernel takes; "
             "reshape the operands to fewer dims",
             name, out.shape(), plan.sizes.size(), kMaxDims);
    DevicePlan<static_cast<int>(N)> device_plan;
    device_plan.rank = static_cast<int>(plan.sizes.size());
    for (int d = 0; d < device_plan.rank; ++d) {
      device_plan.sizes[d] = plan.sizes[static_cast<std::size_t>(d)];
      for (std::size_t k = 0; k < N; ++k) device_plan.strides[d][k] = plan.strides[static_cast<std::size_t>(d)][k + 1];
    }
    MG_LAUNCH(broadcast_kernel, blocks, kThreads, 0, stream_of(out))(device_ptr<T>(out), in, device_plan, n, f);
  }
  MG_CUDA_LAUNCHED();
}

// The kernels read operand k (k >= first) as out's element type: a tensor of another dtype would be
// reinterpreted bit by bit, so it is refused (the CPU loop converts; the ops never pass one).
template <std::size_t N>
void require_out_dtype(const std::array<const Tensor*, N>& inputs, std::size_t first, const Tensor& out,
                       const char* name) {
  for (std::size_t k = first; k < N; ++k)
    MG_CHECK(inputs[k]->dtype() == out.dtype(),
             "CUDA kernel {}: input {} is {} but the output is {}; on a GPU every "
             "input has the output's dtype (where's mask excepted): cast it first",
             name, k, inputs[k]->dtype(), out.dtype());
}

// Every operand has out's dtype T.
template <std::size_t N, class F>
void run(Tensor& out, const std::array<const Tensor*, N>& inputs, const F& f, const char* name) {
  require_out_dtype(inputs, 0, out, name);
  visit_device_floating(out.dtype(), name, [&](auto zero) {
    using T = decltype(zero);
    launch<T, T>(out, inputs, f, name);
  });
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, Tensor& out, Scalars s) {
  visit_unary(op, s, [&](auto f, const char* name) { run(out, std::array<const Tensor*, 1>{&x}, f, name); });
}

void unary_grad(UnaryOp op, const Tensor& g, const Tensor& saved, Tensor& dx, Scalars s) {
  visit_unary_grad(op, s, [&](auto f, const char* name) {
    run(dx, std::array<const Tensor*, 2>{&g, &saved}, f, name);
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  visit_binary(op, [&](auto f, const char* name) { run(out, std::array<const Tensor*, 2>{&a, &b}, f, name); });
}

void ternary(TernaryOp op, const Tensor& x, const Tensor& y, const Tensor& z, Tensor& out) {
  const std::array<const Tensor*, 3> inputs{&x, &y, &z};
  if (op != TernaryOp::Where || x.dtype() == out.dtype()) {
    visit_ternary(op, [&](auto f, const char* name) { run(out, inputs, f, name); });
    return;
  }
  // where(mask, a, b) with a mask of another dtype: operand 0 is read as its own type.
  require_out_dtype(inputs, 1, out, "where");
  visit_device_floating(out.dtype(), "where", [&](auto out_zero) {
    using T = decltype(out_zero);
    visit_device_dtype(x.dtype(), "where", [&](auto mask_zero) {
      using M = decltype(mask_zero);
      launch<M, T>(out, inputs, functors::Where{}, "where");
    });
  });
}

}  // namespace mg::kernels::cuda
