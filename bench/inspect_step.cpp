// bench/inspect_step: what the precision inspector (train/precision_inspector.h, `mixgrad train
// --inspect`) costs a training step. The CNN of `mixgrad train --model cnn` at batch 128 under
// mixed_float16, four ways, interleaved in every repetition so that a noisy machine slows them alike:
//
//   off        no inspector: trainer.step(batch), no observer (what `mixgrad train` runs without --inspect)
//   trace      an inspector that never inspects after its first step: the per-op inf/NaN flags only,
//              the cost every step pays while --inspect is on
//   every 100  an inspector with every = 100 (the default): the trace, and the inspection amortised
//   inspected  the cost of one inspected step (every = 1): reads every layer's tensors to the host
//
// Each warms up for 5 steps (past the first, inspected, step), then the median of --steps timed steps
// (default 30) is reported, with the host's waits for the GPU per step on --device cuda.
//
//   build/bench/inspect_step                   on the CPU
//   build/bench/inspect_step --device cuda     on the GPU (a CUDA build)
//   ... --steps 200 --batch 64
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/machine.h"
#include "bench/timing.h"
#include "mixgrad.h"
#include "train/precision_inspector.h"
#ifdef MG_WITH_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace {

using namespace mg;

std::int64_t host_waits([[maybe_unused]] Device device) {
#ifdef MG_WITH_CUDA
  if (device.is_cuda()) return static_cast<std::int64_t>(cuda::host_waits());
#endif
  return 0;
}

struct Variant {
  std::string name;
  std::optional<std::int64_t> every = std::nullopt;  // none: no inspector
  std::unique_ptr<train::Trainer> trainer = nullptr;
  std::unique_ptr<train::PrecisionInspector> inspector = nullptr;
  std::vector<double> seconds = {};
  std::int64_t waits = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::int64_t steps = 30, batch = 128;
  Device device = Device::cpu();
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--batch") && i + 1 < argc)
      batch = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--device") && i + 1 < argc)
      device = !std::strcmp(argv[++i], "cuda") ? Device::cuda() : Device::cpu();
    else {
      fmt::print(stderr, "usage: inspect_step [--steps N] [--batch B] [--device cpu|cuda]\n");
      return 2;
    }
  }
  fmt::print("{}\nbench/inspect_step: the CNN, batch {}, mixed_float16, SGD momentum 0.9, on {}; median of {} steps "
             "after 5 warm-up steps; {} thread(s)\n",
             bench::machine_lines(), batch, device, steps, mg::num_threads());
  Generator data_generator(1);
  const Tensor images = randn({batch, 1, 28, 28}, data_generator).to(device);
  const Tensor labels = randint(0, 10, {batch}, data_generator).to(device);
  std::vector<Variant> variants;
  variants.push_back({.name = "off"});
  variants.push_back({.name = "trace", .every = std::int64_t{1} << 40});
  variants.push_back({.name = "every 100", .every = 100});
  variants.push_back({.name = "inspected", .every = 1});
  for (Variant& v : variants) {
    Generator generator(7);
    v.trainer = std::make_unique<train::Trainer>(
        nn::cnn({}, generator), train::TrainerOptions{.recipe = amp::Recipe::parse("mixed_float16"),
                                                      .optimizer = {.name = "sgd", .lr = 0.01, .momentum = 0.9},
                                                      .device = device});
    if (v.every)
      v.inspector = std::make_unique<train::PrecisionInspector>(*v.trainer, train::InspectorOptions{.every = *v.every});
  }
  auto step = [&](Variant& v) {
    const train::StepResult result = v.trainer->step(images, labels, {v.inspector.get()});
    if (v.inspector) v.inspector->steps_read(result.read);
  };
  for (int warm = 0; warm < 5; ++warm)
    for (Variant& v : variants) step(v);
  for (std::int64_t i = 0; i < steps; ++i)
    for (Variant& v : variants) {
      const std::int64_t waits_before = host_waits(device);
      const auto start = bench::Clock::now();
      step(v);
      if (device.is_cuda()) v.trainer->read_steps();  // the GPU's work done: a wait, counted apart
      v.seconds.push_back(std::chrono::duration<double>(bench::Clock::now() - start).count());
      v.waits += host_waits(device) - waits_before - (device.is_cuda() ? 1 : 0);
    }
  const double off = bench::median(variants.front().seconds);
  fmt::print("{:<11} {:>10} {:>9} {:>16}\n", "inspector", "ms/step", "vs off", "host waits/step");
  for (const Variant& v : variants) {
    const double ms = 1e3 * bench::median(v.seconds);
    fmt::print("{:<11} {:>10.2f} {:>8.3f}x {:>16.2f}\n", v.name, ms, ms / (1e3 * off),
               static_cast<double>(v.waits) / static_cast<double>(steps));
  }
  return 0;
}
