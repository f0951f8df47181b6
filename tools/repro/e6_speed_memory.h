// E6, the paper's §1 and §5: every variant on the CNN, and what half precision saves.
//
// The CNN of E1 in all seven variants (V0..V6), SGD with momentum: test accuracy, training
// throughput (images per second, after warm-up steps) and the peak memory of training (the most
// the device's allocator held at once above what it held before the model was built: weights,
// master copies, gradients, optimizer state, activations). On a GPU (--device cuda) also a larger
// CNN and the tiny GPT on the KJV text, whose speed is what the paper's "2-8x" is about.
//
// On a CPU the speed column is not the paper's claim: mixgrad's CPU backend emulates f16/bf16
// (rounds operands, multiplies in f32), so reduced precision costs time there. Memory is a property
// of the dtypes, and the CPU's allocator measures it as well as a GPU's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/repro/experiment.h"

namespace mg::tools::repro {

struct E6Options {
  std::int64_t train_examples = 10000, test_examples = 1000;
  std::int64_t steps = 150, batch = 64, log_every = 10;
  double lr = 0.05, momentum = 0.9;
  nn::CnnOptions cnn{.channels1 = 8, .channels2 = 16, .hidden = 64};
  std::vector<std::string> variant_ids{"V0", "V1", "V2", "V3", "V4", "V5", "V6"};
  double static_scale = 1024;
  // The larger models (on by default with --device cuda).
  bool large = false;
  nn::CnnOptions large_cnn{.channels1 = 64, .channels2 = 128, .hidden = 512};
  std::int64_t large_steps = 300, large_batch = 256;
  nn::GptOptions gpt{.block_size = 128, .embed_dim = 384, .heads = 6, .layers = 6};  // vocab from the text
  std::int64_t gpt_steps = 200, gpt_batch = 32;
  double gpt_lr = 1e-3;  // Adam
  std::vector<std::string> large_variant_ids{"V0", "V2", "V4", "V5"};
  std::uint64_t seed = 0;
  Device device = Device::cpu();
};

// The preset's sizes for a device (the larger models on a GPU only), run from `seed`.
E6Options e6_options(Preset preset, Device device, std::uint64_t seed);

struct E6Workload {
  std::string model;  // "CNN", "large CNN", "tiny GPT"
  std::string unit;  // "images" or "tokens"
  std::vector<RunResult> runs{};
};

struct E6Result {
  E6Options options;
  std::vector<E6Workload> workloads{};  // the CNN, then the larger ones when options.large
};

// `text` may be null unless options.large.
E6Result run_e6(const E6Options& options, std::shared_ptr<const ImageData> images, std::shared_ptr<const TextData> text,
                const Progress& progress = {});

// Writes e6_runs.csv and returns the section.
Section e6_section(const E6Result& result, Report& report);

extern const Heading kE6SpeedMemory;

}  // namespace mg::tools::repro
