// bench/train_step: one training step (forward, cross_entropy, backward, SGD with momentum) of the
// 784-256-256-10 MLP at batch 128 and 512 and of the 2-conv CNN at batch 128, in mixgrad (fp32,
// mixed_float16 and mixed_bfloat16) and, when built against libtorch, in libtorch (fp32, and
// autocast to bf16 as torch.autocast("cpu") does), side by side in one run. With --device cuda the
// same steps run on the GPU, with a GEMM-bound MLP (4096 wide, batch 8192) added (its peer is
// PyTorch eager AMP: bench/torch_gpu_step.py, same models and batches), which also runs under the
// fp8_delayed and fp8_block recipes there.
//
//   build/bench/train_step                     mixgrad only (always built)
//   build/bench/train_step_vs_torch            with libtorch (built when CMake finds Torch)
//   ... --steps 100 mlp:128 cnn:64             more timed steps; chosen models and batches
//   ... --recipes mixed_bfloat16,fp8_block,nvfp4   mixgrad's recipes to run (any of amp::Recipe's)
//   build/bench/train_step --device cuda       on the GPU (builds with the CUDA backend)
//   ... --profile gpt:32                       then each mixgrad variant's step op by op (train/op_profile.h)
//
// The variants of one model are interleaved in every repetition so that a noisy machine slows them
// alike; each warms up for 5 steps, then the median of --steps timed steps (default 50) is
// reported with the ratios the targets are set for: mixgrad fp32 / libtorch fp32, each mixed recipe /
// mixgrad fp32, and mixgrad mixed_bfloat16 / libtorch bf16 autocast. Also reported: the peak bytes
// mixgrad's caching allocator handed out during one step (on the CPU or the GPU), and minor page faults per step over the second half of
// the timed steps (0 once the caching allocator holds every buffer a step needs; the CNN's
// mixed_float16 step still grows its cache by a few hundred pages in its first ~10 steps), and the bytes of activations saved for
// backward after one forward pass (autograd/tape.h, saved_tensor_bytes). Threads: --threads N (default
// MG_NUM_THREADS, else every core) sets mixgrad's pool (mg::set_num_threads) and libtorch's intra-op
// threads alike.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "bench/machine.h"
#include "bench/timing.h"
#include "core/allocator.h"
#include "mixgrad.h"
#ifdef MG_WITH_CUDA
#include "kernels/cuda/runtime.h"
#endif
#ifdef MG_BENCH_TORCH
#include "bench/torch_step.h"
#endif

namespace {

using namespace mg;

// The CNN's second convolution alone (32 -> 64 channels, 3x3, on 14x14 maps), then a ReLU and a
// global average pool into 64 logits: a step that is almost all convolution, forward and backward,
// its input's gradient (col2im) included.
std::shared_ptr<nn::Module> conv_layer(Generator& generator) {
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Conv2d>(32, 64, 3, Conv2dOptions{.padding = 1}, true, generator));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::AvgPool2d>(Pool2dOptions{.kernel = 14}));
  model->push_back(std::make_shared<nn::Flatten>());
  return model;
}

// A mixgrad training step as tools/train.cpp takes it, on one fixed batch.
class MixgradStep {
 public:
  // model: "mlp" (784-256-256-10), "cnn" (nn::cnn), "wide" (4096-4096-4096-4096-10, GEMM-bound), or
  // "conv" (conv_layer above), or the text models of `mixgrad train` on random tokens of a 65-character vocabulary, windows of
  // 64: "lstm" (CharLSTM: embedding 64, one layer of 256 cells) and "gpt" (TinyGPT: 4 layers, width
  // 128, 4 heads).
  MixgradStep(const std::string& model, const std::string& recipe, std::int64_t batch, Device device)
      : recipe_(amp::Recipe::parse(recipe)), scaler_(recipe_.make_scaler()), device_(device) {
    Generator generator(0);
    constexpr std::int64_t kVocab = 65, kContext = 64;
    if (model == "mlp")
      model_ = nn::mlp({784, 256, 256, 10}, generator);
    else if (model == "wide")
      model_ = nn::mlp({4096, 4096, 4096, 4096, 10}, generator);
    else if (model == "lstm")
      model_ = std::make_shared<nn::CharLSTM>(kVocab, 64, 256, 1, generator);
    else if (model == "gpt")
      model_ = std::make_shared<nn::TinyGPT>(
          nn::GptOptions{.vocab = kVocab, .block_size = kContext, .embed_dim = 128, .heads = 4, .layers = 4},
          generator);
    else if (model == "conv")
      model_ = conv_layer(generator);
    else
      model_ = nn::cnn({}, generator);
    model_->to(recipe_.parameter_dtype);
    recipe_.prepare(*model_);  // the FP8 recipes' amax histories: buffers, moved with the model
    model_->to(device);
    optimizer_ = train::make_optimizer({.name = "sgd", .lr = 0.01, .momentum = 0.9}, model_->parameters(),
                                       recipe_.master_weights);
    if (model == "lstm" || model == "gpt") {
      x_ = randint(0, kVocab, {batch, kContext}, generator).to(device);
      labels_ = randint(0, kVocab, {batch, kContext}, generator).to(device);
    } else if (model == "conv") {
      x_ = randn({batch, 32, 14, 14}, generator).to(device).set_requires_grad(true);  // so backward computes dx
      labels_ = randint(0, 10, {batch}, generator).to(device);
    } else {
      x_ = (model == "wide" ? randn({batch, 4096}, generator) : randn({batch, 1, 28, 28}, generator)).to(device);
      labels_ = randint(0, 10, {batch}, generator).to(device);
    }
  }

  // Where one step's memory goes, from the caching allocator of the device (bytes held by live
  // tensors): what is held before the forward pass (weights, master copies, optimizer state, the
  // batch), what the forward pass adds (activations, and the loss), the peak inside forward, the
  // peak inside backward and what it leaves (the gradients), and the peak of the optimizer's step.
  struct Memory {
    std::size_t state = 0, after_forward = 0, forward_peak = 0, backward_peak = 0, after_backward = 0, update_peak = 0;
  };
  // baseline: the bytes held before this trainer was made (other variants' tensors), left out of every
  // figure.
  Memory memory(std::size_t baseline) {
    Allocator& allocator = allocator_for(device_);
    const auto held = [&] { return allocator.stats_on(device_).allocated_bytes - baseline; };
    const auto peak = [&] { return allocator.stats_on(device_).peak_allocated_bytes - baseline; };
    Memory m;
    optimizer_->zero_grad();
    m.state = held();
    allocator.reset_peak_on(device_);
    Tensor loss;
    {
      Autocast region = recipe_.autocast();
      loss = cast(train::mean_loss(train::Loss::CrossEntropy, (*model_)(x_), labels_), DType::F32);
    }
    m.after_forward = held();
    m.forward_peak = peak();
    allocator.reset_peak_on(device_);
    backward(scaler_.scale(loss));
    m.backward_peak = peak();
    m.after_backward = held();
    allocator.reset_peak_on(device_);
    scaler_.step(*optimizer_);
    scaler_.update();
    m.update_peak = peak();
    return m;
  }

  // Returns the bytes saved for backward by the forward pass. With a profile, tells it the phases
  // (as the Trainer's StepObserver hooks do) and names the update's spans as the Trainer does.
  std::size_t step(train::OpProfile* profile = nullptr) {
    optimizer_->zero_grad();
    if (profile) profile->start(train::Phase::Forward);
    Tensor loss;
    {
      Autocast region = recipe_.autocast();
      loss = cast(train::mean_loss(train::Loss::CrossEntropy, (*model_)(x_), labels_), DType::F32);
    }
    const std::size_t saved = saved_tensor_bytes();
    if (profile) profile->start(train::Phase::Backward);
    backward(scaler_.scale(loss));
    if (profile) profile->start(train::Phase::Update);
    {
      const OpSpan span("optimizer step");
      scaler_.step(*optimizer_);
    }
    {
      const OpSpan span("scaler update");
      scaler_.update();
    }
#ifdef MG_WITH_CUDA
    if (device_.is_cuda()) mg::cuda::synchronize(device_.index);  // the step is done when the GPU is
#endif
    if (profile) profile->finish_step();
    return saved;
  }
  Device device() const { return device_; }

 private:
  amp::Recipe recipe_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  amp::GradScaler scaler_;
  Device device_;
  Tensor x_, labels_;
};

struct Variant {
  std::string name;
  std::function<std::size_t()> step;
  std::vector<double> ms;
  std::int64_t faults = 0;
  std::size_t saved_bytes = 0;
  std::size_t peak_bytes = 0;  // mixgrad's: the most bytes its step held at once (memory, below)
  std::optional<MixgradStep::Memory> memory;  // mixgrad's: where that peak comes from
  std::shared_ptr<MixgradStep> mixgrad;  // mixgrad's, for --profile
};

// --profile: each mixgrad variant's step op by op (train/op_profile.h), after the timed steps.
void print_profiles(const std::vector<Variant>& variants, int steps) {
  for (const Variant& v : variants) {
    if (!v.mixgrad) continue;
    train::OpProfile profile({.device = v.mixgrad->device()});
    for (int i = 0; i < steps + 1; ++i) v.mixgrad->step(&profile);  // the first is the profile's warm-up
    fmt::print("  {}: ", v.name);
    fmt::print("{}", profile.table(20));
  }
}

void run(const std::string& model, std::int64_t batch, int steps, Device device,
         const std::vector<std::string>& chosen_recipes, bool profile) {
  std::vector<Variant> variants;
  auto add = [&variants](std::string name, std::function<std::size_t()> step) {
    variants.emplace_back();
    variants.back().name = std::move(name);
    variants.back().step = std::move(step);
  };
  std::vector<std::string> recipes = chosen_recipes.empty()
                                         ? std::vector<std::string>{"fp32", "mixed_float16", "mixed_bfloat16"}
                                         : chosen_recipes;
  // On the GPU the GEMM-bound MLP also under two FP8 recipes (every Linear's GEMMs in FP8, with the F32
  // accumulator: rung 3 of the FP8 GEMM where it takes them, rung 1 for the 10-wide head).
  if (device.is_cuda() && model == "wide" && chosen_recipes.empty())
    recipes.insert(recipes.end(), {"fp8_delayed", "fp8_block"});
  for (const std::string& recipe : recipes) {
    // Its memory, measured before the next variant's tensors exist: the bytes held before it was
    // made are the earlier variants', and stay as they are while it steps.
    const std::size_t baseline = allocator_for(device).stats_on(device).allocated_bytes;
    auto trainer = std::make_shared<MixgradStep>(model, recipe, batch, device);
    add(fmt::format("mixgrad {}", recipe), [trainer] { return trainer->step(); });
    variants.back().mixgrad = trainer;
    variants.back().step();  // once, so that the optimizer's state exists, then the breakdown
    const MixgradStep::Memory m = trainer->memory(baseline);
    variants.back().memory = m;
    variants.back().peak_bytes = std::max({m.forward_peak, m.backward_peak, m.update_peak});
  }
#ifdef MG_BENCH_TORCH
  if (device.is_cpu() && model != "wide") {
    std::shared_ptr<bench::TorchStep> peer = bench::make_torch_step(model, batch, false);
    add("libtorch fp32", [peer] {
      peer->step();
      return std::size_t{0};
    });
    std::shared_ptr<bench::TorchStep> autocast = bench::make_torch_step(model, batch, true);
    add("libtorch bf16 autocast", [autocast] {
      autocast->step();
      return std::size_t{0};
    });
  }
#endif
  for (Variant& v : variants) {
    for (int i = 0; i < 5; ++i) v.saved_bytes = v.step();
  }
  for (int i = 0; i < steps; ++i)
    for (Variant& v : variants) {
      const std::int64_t faults = bench::minor_faults();
      const auto begin = bench::Clock::now();
      v.step();
      v.ms.push_back(std::chrono::duration<double, std::milli>(bench::Clock::now() - begin).count());
      if (2 * i >= steps) v.faults += bench::minor_faults() - faults;  // the second half: steady state
    }

  fmt::print("\n{} batch {} on {} ({} timed steps each, median)\n", model, batch, device, steps);
  fmt::print("  {:<24} {:>10} {:>14} {:>18} {:>10}\n", "variant", "ms/step", "faults/step*", "saved activations",
             "peak MiB");
  for (const Variant& v : variants) {
    const bool ours = v.name.starts_with("mixgrad");
    fmt::print("  {:<24} {:>10.3f} {:>14.2f} {:>18} {:>10}\n", v.name, bench::median(v.ms),
               static_cast<double>(v.faults) / std::max(1, steps / 2),
               ours ? fmt::format("{:.2f} MiB", v.saved_bytes / 1048576.0) : "-",
               ours ? fmt::format("{:.1f}", v.peak_bytes / 1048576.0) : "-");
  }
  // Each recipe against the first (fp32 by default).
  const double fp32 = bench::median(variants[0].ms);
  for (std::size_t i = 1; i < variants.size() && variants[i].name.starts_with("mixgrad"); ++i)
    fmt::print("  {} / {} (mixgrad): {:.3f}x time, {:.3f}x saved activations, {:.3f}x peak memory\n",
               variants[i].name.substr(8), variants[0].name.substr(8), bench::median(variants[i].ms) / fp32,
               static_cast<double>(variants[i].saved_bytes) / static_cast<double>(variants[0].saved_bytes),
               static_cast<double>(variants[i].peak_bytes) / static_cast<double>(variants[0].peak_bytes));
  fmt::print("  memory of one step, MiB (the allocator's bytes held; peaks are the highest held within each phase)\n");
  fmt::print("  {:<24} {:>8} {:>14} {:>13} {:>14} {:>15} {:>13}\n", "variant", "state", "+ activations", "forward peak",
             "backward peak", "after backward", "update peak");
  for (const Variant& v : variants) {
    if (!v.memory) continue;
    const auto mib = [](std::size_t bytes) { return static_cast<double>(bytes) / 1048576.0; };
    const MixgradStep::Memory& m = *v.memory;
    fmt::print("  {:<24} {:>8.2f} {:>14.2f} {:>13.2f} {:>14.2f} {:>15.2f} {:>13.2f}\n", v.name, mib(m.state),
               mib(m.after_forward - m.state), mib(m.forward_peak), mib(m.backward_peak), mib(m.after_backward),
               mib(m.update_peak));
  }
  const auto median_of = [&variants](const std::string& name) {
    const auto found = std::ranges::find(variants, name, &Variant::name);
    return found == variants.end() ? 0.0 : bench::median(found->ms);
  };
  if (median_of("libtorch fp32") > 0.0 && median_of("mixgrad fp32") > 0.0) {
    fmt::print("  mixgrad fp32 / libtorch fp32: {:.3f}x\n", median_of("mixgrad fp32") / median_of("libtorch fp32"));
    fmt::print("  mixgrad mixed_bfloat16 / libtorch bf16 autocast: {:.3f}x\n",
               median_of("mixgrad mixed_bfloat16") / median_of("libtorch bf16 autocast"));
    fmt::print("  libtorch bf16 autocast / libtorch fp32: {:.3f}x\n",
               median_of("libtorch bf16 autocast") / median_of("libtorch fp32"));
  }
  fmt::print("  * minor page faults per step over the second half of the timed steps\n");
  if (profile) print_profiles(variants, std::min(steps, 20));
}

}  // namespace

// The whole body is a try block: an mg::Error (a bad MG_GEMM, no GPU for --device cuda) ends the run
// with its message and status 1.
int main(int argc, char** argv) try {
#ifdef MG_BENCH_TORCH
  // libtorch's OpenMP threads spin for a while after each parallel region by default, and so do
  // OpenBLAS's: interleaved with mixgrad's steps on the same cores, they would steal the cores
  // mixgrad's pool is working on (measured: libtorch's own MLP step at batch 512 took 4x as long on
  // 2 threads). OpenMP reads OMP_WAIT_POLICY when it loads, before main, so the benchmark starts
  // itself again with it set to PASSIVE (idle threads sleep), unless the caller chose a policy.
  if (!std::getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
  }
#endif
  int steps = 50;
  int threads = mg::num_threads();  // MG_NUM_THREADS, else every core this process may use
  Device device = Device::cpu();
  std::vector<std::pair<std::string, std::int64_t>> cases;
  std::vector<std::string> recipes;  // --recipes: mixgrad's variants (default fp32, mixed_float16, mixed_bfloat16)
  bool profile = false;  // --profile: each mixgrad variant's step op by op, after the timings
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--steps" && i + 1 < argc) {
      steps = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
      mg::set_num_threads(threads);  // an mg::Error for a count below 1
    } else if (arg == "--recipes" && i + 1 < argc) {
      std::string list = argv[++i];
      for (std::size_t start = 0; start <= list.size();) {  // an mg::Error from parse names the recipes
        const std::size_t comma = std::min(list.find(',', start), list.size());
        recipes.emplace_back(mg::amp::Recipe::parse(list.substr(start, comma - start)).name);
        start = comma + 1;
      }
    } else if (arg == "--profile") {
      profile = true;
    } else if (arg == "--device" && i + 1 < argc) {
      device = std::string(argv[++i]) == "cuda" ? Device::cuda() : Device::cpu();
    } else if (const auto colon = arg.find(':');
               colon != std::string::npos &&
               (arg.starts_with("mlp:") || arg.starts_with("cnn:") || arg.starts_with("wide:") ||
                arg.starts_with("lstm:") || arg.starts_with("gpt:") || arg.starts_with("conv:"))) {
      cases.emplace_back(arg.substr(0, colon), std::max<std::int64_t>(1, std::atoll(arg.c_str() + colon + 1)));
    } else {
      fmt::print(
          stderr,
          "usage: {} [--device cpu|cuda] [--steps N] [--threads N] [--recipes R1,R2,...] [--profile] [mlp:B | cnn:B | conv:B | "
          "wide:B | lstm:B | gpt:B ...]\n",
          argv[0]);
      return 2;
    }
  }
  if (cases.empty()) cases = {{"mlp", 128}, {"mlp", 512}, {"cnn", 128}};
  fmt::print("{}\n", bench::machine_lines());
  if (device.is_cuda()) {
    check_device_available(device, "bench/train_step --device cuda");
    cases.emplace_back("wide", 8192);
    cases.emplace_back("cnn", 512);  // activation-bound: the peak-memory ratio under AMP
    for (const auto& [model, batch] : cases) run(model, batch, steps, device, recipes, profile);
    return 0;
  }
  fmt::print("Training step, SGD with momentum 0.9, {} thread(s) (mg::num_threads).\n", mg::num_threads());
#ifdef MG_BENCH_TORCH
  fmt::print("peer: {}\n", bench::configure_torch(threads));
#else
  fmt::print("peer: none in this binary (train_step_vs_torch, built when CMake finds libtorch, runs it beside "
             "mixgrad; see docs/results/cpu-bench.md)\n");
#endif
  for (const auto& [model, batch] : cases) run(model, batch, steps, device, recipes, profile);
  return 0;
} catch (const mg::Error& error) {
  fmt::print(stderr, "error: {}\n", error.what());
  return 1;
}
