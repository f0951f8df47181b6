// memory_report: where the bytes of a training step go, by kind, measured (not estimated).
// Call it after a forward pass (while the tape holds the saved activations) to see what a recipe
// costs: mixed_float16 saves activations in f16 (half of f32's bytes) plus f16 copies of the
// weights, held until backward; float16_master stores f16 parameters plus f32 masters. The
// paper's "about half the memory" is the activations, which dominate at real batch sizes. Without
// masters (bfloat16_pure), what a parameter costs is bytes_per_parameter().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "optim/optimizer.h"

namespace mg::amp {

struct MemoryReport {
  std::size_t parameters = 0;  // the model's parameters, in their storage dtype
  std::size_t master_weights = 0;  // f32 master copies (the optimizer's master_weights)
  std::size_t gradients = 0;  // .grad of the parameters and of the masters
  std::size_t optimizer_state = 0;  // momentum buffers, moments
  std::size_t saved_activations = 0;  // tensors this thread's tape keeps for backward
  std::int64_t parameter_count = 0;  // elements of the parameters
  std::size_t total() const { return parameters + master_weights + gradients + optimizer_state + saved_activations; }
  // What training holds for each parameter, whatever the batch: its weight, master, gradients and
  // optimizer state, over parameter_count. With Adam: mixed_bfloat16 (f32 weights and moments) 16;
  // bfloat16_pure with f32 moments 12, + 2 with Kahan's compensation; all bf16 8.
  double bytes_per_parameter() const;
  std::string describe() const;  // one line in MiB
};

MemoryReport memory_report(const optim::Optimizer& optimizer);

}  // namespace mg::amp
