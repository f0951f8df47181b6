// CPU optimizer updates (kernels/optim.h). Each parameter is processed in chunks: the parameter,
// gradient and state are read as C (C = f32, or f64 for f64 parameters) in place, or widened into
// C buffers when they hold f16/bf16; the update functor of kernels/optim_functors.h (shared with
// the CUDA kernel) runs once per element, and buffered results are rounded back on store. The
// lost-update count compares the stored parameter with the old one wherever the computed change
// was non-zero. FusedStep: the gradient is scaled as it is read, a set found_inf returns before
// anything is written (Adam's and Adagrad's step counts included), and the model copy is converted
// from each stored chunk of the parameter. An f16/bf16 parameter's chunk is rounded as
// fused.rounding says (round_for_store) before it is stored.
// Elements are independent, so the thread pool takes chunks of each parameter.
// Tests: build/tests/test_optim, build/tests/test_optim_adagrad, build/tests/test_cuda_amp.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>

#include "kernels/cpu/compute_type.h"
#include "kernels/optim.h"
#include "kernels/optim_functors.h"

namespace mg::kernels::cpu {

namespace {

constexpr std::int64_t kOptimChunk = 256;
constexpr std::int64_t kOptimGrain = 32 * 1024;  // elements per chunk of the thread pool (parallel.h)

// Whether the GradScaler found an inf or NaN for this step: then the update writes nothing.
bool skipped(const FusedStep& fused) {
  return fused.scaling.found_inf && *fused.scaling.found_inf->data<float>() != 0.0f;
}

// An f32 value rounded to nearest into an f16 or bf16 and back.
float round_nearest(float x, DType dtype) {
  return dtype == DType::F16 ? static_cast<float>(half(x)) : static_cast<float>(bfloat16(x));
}

// Elements [start, start + n) of an f16/bf16 parameter, `updated` from `old` in f32, made values of
// its dtype as fused.rounding says (kernels/optim.h), so that the convert that stores them is exact.
// Nearest leaves them to that convert.
template <class C>
void round_for_store(const FusedStep& fused, DType dtype, std::int64_t start, std::int64_t n, const C* old,
                     C* updated) {
  if (fused.rounding == UpdateRounding::Stochastic) {
    philox::Block words{};  // element e's word is words.word[e % 4] of block e / 4: one call per 4 elements
    std::uint64_t block = ~std::uint64_t{0};
    for (std::int64_t i = 0; i < n; ++i) {
      const auto element = static_cast<std::uint64_t>(start + i);
      if (element / 4 != block) words = stochastic::rounding_words(fused.stream, block = element / 4);
      updated[i] = C(stochastic::stochastic_round(static_cast<float>(updated[i]), dtype, words.word[element % 4]));
    }
  } else if (fused.rounding == UpdateRounding::Kahan) {
    Tensor& compensation = *fused.compensation;  // in the parameter's dtype
    float debt[kOptimChunk];
    convert(bytes_at(compensation, start), compensation.dtype(), debt, DType::F32, n);
    const auto round = [dtype](float x) { return round_nearest(x, dtype); };
    for (std::int64_t i = 0; i < n; ++i)
      updated[i] = C(kahan_store(static_cast<float>(old[i]), static_cast<float>(updated[i]), debt[i], round));
    convert(debt, DType::F32, bytes_at(compensation, start), compensation.dtype(), n);  // exact
  }
}

// Runs update(p, g * inv_scale, state) for every element; `state` points at the values of the state
// tensors, and update returns whether the change it computed was non-zero (before any rounding).
// Tensors that hold C are updated in place, so the f32 loop vectorizes and copies nothing.

template <class C, std::size_t S, class Update>
void update_chunks(Tensor& param, const Tensor& grad, std::array<Tensor*, S> state, const FusedStep& fused,
                   UpdateCount& count, const Update& update) {
  if (skipped(fused)) return;  // a skipped step writes nothing
  const DType c = dtype_of<C>();
  const C inv_scale = fused.scaling.inv_scale ? C(*fused.scaling.inv_scale->data<float>()) : C(1);
  std::atomic<std::int64_t> total_nonzero{0}, total_lost{0};
  // Every element is updated alone: the thread pool takes chunks of kOptimGrain elements.
  parallel_for(param.numel(), kOptimGrain, [&](std::int64_t chunk_begin, std::int64_t chunk_end) {
    C p_buffer[kOptimChunk], g_buffer[kOptimChunk], s_buffer[S > 0 ? S : 1][kOptimChunk], old[kOptimChunk],
        stored[kOptimChunk];
    unsigned char changed[kOptimChunk];
    std::int64_t nonzero = 0, lost = 0;
    for (std::int64_t start = chunk_begin; start < chunk_end; start += kOptimChunk) {
      const std::int64_t n = std::min(kOptimChunk, chunk_end - start);
      C* p = values_at(param, start, n, p_buffer);
      const C* g = values_at(grad, start, n, g_buffer);
      std::array<C*, S> s;
      for (std::size_t k = 0; k < S; ++k) s[k] = values_at(*state[k], start, n, s_buffer[k]);
      auto update_one = [&](std::int64_t i) {
        std::array<C, S> values;
        for (std::size_t k = 0; k < S; ++k) values[k] = s[k][i];
        const bool changed = update(p[i], exact::mul(g[i], inv_scale), values.data());
        for (std::size_t k = 0; k < S; ++k) s[k][i] = values[k];
        return changed;
      };
      if (p != p_buffer) {
        // Updated in place in C: the stored value is p itself, compared right away.
        for (std::int64_t i = 0; i < n; ++i) {
          const C before = p[i];
          const bool changed = update_one(i);
          nonzero += changed;
          lost += changed & (p[i] == before);
        }
      } else {
        std::copy(p, p + n, old);
        for (std::int64_t i = 0; i < n; ++i) changed[i] = update_one(i);
        round_for_store(fused, param.dtype(), start, n, old, p);
        convert(p, c, bytes_at(param, start), param.dtype(), n);
        // What the parameter holds now is p rounded to f16/bf16.
        convert(bytes_at(param, start), param.dtype(), stored, c, n);
        for (std::int64_t i = 0; i < n; ++i) {
          nonzero += changed[i];
          lost += changed[i] & (stored[i] == old[i]);
        }
      }
      for (std::size_t k = 0; k < S; ++k)
        if (s[k] == s_buffer[k]) convert(s[k], c, bytes_at(*state[k], start), state[k]->dtype(), n);
      if (fused.model_copy) {
        Tensor& copy = *fused.model_copy;  // the stored parameter, rounded once more: a cast
        convert(bytes_at(param, start), param.dtype(), bytes_at(copy, start), copy.dtype(), n);
      }
    }
    total_nonzero += nonzero;  // counts: the same sums in any order
    total_lost += lost;
  });
  count.nonzero += total_nonzero.load();
  count.lost += total_lost.load();
}

template <class C>
void sgd_typed(Tensor& param, const Tensor& grad, Tensor* buffer, const SgdHyper& h, UpdateCount& count,
               const FusedStep& fused) {
  if (buffer)
    update_chunks<C, 1>(param, grad, {buffer}, fused, count, SgdUpdate<C, true>(h));
  else
    update_chunks<C, 0>(param, grad, {}, fused, count, SgdUpdate<C, false>(h));
}

template <class C>
void adam_typed(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& step,
                const AdamHyper& h, UpdateCount& count, const FusedStep& fused) {
  if (skipped(fused)) return;  // the step count does not move either
  std::int32_t& steps = *step.data<std::int32_t>();
  update_chunks<C, 2>(param, grad, {&exp_avg, &exp_avg_sq}, fused, count, AdamUpdate<C>(h).at_step(steps + 1));
  ++steps;
}

template <class C>
void adagrad_typed(Tensor& param, const Tensor& grad, Tensor& sum, Tensor& step, const AdagradHyper& h,
                   UpdateCount& count, const FusedStep& fused) {
  if (skipped(fused)) return;  // the step count does not move either
  std::int32_t& steps = *step.data<std::int32_t>();
  update_chunks<C, 1>(param, grad, {&sum}, fused, count, AdagradUpdate<C>(h).at_step(steps + 1));
  ++steps;
}

}  // namespace

void sgd(Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdHyper& hyper, UpdateCount& count,
         const FusedStep& fused) {
  if (param.dtype() == DType::F64)
    sgd_typed<double>(param, grad, momentum_buffer, hyper, count, fused);
  else
    sgd_typed<float>(param, grad, momentum_buffer, hyper, count, fused);
}

void adam(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& step, const AdamHyper& hyper,
          UpdateCount& count, const FusedStep& fused) {
  if (param.dtype() == DType::F64)
    adam_typed<double>(param, grad, exp_avg, exp_avg_sq, step, hyper, count, fused);
  else
    adam_typed<float>(param, grad, exp_avg, exp_avg_sq, step, hyper, count, fused);
}

void adagrad(Tensor& param, const Tensor& grad, Tensor& sum, Tensor& step, const AdagradHyper& hyper,
             UpdateCount& count, const FusedStep& fused) {
  if (param.dtype() == DType::F64)
    adagrad_typed<double>(param, grad, sum, step, hyper, count, fused);
  else
    adagrad_typed<float>(param, grad, sum, step, hyper, count, fused);
}

}  // namespace mg::kernels::cpu
