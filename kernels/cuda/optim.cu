// CUDA optimizer updates (kernels/optim.h): sgd, adam/adamw and adagrad over one parameter tensor,
// with the optional fused parts (FusedStep: 1/S, found_inf, the f16 model copy), and the device-side
// update counts.
//
// The math is the functors of kernels/optim_functors.h, the same ones the CPU loop calls, in f32
// with the same rounding of every intermediate, so a GPU update equals the CPU's bit for bit (the
// lost-update counts included). Parameter, gradient and state are read in their dtypes (the state
// in the parameter's, or f32), widened to f32, updated, and rounded once on store.
//
// Launch geometry: a grid-stride loop over packs of 4 elements, kThreads threads a block, as many
// blocks as the GPU holds at once (grid_for: one wave, never a partial last one), fewer for small
// tensors; one vector load per tensor and pack when every pointer is aligned to a pack, then the
// tail (or everything, when some pointer is not aligned) element by element.
// FusedStep: each block first reads found_inf (written by the check or another kernel before it on
// the stream) and returns at once when it is set; every thread reads inv_scale; an f16/bf16
// parameter's value is rounded as fused.rounding says (rounded_store: nearest, stochastic with element
// i's Philox word, or Kahan with its compensation read and written beside it); the model copy is
// written from the stored parameter in the same pass.
// Adam's and Adagrad's step counts: every thread reads the count (i32 [1]) and builds the constants
// of the next update itself (AdamUpdate::at_step: the bias corrections; AdagradUpdate::at_step: the
// decayed rate; in f64); a one-thread kernel queued after the update adds 1 unless found_inf is set,
// so no block can read a count that another already advanced.
// Counting: each thread counts its non-zero and lost updates, a block adds its threads' counts
// (warp reductions, then shared memory) and one thread adds them to the device's two counters with
// atomicAdd. clear_update_count zeroes them at the start of a step (a one-thread kernel that leaves
// them when the step's found_inf is set); read_update_count copies them to the host: the one place
// the host waits, and only when asked.
// Tests: build/tests/test_cuda_amp (GPU vs CPU), build/tests/test_cuda_host_waits (Adagrad's step
// count on the device). Benchmark: build/bench/cuda_memory (sgd, adam).
#include <algorithm>
#include <array>
#include <mutex>
#include <unordered_map>

#include "kernels/cuda/common.cuh"
#include "kernels/optim.h"
#include "kernels/optim_functors.h"

namespace mg::kernels::cuda {

namespace {

constexpr int kThreads = 256;

// The tensors of one update: the parameter in P, the gradient in G, S state tensors in T (P's, or f32
// beside an f16/bf16 parameter: Adam's state_dtype).
template <class P, class G, class T, int S>
struct UpdateTensors {
  P* param;
  const G* grad;
  T* state[S > 0 ? S : 1];
  void* model_copy;  // null, or the model's copy of the parameter in model_dtype
  DType model_dtype;
  UpdateRounding rounding;  // how an f16/bf16 parameter stores its update (kernels/optim.h)
  stochastic::RoundingStream stream;  // Stochastic's words
  P* compensation;  // Kahan's, in the parameter's dtype; null otherwise
  std::int64_t numel;
  bool vectorized;  // every pointer aligned to a pack of its element type
};

struct Counts {
  unsigned nonzero = 0, lost = 0;
};

// Whether a parameter of type P stores its updates stochastically (an f32 one never rounds).
template <class P>
__device__ __forceinline__ bool stochastic_store(UpdateRounding rounding) {
  return (std::is_same_v<P, __half> || std::is_same_v<P, bf16>)&&rounding == UpdateRounding::Stochastic;
}

// Element i's updated value, `updated` from `before`, rounded into P as t.rounding says: the same
// values as the CPU's round_for_store (the same stochastic_round and kahan_store). `random` is element
// i's word, rounding_word(t.stream, i), where the rounding is stochastic.
template <class P, class G, class T, int S>
__device__ __forceinline__ P rounded_store(const UpdateTensors<P, G, T, S>& t, std::int64_t i, float before,
                                           float updated, std::uint32_t random) {
  if constexpr (std::is_same_v<P, __half> || std::is_same_v<P, bf16>) {
    constexpr DType dtype = std::is_same_v<P, __half> ? DType::F16 : DType::BF16;
    if (t.rounding == UpdateRounding::Stochastic)
      return from_float<P>(stochastic::stochastic_round(updated, dtype, random));
    if (t.rounding == UpdateRounding::Kahan) {
      float debt = to_float(t.compensation[i]);
      const float stored = kahan_store(before, updated, debt, [](float x) { return to_float(from_float<P>(x)); });
      t.compensation[i] = from_float<P>(debt);
      return from_float<P>(stored);
    }
  }
  return from_float<P>(updated);
}

// One element, i: updates p (f32) and state[0..S) for the gradient g (scaled by inv_scale), counts
// the update, and returns p rounded to P (with the word `random` where that is stochastic).
template <class P, class G, class T, int S, class Update>
__device__ __forceinline__ P update_element(const UpdateTensors<P, G, T, S>& t, std::int64_t i, std::uint32_t random,
                                            const Update& update, float& p, float g, float* state, float inv_scale,
                                            Counts& counts) {
  const float before = p;
  const bool changed = update(p, __fmul_rn(g, inv_scale), state);
  const P stored = rounded_store(t, i, before, p, random);
  counts.nonzero += changed;
  counts.lost += changed && to_float(stored) == before;
  return stored;
}

// Adds the block's counts to the device's counters: one atomicAdd per counter and block, none when 0.
__device__ void add_block_counts(Counts counts, unsigned long long* counters) {
  MG_SHARED(unsigned, block_nonzero);
  MG_SHARED(unsigned, block_lost);
  if (threadIdx.x == 0) block_nonzero = block_lost = 0;
  __syncthreads();
  const unsigned warp_nonzero = __reduce_add_sync(0xffffffffu, counts.nonzero);
  const unsigned warp_lost = __reduce_add_sync(0xffffffffu, counts.lost);
  if (threadIdx.x % 32 == 0) {
    if (warp_nonzero) atomicAdd(&block_nonzero, warp_nonzero);
    if (warp_lost) atomicAdd(&block_lost, warp_lost);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (block_nonzero) atomicAdd(&counters[0], static_cast<unsigned long long>(block_nonzero));
    if (block_lost) atomicAdd(&counters[1], static_cast<unsigned long long>(block_lost));
  }
}

// The functor of this update: Adam's and Adagrad's need the parameter's step count (read here, on the
// device).
template <class Update>
__device__ __forceinline__ Update prepared(const Update& update, const std::int32_t* step) {
  if constexpr (requires { update.at_step(1); })
    return update.at_step(std::int64_t{*step} + 1);
  else
    return update;
}

template <class P, class G, class T, int S, class Update>
__global__ void __launch_bounds__(kThreads)
    update_kernel(UpdateTensors<P, G, T, S> t, Update update_at_step, const std::int32_t* step,
                  const float* inv_scale_ptr, const float* found_inf, unsigned long long* counters) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;  // a skipped step: the whole grid leaves
  const Update update = prepared(update_at_step, step);
  const float inv_scale = inv_scale_ptr != nullptr ? *inv_scale_ptr : 1.0f;
  Counts counts;
  std::int64_t done = 0;
  if (t.vectorized) {
    const std::int64_t packs = t.numel / kPack;
    for (std::int64_t k = first_index(); k < packs; k += grid_stride()) {
      const Pack<P> p_in = reinterpret_cast<const Pack<P>*>(t.param)[k];
      const Pack<G> g_in = reinterpret_cast<const Pack<G>*>(t.grad)[k];
      Pack<T> s_in[S > 0 ? S : 1], s_out[S > 0 ? S : 1];
      Pack<P> p_out;
      for (int m = 0; m < S; ++m) s_in[m] = reinterpret_cast<const Pack<T>*>(t.state[m])[k];
      // A pack is one Philox block: elements 4k..4k+3 take its four words (rounding_words).
      static_assert(kPack == 4);
      const philox::Block words = stochastic_store<P>(t.rounding) ? stochastic::rounding_words(t.stream, k)
                                                                  : philox::Block{};
#pragma unroll
      for (int j = 0; j < kPack; ++j) {
        float p = to_float(p_in.v[j]), state[S > 0 ? S : 1];
        for (int m = 0; m < S; ++m) state[m] = to_float(s_in[m].v[j]);
        p_out.v[j] = update_element(t, k * kPack + j, words.word[j], update, p, to_float(g_in.v[j]), state, inv_scale,
                                    counts);
        for (int m = 0; m < S; ++m) s_out[m].v[j] = from_float<T>(state[m]);
      }
      reinterpret_cast<Pack<P>*>(t.param)[k] = p_out;
      for (int m = 0; m < S; ++m) reinterpret_cast<Pack<T>*>(t.state[m])[k] = s_out[m];
      if (t.model_copy) {
        visit_floating_on_device(t.model_dtype, [&](auto model_type) {
          using M = decltype(model_type);
          Pack<M> copy;
          for (int j = 0; j < kPack; ++j) copy.v[j] = convert<M>(p_out.v[j]);
          reinterpret_cast<Pack<M>*>(t.model_copy)[k] = copy;
        });
      }
    }
    done = packs * kPack;
  }
  for (std::int64_t i = done + first_index(); i < t.numel; i += grid_stride()) {
    float p = to_float(t.param[i]), state[S > 0 ? S : 1];
    for (int m = 0; m < S; ++m) state[m] = to_float(t.state[m][i]);
    const std::uint32_t random = stochastic_store<P>(t.rounding) ? stochastic::rounding_word(t.stream, i) : 0u;
    const P stored = update_element(t, i, random, update, p, to_float(t.grad[i]), state, inv_scale, counts);
    t.param[i] = stored;
    for (int m = 0; m < S; ++m) t.state[m][i] = from_float<T>(state[m]);
    if (t.model_copy) {
      visit_floating_on_device(t.model_dtype, [&](auto model_type) {
        using M = decltype(model_type);
        static_cast<M*>(t.model_copy)[i] = convert<M>(stored);
      });
    }
  }
  add_block_counts(counts, counters);
}

// Zeroes the update counts at the start of a step, unless the step is skipped (found_inf set).
__global__ void clear_counts_kernel(unsigned long long* counters, const float* found_inf) {
  if (found_inf == nullptr || *found_inf == 0.0f) counters[0] = counters[1] = 0;
}

// The step count (Adam's, Adagrad's) + 1, after every block of the update has read it; not when the
// step is skipped.
__global__ void advance_step_kernel(std::int32_t* step, const float* found_inf) {
  if (found_inf == nullptr || *found_inf == 0.0f) *step += 1;
}

// Blocks for the grid-stride loop over `packs` packs: never more than the GPU holds at once, so that
// there is no last, partial wave (an Adam kernel uses ~40 registers a thread, so an H100 SM holds 6
// blocks of 256, and a fixed grid of 132 * 32 blocks would run 5.3 waves: 11% of the time idle).
// Queried once per kernel, on the device current at its first launch.
template <class P, class G, class T, int S, class Update>
unsigned grid_for(std::int64_t packs) {
  static const std::int64_t resident = [] {
    int device = 0, multiprocessors = 0, blocks_per_multiprocessor = 0;
    MG_CUDA_CHECK(cudaGetDevice(&device));
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
    MG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_multiprocessor,
                                                                update_kernel<P, G, T, S, Update>, kThreads, 0));
    return std::int64_t{multiprocessors} * blocks_per_multiprocessor;
  }();
  const std::int64_t wanted = (packs + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(wanted, 1, resident));
}

// The device's running counts [nonzero, lost], cleared by clear_update_count. Allocated on first
// use with cudaMalloc and kept for the life of the process (16 bytes a device), outside the
// caching allocator so that they never show in its statistics.
unsigned long long* update_counters(int device_index) {
  static std::mutex mutex;
  static std::unordered_map<int, unsigned long long*> counters;
  std::lock_guard lock(mutex);
  unsigned long long*& device_counters = counters[device_index];
  if (device_counters == nullptr) {
    mg::cuda::DeviceGuard guard(device_index);
    MG_CUDA_CHECK(cudaMalloc(&device_counters, 2 * sizeof(unsigned long long)));
    MG_CUDA_CHECK(cudaMemsetAsync(device_counters, 0, 2 * sizeof(unsigned long long), mg::cuda::stream(device_index)));
  }
  return device_counters;
}

// The state's element type T: the parameter's P, or f32 (Adam's state_dtype beside an f16/bf16
// parameter); calls fn(T{}). (Only these two: a kernel for every pair of types would triple the
// update kernels the library carries.)
template <class P, int S, class Fn>
void visit_state_type(const char* kernel, const Tensor& param, std::array<Tensor*, S> state, Fn&& fn) {
  if constexpr (S == 0) {
    fn(P{});
  } else {
    const DType state_dtype = state[0]->dtype();
    for (Tensor* s : state)
      MG_CHECK(s->dtype() == state_dtype && (state_dtype == param.dtype() || state_dtype == DType::F32),
               "CUDA kernel {}: the optimizer state is {} but the parameter is {}; on a GPU the state has the "
               "parameter's dtype or f32",
               kernel, s->dtype(), param.dtype());
    if (state_dtype == param.dtype())
      fn(P{});
    else
      fn(float{});
  }
}

// Checks the dtypes, then launches update_kernel for (param, grad, state) with the f32 functor;
// `step`: Adam's or Adagrad's count (null for SGD).
template <int S, class Update>
void launch_update(const char* kernel, Tensor& param, const Tensor& grad, std::array<Tensor*, S> state, Tensor* step,
                   const FusedStep& fused, const Update& update) {
  Tensor* model_copy = fused.model_copy;
  if (model_copy) visit_device_floating(model_copy->dtype(), kernel, [](auto) {});
  const std::int64_t numel = param.numel();
  const bool kahan = fused.rounding == UpdateRounding::Kahan && is_low_precision(param.dtype());
  mg::cuda::DeviceGuard guard(param.device().index);
  unsigned long long* counters = update_counters(param.device().index);
  const float* found_inf = fused.scaling.found_inf ? device_ptr<const float>(*fused.scaling.found_inf) : nullptr;
  visit_device_floating(param.dtype(), kernel, [&](auto param_type) {
    using P = decltype(param_type);
    visit_device_floating(grad.dtype(), kernel, [&](auto grad_type) {
      using G = decltype(grad_type);
      visit_state_type<P, S>(kernel, param, state, [&](auto state_type) {
        using T = decltype(state_type);
        UpdateTensors<P, G, T, S> t{.param = device_ptr<P>(param),
                                    .grad = device_ptr<const G>(grad),
                                    .state = {},
                                    .model_copy = model_copy ? model_copy->data_ptr() : nullptr,
                                    .model_dtype = model_copy ? model_copy->dtype() : DType::F32,
                                    .rounding = fused.rounding,
                                    .stream = fused.stream,
                                    .compensation = kahan ? device_ptr<P>(*fused.compensation) : nullptr,
                                    .numel = numel,
                                    .vectorized = aligned(param.data_ptr(), sizeof(Pack<P>)) &&
                                                  aligned(grad.data_ptr(), sizeof(Pack<G>))};
        for (int m = 0; m < S; ++m) {
          t.state[m] = device_ptr<T>(*state[m]);
          t.vectorized = t.vectorized && aligned(t.state[m], sizeof(Pack<T>));
        }
        if (model_copy) t.vectorized = t.vectorized && aligned(t.model_copy, kPack * dtype_size(model_copy->dtype()));
        if (kahan) t.vectorized = t.vectorized && aligned(t.compensation, sizeof(Pack<P>));
        const unsigned blocks = grid_for<P, G, T, S, Update>((numel + kPack - 1) / kPack);
        MG_LAUNCH(update_kernel, blocks, kThreads, 0, stream_of(param))
        (t, update, step ? device_ptr<const std::int32_t>(*step) : nullptr,
         fused.scaling.inv_scale ? device_ptr<const float>(*fused.scaling.inv_scale) : nullptr, found_inf, counters);
        MG_CUDA_LAUNCHED();
      });
    });
  });
  if (step) {
    MG_LAUNCH(advance_step_kernel, 1, 1, 0, stream_of(param))(device_ptr<std::int32_t>(*step), found_inf);
    MG_CUDA_LAUNCHED();
  }
}

}  // namespace

void sgd(Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdHyper& hyper, UpdateCount&,
         const FusedStep& fused) {
  if (momentum_buffer)
    launch_update<1>("sgd", param, grad, {momentum_buffer}, nullptr, fused, SgdUpdate<float, true>(hyper));
  else
    launch_update<0>("sgd", param, grad, {}, nullptr, fused, SgdUpdate<float, false>(hyper));
}

void adam(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& step, const AdamHyper& hyper,
          UpdateCount&, const FusedStep& fused) {
  launch_update<2>("adam", param, grad, {&exp_avg, &exp_avg_sq}, &step, fused, AdamUpdate<float>(hyper));
}

void adagrad(Tensor& param, const Tensor& grad, Tensor& sum, Tensor& step, const AdagradHyper& hyper, UpdateCount&,
             const FusedStep& fused) {
  launch_update<1>("adagrad", param, grad, {&sum}, &step, fused, AdagradUpdate<float>(hyper));
}

void clear_update_count(Device device, const Tensor* found_inf) {
  mg::cuda::DeviceGuard guard(device.index);
  MG_LAUNCH(clear_counts_kernel, 1, 1, 0, mg::cuda::stream(device.index))
  (update_counters(device.index), found_inf ? device_ptr<const float>(*found_inf) : nullptr);
  MG_CUDA_LAUNCHED();
}

void read_update_count(Device device, UpdateCount& count) {
  mg::cuda::DeviceGuard guard(device.index);
  unsigned long long host[2];
  MG_CUDA_CHECK(cudaMemcpyAsync(host, update_counters(device.index), sizeof host, cudaMemcpyDeviceToHost,
                                mg::cuda::stream(device.index)));
  mg::cuda::synchronize(device.index);
  count.nonzero += static_cast<std::int64_t>(host[0]);
  count.lost += static_cast<std::int64_t>(host[1]);
}

}  // namespace mg::kernels::cuda
