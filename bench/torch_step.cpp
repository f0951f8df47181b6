// libtorch models for bench/train_step: the peer's side of the comparison (see train_step.cpp).
// Built only when CMake finds Torch (Debian: libtorch-dev; its BLAS is whatever libblas.so.3 points
// to, so install libopenblas-dev to give it OpenBLAS rather than the reference BLAS).
#include "torch_step.h"

#include <dlfcn.h>
#include <ATen/autocast_mode.h>
#include <ATen/Context.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace bench {
namespace {

namespace tnn = torch::nn;

// CPU autocast to bf16 for one scope, when `enabled`: what torch.autocast("cpu", dtype=torch.bfloat16)
// does in Python (its cast cache is cleared when the region ends, as there).
class AutocastBf16 {
 public:
  explicit AutocastBf16(bool enabled) : enabled_(enabled) {
    if (!enabled_) return;
#if TORCH_VERSION_MAJOR >= 2  // 2.x deprecates the CPU-only calls, and warns on every use
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCPU, true);
#else
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::set_cpu_enabled(true);
#endif
  }
  ~AutocastBf16() {
    if (!enabled_) return;
#if TORCH_VERSION_MAJOR >= 2
    at::autocast::set_autocast_enabled(at::kCPU, false);
#else
    at::autocast::set_cpu_enabled(false);
#endif
    at::autocast::clear_cache();
  }
  AutocastBf16(const AutocastBf16&) = delete;
  AutocastBf16& operator=(const AutocastBf16&) = delete;

 private:
  bool enabled_;
};

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
  Step(const std::string& name, std::int64_t batch, bool autocast)
      : autocast_(autocast),
        model_(make_model(name)),
        optimizer_(model_->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9)),
        x_(name == "conv" ? torch::randn({batch, 32, 14, 14}).requires_grad_(true) : torch::randn({batch, 1, 28, 28})),
        labels_(torch::randint(0, 10, {batch}, torch::kLong)) {}

  void step() override {
    optimizer_.zero_grad();
    torch::Tensor loss;
    {
      AutocastBf16 region(autocast_);
      loss = torch::nn::functional::cross_entropy(model_->forward(x_), labels_);
    }
    loss.backward();
    optimizer_.step();
  }

 private:
  bool autocast_;
  tnn::Sequential model_;
  torch::optim::SGD optimizer_;
  torch::Tensor x_, labels_;
};

// The text models of bench/train_step: 65 symbols, windows of 64, cross entropy over every position.
constexpr std::int64_t kVocab = 65, kContext = 64;

// nn::CharLSTM: embedding 64, one LSTM layer of 256 cells, a linear head.
struct CharLstmImpl : tnn::Module {
  CharLstmImpl()
      : embedding(register_module("embedding", tnn::Embedding(kVocab, 64))),
        lstm(register_module("lstm", tnn::LSTM(tnn::LSTMOptions(64, 256).batch_first(true)))),
        head(register_module("head", tnn::Linear(256, kVocab))) {}
  torch::Tensor forward(const torch::Tensor& tokens) { return head(std::get<0>(lstm(embedding(tokens)))); }
  tnn::Embedding embedding;
  tnn::LSTM lstm;
  tnn::Linear head;
};
TORCH_MODULE(CharLstm);

// nn::TransformerBlock: x + attention(ln1(x)), then x + fc_proj(gelu(fc(ln2(x)))), causal attention
// with `heads` heads (nn/attention.h).
struct BlockImpl : tnn::Module {
  BlockImpl(std::int64_t width, std::int64_t heads)
      : heads(heads),
        ln1(register_module("ln1", tnn::LayerNorm(tnn::LayerNormOptions({width})))),
        qkv(register_module("qkv", tnn::Linear(width, 3 * width))),
        proj(register_module("proj", tnn::Linear(width, width))),
        ln2(register_module("ln2", tnn::LayerNorm(tnn::LayerNormOptions({width})))),
        fc(register_module("fc", tnn::Linear(width, 4 * width))),
        fc_proj(register_module("fc_proj", tnn::Linear(4 * width, width))),
        future(torch::ones({kContext, kContext}, torch::kBool).triu(1)) {}
  torch::Tensor forward(torch::Tensor x) {
    const std::int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / heads;
    torch::Tensor q_k_v = qkv(ln1(x)).view({B, T, 3, heads, D}).permute({2, 0, 3, 1, 4});  // [3, B, heads, T, D]
    torch::Tensor scores = torch::matmul(q_k_v[0], q_k_v[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(D));
    scores = scores.masked_fill(future.slice(0, 0, T).slice(1, 0, T), -std::numeric_limits<float>::infinity());
    torch::Tensor y = torch::matmul(torch::softmax(scores, -1), q_k_v[2]).transpose(1, 2).contiguous().view({B, T, C});
    x = x + proj(y);
    return x + fc_proj(torch::gelu(fc(ln2(x))));
  }
  std::int64_t heads;
  tnn::LayerNorm ln1;
  tnn::Linear qkv, proj;
  tnn::LayerNorm ln2;
  tnn::Linear fc, fc_proj;
  torch::Tensor future;
};
TORCH_MODULE(Block);

// nn::TinyGPT: token and position embeddings, 4 blocks of width 128 with 4 heads, a final LayerNorm, a head.
struct TinyGptImpl : tnn::Module {
  TinyGptImpl()
      : tokens(register_module("tokens", tnn::Embedding(kVocab, 128))),
        positions(register_module("positions", tnn::Embedding(kContext, 128))),
        blocks(register_module("blocks", tnn::Sequential(Block(128, 4), Block(128, 4), Block(128, 4), Block(128, 4)))),
        ln_f(register_module("ln_f", tnn::LayerNorm(tnn::LayerNormOptions({128})))),
        head(register_module("head", tnn::Linear(128, kVocab))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return head(ln_f(blocks->forward(tokens(x) + positions(torch::arange(x.size(1))))));
  }
  tnn::Embedding tokens, positions;
  tnn::Sequential blocks;
  tnn::LayerNorm ln_f;
  tnn::Linear head;
};
TORCH_MODULE(TinyGpt);

// A training step of a text model on one fixed batch of random tokens.
template <class Model>
class TextStep final : public TorchStep {
 public:
  TextStep(std::int64_t batch, bool autocast)
      : autocast_(autocast),
        optimizer_(model_->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9)),
        x_(torch::randint(0, kVocab, {batch, kContext}, torch::kLong)),
        labels_(torch::randint(0, kVocab, {batch * kContext}, torch::kLong)) {}

  void step() override {
    optimizer_.zero_grad();
    torch::Tensor loss;
    {
      AutocastBf16 region(autocast_);
      loss = torch::nn::functional::cross_entropy(model_->forward(x_).view({-1, kVocab}), labels_);
    }
    loss.backward();
    optimizer_.step();
  }

 private:
  bool autocast_;
  Model model_;
  torch::optim::SGD optimizer_;
  torch::Tensor x_, labels_;
};

}  // namespace

std::unique_ptr<TorchStep> make_torch_step(const std::string& model, std::int64_t batch, bool autocast_bf16) {
  torch::manual_seed(0);
  if (model == "lstm") return std::make_unique<TextStep<CharLstm>>(batch, autocast_bf16);
  if (model == "gpt") return std::make_unique<TextStep<TinyGpt>>(batch, autocast_bf16);
  return std::make_unique<Step>(model, batch, autocast_bf16);
}

std::function<void()> make_torch_matmul(const std::string& dtype, std::int64_t n) {
  torch::manual_seed(0);
  const auto type = dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  const torch::Tensor a = torch::randn({n, n}).to(type), b = torch::randn({n, n}).to(type);
  return [a, b] { torch::Tensor c = torch::matmul(a, b); };
}

std::string configure_torch(int threads) {
  torch::set_num_threads(threads);
  torch::set_num_interop_threads(threads);
  // OpenBLAS reads OPENBLAS_NUM_THREADS when it loads; set it again here in case it was not set.
  // Looked up at run time so that another BLAS behind libblas.so.3 still works.
  using SetThreads = void (*)(int);
  using CoreName = char* (*)();
  // No fmt in this file: PyPI's libtorch brings fmt headers of its own, another version than mixgrad's.
  // PyPI's x86 wheel has MKL built in; Debian's calls libblas.so.3 (mixgrad's OpenBLAS, when linked).
  std::string blas = at::hasMKL() ? "BLAS: MKL" : "BLAS: not OpenBLAS";
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
  auto core = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (!at::hasMKL() && core) blas = std::string("BLAS: OpenBLAS, core ") + core();
  const std::string onednn = at::hasMKLDNN() ? ", oneDNN" : "";
  return std::string("libtorch ") + TORCH_VERSION + ", " + std::to_string(torch::get_num_threads()) +
         " intra-op thread(s), " + blas + onednn;
}

}  // namespace bench
