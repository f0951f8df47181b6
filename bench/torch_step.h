// The libtorch side of bench/train_step, behind a header without torch includes: only
// torch_step.cpp sees <torch/torch.h>, so the mixgrad side compiles the same with or without it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace bench {

// One training step of a model built in libtorch: zero_grad, forward, cross_entropy, backward,
// SGD with momentum. Same shapes, batch and optimizer settings as the mixgrad side.
class TorchStep {
 public:
  virtual ~TorchStep() = default;
  virtual void step() = 0;
};

// model: "mlp" (784-256-256-10), "cnn" (nn::cnn's layers), "conv" (its second convolution alone),
// "lstm" (nn::CharLSTM) or "gpt" (nn::TinyGPT), as bench/train_step builds them; f32 weights. With
// autocast_bf16 the forward pass and the loss run under CPU autocast to bf16 (PyTorch's
// `with torch.autocast("cpu", dtype=torch.bfloat16)`), backward outside it, as PyTorch's recipe.
std::unique_ptr<TorchStep> make_torch_step(const std::string& model, std::int64_t batch, bool autocast_bf16);

// C = A B of two n x n random matrices in libtorch (torch::matmul), f32 or bf16 ("f32", "bf16"):
// the peer of bench/matmul. bf16 runs oneDNN's kernels (vdpbf16ps where the CPU has it).
std::function<void()> make_torch_matmul(const std::string& dtype, std::int64_t n);

// Pins libtorch (intra- and inter-op) and OpenBLAS to `threads` and describes the configuration:
// torch version, thread counts, the BLAS core OpenBLAS selected.
std::string configure_torch(int threads);

}  // namespace bench
