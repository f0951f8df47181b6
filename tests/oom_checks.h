// What the suites on running out of device memory share (issue 33; test_cuda_oom.cpp: the emulator's
// memory limit, the CUDA allocator's retry and message, a training step that runs out there;
// test_cuda_oom_sweep.cpp: each allocation of a step failing in turn): the numbers an out-of-memory
// message states, the trainer the cases run, and a snapshot of everything a step may change.
// For builds with a CUDA backend (MG_WITH_CUDA).
#pragma once

#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "kernels/cuda/allocator.h"
#include "kernels/cuda/runtime.h"
#include "tests/testing.h"

namespace mg::testing {

constexpr std::size_t kKiB = 1 << 10;

// What mixgrad's tensors hold on the first GPU (size classes).
inline std::size_t allocated() { return cuda::allocator().stats(0).allocated_bytes; }

// The message of the mg::Error that fn throws (a failed check when it throws none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& error) {
    return error.what();
  }
  FAIL("no mg::Error was thrown");
  return "";
}

// The numbers an out-of-memory message of the CUDA allocator states, in bytes (free and total as
// rounded to one decimal of their unit); found is false when the message does not have them.
struct OomNumbers {
  bool found = false;
  std::size_t asked = 0;
  double free = 0, total = 0, unit_of_total = 1;
};

inline OomNumbers numbers_of(const std::string& message) {
  static const std::regex pattern(R"(CUDA allocator: out of memory allocating (\d+) bytes.*: cuda:0 has ([0-9.]+) )"
                                  R"((bytes|KiB|MiB|GiB) free of ([0-9.]+) (bytes|KiB|MiB|GiB) total)");
  auto unit = [](const std::string& name) {
    return name == "GiB" ? double(1 << 30) : name == "MiB" ? double(1 << 20) : name == "KiB" ? 1024.0 : 1.0;
  };
  std::smatch match;
  if (!std::regex_search(message, match, pattern)) return {};
  return {true, std::stoull(match[1]), std::stod(match[2]) * unit(match[3]), std::stod(match[4]) * unit(match[5]),
          unit(match[5])};
}

// What the message must say besides the numbers: the retry, and what to do.
inline void check_advice(const std::string& message) {
  INFO("message: " << message);
  CHECK(message.find("after its cache of") != std::string::npos);
  CHECK(message.find("retried") != std::string::npos);
  CHECK(message.find("use a smaller --batch, or a --precision that needs less memory") != std::string::npos);
  CHECK(message.find("mixed_bfloat16") != std::string::npos);
}

// The trainer of these cases: at a batch of 512 the MLP's activations take about ten times its
// parameters, so a batch that size needs memory that a batch of 8 does not. Under mixed_float16:
// autocast's casts on the tape, a dynamic loss scale; Adam's moments as the optimizer's state.
constexpr std::int64_t kBigBatch = 512, kSmallBatch = 8;

inline std::unique_ptr<train::Trainer> make_trainer(std::uint64_t seed, Device device = Device::cuda()) {
  Generator generator(seed);
  return std::make_unique<train::Trainer>(nn::mlp({16, 64, 64, 10}, generator),
                                          train::TrainerOptions{.recipe = amp::Recipe::parse("mixed_float16"),
                                                                .optimizer = {.name = "adam", .lr = 0.01},
                                                                .device = device,
                                                                .read_every = 1});
}

struct Batch {
  Tensor x, y;  // on the CPU, as a data loader gives them
};
inline Batch batch(std::int64_t rows) {
  Generator generator(static_cast<std::uint64_t>(rows));
  return {uniform({rows, 16}, -1.0, 1.0, generator), randint(0, 10, {rows}, generator)};
}

// Everything of a run that a step may change, read back: equal snapshots, equal runs, bit for bit.
struct Snapshot {
  std::vector<std::vector<unsigned char>> parameters;
  std::map<std::string, std::vector<unsigned char>> optimizer;  // moments, step count, rates
  double scale = 0;
  std::int64_t monitored_steps = 0;
  bool operator==(const Snapshot&) const = default;
};

inline Snapshot snapshot(train::Trainer& trainer) {
  Snapshot s;
  for (const Tensor& p : trainer.model().parameters()) s.parameters.push_back(p.host_bytes("test"));
  for (const auto& [name, t] : trainer.optimizer().state_dict()) s.optimizer[name] = t.host_bytes("test");
  s.scale = trainer.scaler().get_scale();
  s.monitored_steps = trainer.monitor().steps();
  return s;
}

inline bool any_gradient(train::Trainer& trainer) {
  bool any = false;
  for (const Tensor& p : trainer.model().parameters()) any = any || p.grad().defined();
  return any;
}

}  // namespace mg::testing
