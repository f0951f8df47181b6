// CUDA reductions along n of an [outer, n, inner] view: sum, mean, and max with the position of the
// first maximum (contract: kernels/reduce.h; reference: kernels/cpu/reduce.cpp).
//
//   x [outer, n, inner] (f32, f16, bf16)  ->  out [outer, inner] (x's dtype or f32), indices i32
//
// Values are read into f32, accumulated in f32 and rounded once into out. Max follows the CPU's rule
// exactly: a NaN beats every number and the first NaN stays; otherwise the larger value wins and a tie
// goes to the earlier position (so of -0 and +0 the first is returned, as on the CPU).
//
// Launch geometry: 1-D grid-stride loops of 256-thread blocks (no count can reach a grid limit).
//   rows     inner == 1: a team reduces each row, a warp when n <= 1024 (8 rows per block) and the
//            whole block otherwise. Threads stride the row (coalesced); the team then combines in a
//            fixed order (xor shuffles, then the warps' results in warp order).
//   columns  inner > 1: one thread per output walks j = 0, 1, ... in order, adjacent threads reading
//            adjacent i (coalesced).
// A thread's own terms are summed pairwise (ThreadSum: leaves of 16 terms in order, the leaves added
// like the carries of a binary counter), as the CPU's are: a running sum over thousands of terms would
// carry each term through thousands of roundings (kernels/cpu/reduce.cpp). With one part a column's
// sum is the CPU's tree, bit for bit.
// Few outputs over a long n would leave most of the GPU idle (the sum of a whole tensor is one row;
// a bias gradient is [1, batch, features]), so n is then cut into `parts` chunks: pass 1 writes an f32
// partial (and its index, for max) per (output, part), and pass 2 is the same kernel reducing those
// partials in part order. Every order is fixed, so results are deterministic run to run.
//
// Test: build/tests/test_cuda_kernels -tc='cuda reduce*'. Benchmark: none of its own yet; profile
// it inside build/bench/train_step with nsys.
#include <algorithm>
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/reduce.h"

namespace mg::kernels::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kNone = INT_MAX;  // the index of "no element yet": loses every tie, so any real element beats it

// One pass over an [outer, length, inner] view, each output's `length` cut into `parts` chunks.
struct Pass {
  ReduceOp op;
  std::int64_t outer, length, inner;
  std::int64_t parts, chunk;
  std::int64_t count;  // n of the whole reduction: what Mean divides by
  bool final;  // write the result into out (Mean divided), or raw f32 partials
};

// A running sum, or a maximum and where it is.
struct Partial {
  float value;
  int index;
};

__device__ __forceinline__ Partial start(ReduceOp op) {
  return op == ReduceOp::Max ? Partial{-INFINITY, kNone} : Partial{0.0f, 0};
}

// The CPU's max rule as a symmetric choice between two candidates (so every lane of an xor
// butterfly ends with the same answer).
__device__ __forceinline__ Partial better(Partial a, Partial b) {
  const bool a_nan = isnan(a.value), b_nan = isnan(b.value);
  if (a_nan != b_nan) return a_nan ? a : b;
  if (a_nan || a.value == b.value) return a.index <= b.index ? a : b;
  return a.value > b.value ? a : b;
}

__device__ __forceinline__ Partial combine(ReduceOp op, Partial a, Partial b) {
  return op == ReduceOp::Max ? better(a, b) : Partial{a.value + b.value, 0};
}

// One thread's pairwise sum of the terms it is handed in order: kLeafTerms terms to a leaf, added in
// order, then the leaves pairwise (the 2k-th and (2k+1)-th leaves, then pairs of those sums, ...),
// the CPU's PairwiseSum for one column. 40 levels hold 2^40 leaves.
struct ThreadSum {
  static constexpr int kLeafTerms = 16;
  float leaf = 0.0f;
  int in_leaf = 0, levels = 0;
  long long leaves = 0;
  float partial[40];

  __device__ void add(float value) {
    leaf += value;
    if (++in_leaf == kLeafTerms) close_leaf();
  }
  __device__ float total() {
    if (in_leaf > 0) close_leaf();
    float sum = levels > 0 ? partial[levels - 1] : 0.0f;
    for (int level = levels - 2; level >= 0; --level) sum = partial[level] + sum;
    return sum;
  }

 private:
  __device__ void close_leaf() {
    partial[levels++] = leaf;
    for (long long pushed = leaves++; pushed & 1; pushed >>= 1, --levels) partial[levels - 2] += partial[levels - 1];
    leaf = 0.0f;
    in_leaf = 0;
  }
};

// Combines the partials of a team: a warp (kTeam == 32) or the whole block. Every thread gets the result.
template <int kTeam>
__device__ Partial team_reduce(ReduceOp op, Partial p) {
  for (int offset = 16; offset > 0; offset /= 2)
    p = combine(op, p, {__shfl_xor_sync(0xffffffffu, p.value, offset), __shfl_xor_sync(0xffffffffu, p.index, offset)});
  if constexpr (kTeam > 32) {
    MG_SHARED(Partial[kTeam / 32], warps);
    __syncthreads();  // the previous row's readers of `warps` are done
    if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = p;
    __syncthreads();
    p = warps[0];
    for (int w = 1; w < kTeam / 32; ++w) p = combine(op, p, warps[w]);
  }
  return p;
}

// Writes output (or partial) `at`. An empty max (n == 0) gives the CPU's 0 at index 0.
template <class Out>
__device__ __forceinline__ void emit(const Pass& pass, Partial p, std::int64_t at, Out* out, std::int32_t* out_index) {
  if (pass.final && pass.op == ReduceOp::Mean) p.value /= static_cast<float>(pass.count);
  if (pass.final && pass.op == ReduceOp::Max && p.index == kNone) p = {0.0f, 0};
  out[at] = from_float<Out>(p.value);
  if (out_index) out_index[at] = p.index;
}

// inner == 1. Item = (row, part), written at item: out [outer] or partials [outer, parts].
// x_index (pass 2 of max) gives each element's position; otherwise it is j.
template <class In, class Out, int kTeam>
__global__ void __launch_bounds__(kBlock)
    reduce_rows(const In* x, const std::int32_t* x_index, Pass pass, Out* out, std::int32_t* out_index) {
  constexpr int kTeamsPerBlock = kBlock / kTeam;
  const int rank = threadIdx.x % kTeam;
  const std::int64_t items = pass.outer * pass.parts;
  // The loop condition is the same for the whole team (block-wide when kTeam == kBlock): barriers are safe.
  for (std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * kTeamsPerBlock + threadIdx.x / kTeam; item < items;
       item += static_cast<std::int64_t>(gridDim.x) * kTeamsPerBlock) {
    const std::int64_t row = item / pass.parts, begin = item % pass.parts * pass.chunk;
    const std::int64_t end = min(pass.length, begin + pass.chunk);
    const In* values = x + row * pass.length;
    Partial p = start(pass.op);
    if (pass.op == ReduceOp::Max) {
#pragma unroll 4
      for (std::int64_t j = begin + rank; j < end; j += kTeam) {
        const int at = x_index ? x_index[row * pass.length + j] : static_cast<int>(j);
        p = combine(pass.op, p, {to_float(values[j]), at});
      }
    } else {
      ThreadSum sum;
      for (std::int64_t j = begin + rank; j < end; j += kTeam) sum.add(to_float(values[j]));
      p.value = sum.total();
    }
    p = team_reduce<kTeam>(pass.op, p);
    if (rank == 0) emit(pass, p, item, out, out_index);
  }
}

// inner > 1. Thread t = (part, output): out [outer * inner] or partials [parts, outer * inner].
template <class In, class Out>
__global__ void __launch_bounds__(kBlock)
    reduce_columns(const In* x, const std::int32_t* x_index, Pass pass, Out* out, std::int32_t* out_index) {
  const std::int64_t outputs = pass.outer * pass.inner;
  for (std::int64_t t = first_index(); t < outputs * pass.parts; t += grid_stride()) {
    const std::int64_t output = t % outputs, begin = t / outputs * pass.chunk;
    const std::int64_t end = min(pass.length, begin + pass.chunk);
    const std::int64_t o = output / pass.inner, i = output % pass.inner;
    Partial p = start(pass.op);
    if (pass.op == ReduceOp::Max) {
      for (std::int64_t j = begin; j < end; ++j) {
        const std::int64_t at = (o * pass.length + j) * pass.inner + i;
        p = combine(pass.op, p, {to_float(x[at]), x_index ? x_index[at] : static_cast<int>(j)});
      }
    } else {
      ThreadSum sum;
      for (std::int64_t j = begin; j < end; ++j) sum.add(to_float(x[(o * pass.length + j) * pass.inner + i]));
      p.value = sum.total();
    }
    emit(pass, p, t, out, out_index);
  }
}

template <class In, class Out>
void launch_rows(const In* x, const std::int32_t* x_index, const Pass& pass, Out* out, std::int32_t* out_index,
                 cudaStream_t stream) {
  const std::int64_t items = pass.outer * pass.parts;
  if (pass.chunk <= 1024) {
    MG_LAUNCH((reduce_rows<In, Out, 32>), blocks_for(items * 32, kBlock), kBlock, 0, stream)
    (x, x_index, pass, out, out_index);
  } else {
    MG_LAUNCH((reduce_rows<In, Out, kBlock>), blocks_for(items * kBlock, kBlock), kBlock, 0, stream)
    (x, x_index, pass, out, out_index);
  }
  MG_CUDA_LAUNCHED();
}

template <class In, class Out>
void launch_columns(const In* x, const std::int32_t* x_index, const Pass& pass, Out* out, std::int32_t* out_index,
                    cudaStream_t stream) {
  const std::int64_t threads = pass.outer * pass.inner * pass.parts;
  MG_LAUNCH((reduce_columns<In, Out>), blocks_for(threads, kBlock), kBlock, 0, stream)
  (x, x_index, pass, out, out_index);
  MG_CUDA_LAUNCHED();
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// How many chunks to cut n into. Rows: about 1024 blocks in all (8 resident per SM on 132 SMs), each
// chunk at least 8192 elements. Columns: about 2^18 threads in all, each chunk at least 32 elements,
// and at most 256 parts so that pass 2's threads stay short.
std::int64_t parts_for(const ReduceShape& s) {
  const std::int64_t outputs = s.outer * s.inner;
  const std::int64_t parts = s.inner == 1 ? std::min(ceil_div(1024, outputs), ceil_div(s.n, 8192))
                                          : std::min({ceil_div(std::int64_t{1} << 18, outputs), ceil_div(s.n, 32),
                                                      std::int64_t{256}});
  return std::max<std::int64_t>(parts, 1);
}

template <class In, class Out>
void reduce_typed(ReduceOp op, const Tensor& x, const ReduceShape& s, Tensor& out, Tensor* indices) {
  const cudaStream_t stream = stream_of(out);
  const bool rows = s.inner == 1;
  std::int64_t parts = parts_for(s);
  const std::int64_t chunk = std::max<std::int64_t>(ceil_div(s.n, parts), 1);
  parts = std::max<std::int64_t>(ceil_div(s.n, chunk), 1);  // no empty chunk
  std::int32_t* out_index = indices ? device_ptr<std::int32_t>(*indices) : nullptr;
  const In* in = device_ptr<In>(x);
  Pass pass{op, s.outer, s.n, s.inner, parts, chunk, s.n, parts == 1};
  if (parts == 1) {
    if (rows)
      launch_rows(in, nullptr, pass, device_ptr<Out>(out), out_index, stream);
    else
      launch_columns(in, nullptr, pass, device_ptr<Out>(out), out_index, stream);
    return;
  }
  // Pass 1 into f32 partials; max always carries positions, since they decide ties (and NaN payloads).
  const std::int64_t outputs = s.outer * s.inner;
  Tensor partial = Tensor::empty({outputs * parts}, {.dtype = DType::F32, .device = out.device()});
  Tensor partial_index;
  std::int32_t* where = nullptr;
  if (op == ReduceOp::Max) {
    partial_index = Tensor::empty({outputs * parts}, {.dtype = DType::I32, .device = out.device()});
    where = device_ptr<std::int32_t>(partial_index);
  }
  // Pass 2 reduces the partials in part order: rows are [outer, parts]; columns are [1, parts, outputs].
  if (rows) {
    launch_rows(in, nullptr, pass, device_ptr<float>(partial), where, stream);
    const Pass finish{op, s.outer, parts, 1, 1, parts, s.n, true};
    launch_rows(device_ptr<float>(partial), where, finish, device_ptr<Out>(out), out_index, stream);
  } else {
    launch_columns(in, nullptr, pass, device_ptr<float>(partial), where, stream);
    const Pass finish{op, 1, parts, outputs, 1, parts, s.n, true};
    launch_columns(device_ptr<float>(partial), where, finish, device_ptr<Out>(out), out_index, stream);
  }
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, const ReduceShape& s, Tensor& out, Tensor* indices) {
  if (out.numel() == 0) return;
  mg::cuda::DeviceGuard guard(out.device().index);
  visit_device_floating(x.dtype(), "reduce", [&](auto in) {
    using In = decltype(in);
    if (out.dtype() == x.dtype()) return reduce_typed<In, In>(op, x, s, out, indices);
    MG_CHECK(out.dtype() == DType::F32, "CUDA kernel reduce: the output must be {} (the input's dtype) or f32, got {}",
             x.dtype(), out.dtype());
    reduce_typed<In, float>(op, x, s, out, indices);
  });
}

}  // namespace mg::kernels::cuda
