// libtorch models for bench/train_step: the peer's side of the comparison (see train_step.cpp).
// Built only when CMake finds Torch (Debian: libtorch-dev; its BLAS is whatever libblas.so.3 points
// to, so install libopenblas-dev to give it OpenBLAS rather than the reference BLAS).
#include "torch_step.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <torch/torch.h>

namespace bench {
namespace {

namespace tnn = torch::nn;

tnn::Sequential make_model(const std::string& name) {
  if (name == "mlp")
    return tnn::Sequential(tnn::Flatten(), tnn::Linear(784, 256), tnn::ReLU(), tnn::Linear(256, 256), tnn::ReLU(),
                           tnn::Linear(256, 10));
  auto conv = [](std::int64_t in, std::int64_t out) { return tnn::Conv2d(tnn::Conv2dOptions(in, out, 3).padding(1)); };
  if (name == "conv")  // the CNN's second convolution alone, its input a 32-channel 14x14 map that needs a gradient
    return tnn::Sequential(conv(32, 64), tnn::ReLU(), tnn::AvgPool2d(14), tnn::Flatten());
  return tnn::Sequential(conv(1, 32), tnn::ReLU(), tnn::MaxPool2d(2), conv(32, 64), tnn::ReLU(), tnn::MaxPool2d(2),
                         tnn::Flatten(), tnn::Linear(64 * 7 * 7, 128), tnn::ReLU(), tnn::Linear(128, 10));
}

class Step final : public TorchStep {
 public:
  Step(const std::string& name, std::int64_t batch)
      : model_(make_model(name)),
        optimizer_(model_->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9)),
        x_(name == "conv" ? torch::randn({batch, 32, 14, 14}).requires_grad_(true) : torch::randn({batch, 1, 28, 28})),
        labels_(torch::randint(0, 10, {batch}, torch::kLong)) {}

  void step() override {
    optimizer_.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model_->forward(x_), labels_);
    loss.backward();
    optimizer_.step();
  }

 private:
  tnn::Sequential model_;
  torch::optim::SGD optimizer_;
  torch::Tensor x_, labels_;
};

}  // namespace

std::unique_ptr<TorchStep> make_torch_step(const std::string& model, std::int64_t batch) {
  torch::manual_seed(0);
  return std::make_unique<Step>(model, batch);
}

std::string configure_torch(int threads) {
  torch::set_num_threads(threads);
  torch::set_num_interop_threads(threads);
  // OpenBLAS reads OPENBLAS_NUM_THREADS when it loads; set it again here in case it was not set.
  // Looked up at run time so that another BLAS behind libblas.so.3 still works.
  using SetThreads = void (*)(int);
  using CoreName = char* (*)();
  std::string blas = "BLAS: not OpenBLAS";
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
  if (auto core = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename")))
    blas = fmt::format("BLAS: OpenBLAS, core {}", core());
  return fmt::format("libtorch {}, {} intra-op thread(s), {}", TORCH_VERSION, torch::get_num_threads(), blas);
}

}  // namespace bench
