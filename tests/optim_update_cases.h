// The optimizer configurations every fused-update suite runs on each backend (test_cuda_amp.cpp):
// one UpdateCase per optimizer and options, which runs one update of kernels/optim.h on the CPU or a
// GPU from the step number it is given, and check_identical, the bit-for-bit comparison of the two.
// Add an optimizer configuration: one line in update_cases(); every GPU and fused case runs it.
#pragma once

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/optim.h"
#include "tests/testing.h"

namespace mg::testing {

using kernels::FusedStep;
using kernels::UpdateCount;

// Every element of `got` has the bits of the same element of `expected`.
inline void check_identical(const Tensor& got_anywhere, const Tensor& expected_anywhere, const std::string& what) {
  INFO(what);
  const Tensor got = got_anywhere.to(Device::cpu()), expected = expected_anywhere.to(Device::cpu());
  REQUIRE(got.dtype() == expected.dtype());
  REQUIRE(got.numel() == expected.numel());
  const std::size_t size = dtype_size(got.dtype());
  const std::vector<double> g = got.to_vector<double>(), e = expected.to_vector<double>();
  const auto* got_bytes = static_cast<const char*>(got.data_ptr());
  const auto* expected_bytes = static_cast<const char*>(expected.data_ptr());
  std::size_t mismatches = 0, first = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const bool same = (std::isnan(g[i]) && std::isnan(e[i])) ||
                      std::memcmp(got_bytes + i * size, expected_bytes + i * size, size) == 0;
    if (!same && mismatches++ == 0) first = i;
  }
  INFO(mismatches << " of " << g.size() << " differ; element " << first << ": " << (mismatches ? g[first] : 0.0)
                  << " instead of " << (mismatches ? e[first] : 0.0));
  CHECK(mismatches == 0);
}

inline Tensor with_value(const Tensor& t, std::size_t index, double value) {
  std::vector<double> values = t.to_vector<double>();
  values[index] = value;
  return from_vector(values, t.shape(), {.dtype = t.dtype()});
}

// One optimizer configuration, run on either backend: step 0 is the first update (Adam's bias
// correction, Adagrad's undecayed rate, SGD's momentum buffer taken from the first update).
using RunUpdate = std::function<void(bool on_gpu, int step, Tensor& param, const Tensor& grad,
                                     std::vector<Tensor>& state, UpdateCount& count, const FusedStep& fused)>;
struct UpdateCase {
  const char* name;
  int states;  // the momentum buffer, Adam's two moments, or Adagrad's sum of squared gradients
  RunUpdate run;
};

inline RunUpdate sgd_with(kernels::SgdHyper hyper) {
  return [hyper](bool on_gpu, int step, Tensor& p, const Tensor& g, std::vector<Tensor>& state, UpdateCount& count,
                 const FusedStep& fused) {
    kernels::SgdHyper h = hyper;
    h.first_step = step == 0;
    Tensor* buffer = state.empty() ? nullptr : &state[0];
#ifdef MG_WITH_CUDA
    if (on_gpu) return kernels::cuda::sgd(p, g, buffer, h, count, fused);
#endif
    REQUIRE_FALSE(on_gpu);
    kernels::cpu::sgd(p, g, buffer, h, count, fused);
  };
}

inline RunUpdate adam_with(kernels::AdamHyper hyper) {
  return [hyper](bool on_gpu, int step, Tensor& p, const Tensor& g, std::vector<Tensor>& state, UpdateCount& count,
                 const FusedStep& fused) {
    Tensor steps = full({}, step, {.dtype = DType::I32, .device = p.device()});  // updates done so far
#ifdef MG_WITH_CUDA
    if (on_gpu) return kernels::cuda::adam(p, g, state[0], state[1], steps, hyper, count, fused);
#endif
    REQUIRE_FALSE(on_gpu);
    kernels::cpu::adam(p, g, state[0], state[1], steps, hyper, count, fused);
  };
}

inline RunUpdate adagrad_with(kernels::AdagradHyper hyper) {
  return [hyper](bool on_gpu, int step, Tensor& p, const Tensor& g, std::vector<Tensor>& state, UpdateCount& count,
                 const FusedStep& fused) {
    Tensor steps = full({}, step, {.dtype = DType::I32, .device = p.device()});  // updates done so far
#ifdef MG_WITH_CUDA
    if (on_gpu) return kernels::cuda::adagrad(p, g, state[0], steps, hyper, count, fused);
#endif
    REQUIRE_FALSE(on_gpu);
    kernels::cpu::adagrad(p, g, state[0], steps, hyper, count, fused);
  };
}

inline std::vector<UpdateCase> update_cases() {
  return {
      {"sgd", 0, sgd_with({.lr = 0.1})},
      {"sgd, small lr (f16 and bf16 lose updates)", 0, sgd_with({.lr = 1e-3})},
      {"sgd + momentum + dampening", 1, sgd_with({.lr = 0.1, .momentum = 0.9, .dampening = 0.3})},
      {"sgd + nesterov + weight decay", 1,
       sgd_with({.lr = 0.05, .momentum = 0.8, .weight_decay = 0.1, .nesterov = true})},
      {"adam", 2, adam_with({.lr = 0.01, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-3})},
      {"adam + L2 weight decay", 2,
       adam_with({.lr = 0.05, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1})},
      {"adamw", 2,
       adam_with({.lr = 0.05,
                  .beta1 = 0.85,
                  .beta2 = 0.9,
                  .eps = 1e-6,
                  .weight_decay = 0.2,
                  .decoupled_weight_decay = true})},
      {"adagrad + lr decay", 1, adagrad_with({.lr = 0.05, .lr_decay = 0.5})},
      {"adagrad + weight decay, larger eps", 1, adagrad_with({.lr = 0.1, .eps = 1e-3, .weight_decay = 0.1})},
  };
}

// Fresh zero state tensors like `param` (each its own storage).
inline std::vector<Tensor> fresh_state(int count, const Tensor& param) {
  std::vector<Tensor> state;
  for (int k = 0; k < count; ++k) state.push_back(zeros(param.shape(), {.dtype = param.dtype()}));
  return state;
}

inline std::vector<Tensor> clones(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> copies;
  for (const Tensor& t : tensors) copies.push_back(t.clone());
  return copies;
}

inline constexpr double kInverseScale = 1.0 / 1000.0;  // not a power of two: the unscaled product rounds

// A one-element f32 factor (1/S) as the kernels read it, on the CPU or a GPU.
inline Tensor factor(double value, Device device = Device::cpu()) { return full({}, value, {.device = device}); }

}  // namespace mg::testing
