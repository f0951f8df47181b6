// Data-parallel training steps: the time of one step of a global batch on 1 process and on N ranks,
// the gradient bytes each rank sends, and how much of the all-reduce backward did not hide.
//
//   build/bench/data_parallel [--device cpu|cuda] [--steps 30] [--threads 1] [--wire f32|f16|bf16] [--bucket-kb 256]
//                             [mlp:256 cnn:64 ...]
//   mpirun -n 2 build/bench/data_parallel ...            (as root: mpirun --allow-run-as-root)
//
// Without mpirun it times one process with no DataParallel (the baseline); under mpirun each rank
// trains its shard (B / N rows) of the same global batch B through train::Trainer, as `mixgrad train`
// does. Every rank starts each step together (a barrier, not timed); the step time is rank 0's
// median over the steps after 3 warm-up steps. "exposed" is the median time finish() waited for
// all-reduces after backward returned. Traffic per rank: a ring all-reduce of P bytes sends and
// receives 2 (N - 1) / N x P bytes on each rank (Open MPI picks its algorithm by size; the ring is
// the usual one for large buffers, and NCCL's). Results: docs/data-parallel.md.
#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "bench/machine.h"
#include "bench/timing.h"
#include "mixgrad.h"

using namespace mg;

namespace {

struct Workload {
  std::string model;
  std::int64_t batch;  // the global batch
};

std::shared_ptr<nn::Module> make_model(const std::string& name) {
  Generator generator(0);
  if (name == "mlp") return nn::mlp({784, 256, 256, 10}, generator);
  if (name == "lstm") return std::make_shared<nn::CharLSTM>(65, 64, 256, 1, generator);
  if (name == "gpt")
    return std::make_shared<nn::TinyGPT>(
        nn::GptOptions{.vocab = 65, .block_size = 64, .embed_dim = 128, .heads = 4, .layers = 4}, generator);
  if (name == "cnn") return nn::cnn({}, generator);
  throw Error(fmt::format("bench/data_parallel: unknown model '{}'; use mlp, cnn, lstm or gpt", name));
}

// This rank's rows of a fixed random global batch.
data::Batch shard_of_batch(const std::string& model, std::int64_t batch, data::Shard shard) {
  Generator generator(1);
  const bool text = model == "lstm" || model == "gpt";
  Tensor x = text ? randint(0, 65, {batch, 64}, generator) : randn({batch, 1, 28, 28}, generator);
  Tensor y = text ? randint(0, 65, {batch, 64}, generator) : randint(0, 10, {batch}, generator);
  const auto [first, end] = shard.rows(batch);
  return {x.slice(first, end).clone(), y.slice(first, end).clone(), batch};
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 30, threads = 1;
  std::int64_t bucket_kb = 256;
  std::string wire = "f32", recipe = "mixed_float16", device_name = "cpu";
  std::vector<Workload> workloads;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--steps" && has_value)
      steps = std::atoi(argv[++i]);
    else if (arg == "--threads" && has_value)
      threads = std::atoi(argv[++i]);
    else if (arg == "--wire" && has_value)
      wire = argv[++i];
    else if (arg == "--bucket-kb" && has_value)
      bucket_kb = std::atoll(argv[++i]);
    else if (arg == "--precision" && has_value)
      recipe = argv[++i];
    else if (arg == "--device" && has_value)
      device_name = argv[++i];
    else if (const auto colon = arg.find(':'); colon != std::string::npos)
      workloads.push_back({arg.substr(0, colon), std::atoll(arg.c_str() + colon + 1)});
    else {
      fmt::print(
          stderr,
          "usage: [mpirun -n N] {} [--device cpu|cuda] [--steps N] [--threads N] [--wire f32|f16|bf16] [--bucket-kb K] "
          "[--precision R] [mlp:B | cnn:B | lstm:B | gpt:B ...]\n",
          argv[0]);
      return 1;
    }
  }
  if (workloads.empty()) workloads = {{"mlp", 256}, {"cnn", 64}, {"lstm", 32}, {"gpt", 32}};
  try {
    set_num_threads(threads);
    std::shared_ptr<dist::ProcessGroup> group;
    // One GPU per rank: the rank's place on its node picks it (NCCL); the CPU's ranks use MPI.
    const Device device = device_name == "cuda" ? Device::cuda(dist::local_rank()) : Device::cpu();
    if (dist::launched_by_mpirun()) group = dist::init_process_group(device);
    const int rank = group ? group->rank() : 0, ranks = group ? group->size() : 1;
    const DType wire_dtype = wire == "f16" ? DType::F16 : wire == "bf16" ? DType::BF16 : DType::F32;
    if (rank == 0) {
      fmt::print("{}\ndevice: {}\n", bench::machine_lines(), device);
      fmt::print("{}; {} thread(s) per rank; recipe {}; gradients on the wire: {}, buckets of {} KiB; {} steps after "
                 "3 warm-up, median\n",
                 group ? fmt::format("{} rank(s) of mpirun", ranks) : "1 process, no DataParallel", threads, recipe,
                 wire, bucket_kb, steps);
      fmt::print("{:<5} {:>6} {:>6} {:>10} {:>10} {:>12} {:>14} {:>11} {:>9}\n", "model", "batch", "ranks", "step ms",
                 "items/s", "grad KiB", "ring KiB/rank", "exposed ms", "overlap");
    }
    for (const Workload& w : workloads) {
      train::Trainer trainer(make_model(w.model),
                             {.recipe = amp::Recipe::parse(recipe),
                              .optimizer = {.name = "sgd", .lr = 0.01, .momentum = 0.9},
                              .device = device,
                              .process_group = group,
                              .data_parallel = {.bucket_bytes = bucket_kb * 1024, .wire_dtype = wire_dtype}});
      const data::Batch batch = shard_of_batch(w.model, w.batch, {rank, ranks});
      std::vector<double> seconds, exposed;
      for (int step = 0; step < steps + 3; ++step) {
        if (group) group->barrier();
        const auto start = bench::Clock::now();
        trainer.step(batch).loss.item();  // reading the loss waits for a GPU's step
        const double elapsed = std::chrono::duration<double>(bench::Clock::now() - start).count();
        if (step < 3) continue;
        seconds.push_back(elapsed);
        if (trainer.data_parallel()) exposed.push_back(trainer.data_parallel()->last_sync().wait_seconds);
      }
      if (rank != 0) continue;
      const double step_s = bench::median(seconds);
      const std::int64_t items = w.batch * (w.model == "lstm" || w.model == "gpt" ? 64 : 1);
      const train::DataParallel* replicas = trainer.data_parallel();
      const double grad_kib = replicas ? replicas->last_sync().payload_bytes / 1024.0 : 0.0;
      fmt::print("{:<5} {:>6} {:>6} {:>10.2f} {:>10.0f} {:>12.0f} {:>14.0f} {:>11.3f} {:>9}\n", w.model, w.batch, ranks,
                 1e3 * step_s, items / step_s, grad_kib, grad_kib * 2.0 * (ranks - 1) / ranks,
                 1e3 * bench::median(exposed),
                 replicas ? fmt::format("{}/{}", replicas->last_sync().launched_during_backward,
                                        replicas->last_sync().buckets)
                          : std::string("-"));
    }
  } catch (const Error& error) {
    dist::abort_job(error.what());
  }
  return 0;
}
