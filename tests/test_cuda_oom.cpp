// Running out of device memory (issue 33), where the device says so: the emulated device's memory
// limit and cudaMemGetInfo; the caching CUDA allocator's retry after giving its cache back, and its
// message when that fails too (the size asked for, the device's free and total memory, what to do);
// and a train::Trainer step that runs out in its forward pass or in backward: it leaves the tape
// empty, its memory given back and the run as it was, so that a smaller batch then trains and a
// checkpoint written before loads. test_cuda_oom_sweep.cpp fails each allocation of a step in turn.
//
// The cases that need a small device lower the emulator's limit (MG_EMULATOR_MEMORY_LIMIT's
// setting) and restore it; they skip on a real GPU, where only the request larger than the whole
// device runs. Every case skips without a device (the emulation build runs them all).
#include "tests/temp_dir.h"
#include "tests/testing.h"
#ifdef MG_WITH_CUDA
#include "tests/oom_checks.h"
#endif
#ifdef MG_CUDA_EMULATED
#include "emulator/emulator.h"
#endif

using namespace mg;
using namespace mg::testing;

// The cases that lower the device's memory start with this where there is no emulator to lower.
[[maybe_unused]] constexpr const char* kNeedsTheEmulator =
    "skipped: needs the CUDA emulator's memory limit (a build with -DMG_CUDA=EMULATE)";

#ifdef MG_CUDA_EMULATED
namespace {

// The device's free memory, from the driver.
std::size_t device_free() {
  std::size_t free = 0, total = 0;
  MG_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

// Lowers the emulated device's memory for its scope to what is allocated now plus `free_bytes`, the
// caching allocator's cache given back first (so that cached blocks cannot stretch the budget): an
// allocation then fits when mixgrad's allocated bytes stay within `free_bytes` of today's.
class MemoryLimit {
 public:
  explicit MemoryLimit(std::size_t free_bytes) {
    cuda::allocator().empty_cache();
    std::size_t free = 0, total = 0;
    MG_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    emu::settings().memory_limit_bytes = total - free + free_bytes;
  }
  ~MemoryLimit() { emu::settings().memory_limit_bytes = saved_; }
  MemoryLimit(const MemoryLimit&) = delete;
  MemoryLimit& operator=(const MemoryLimit&) = delete;

 private:
  std::size_t saved_ = emu::settings().memory_limit_bytes;
};

// The device memory a step takes beyond what was allocated when it began (after it dropped the
// last step's gradients): its peak up to the end of the forward pass, and up to the end of backward.
struct StepMemory : train::StepObserver {
  std::size_t start = 0, forward = 0, backward = 0;
  void before_forward() override {
    cuda::allocator().reset_peak(0);
    start = allocated();
  }
  void after_forward(const Tensor&) override { forward = cuda::allocator().stats(0).peak_allocated_bytes - start; }
  void after_backward(const optim::Optimizer&) override {
    backward = cuda::allocator().stats(0).peak_allocated_bytes - start;
  }
};

// Which phases of a step ended.
struct Phases : train::StepObserver {
  bool forward = false, backward = false;
  void after_forward(const Tensor&) override { forward = true; }
  void after_backward(const optim::Optimizer&) override { backward = true; }
};

// While it lives: the most nodes the tape held when an op ran (more than 0: the forward pass had
// recorded ops, holding activations, when the error came).
struct TapeWatch : OpObserver {
  std::size_t most = 0;
  TapeWatch() { add_observer(this); }
  ~TapeWatch() override { remove_observer(this); }
  void forward(const char*, const std::string&, const std::vector<Tensor>&, const Tensor&) override {
    most = std::max(most, tape_size());
  }
  void backward(const char*, const std::string&, const Tensor&, const Grads&) override {}
};

}  // namespace
#endif

TEST_CASE("a request larger than the whole device fails with the sizes and what to do; nothing stays taken") {
#ifdef MG_WITH_CUDA
  if (!have_gpu()) return;
  std::size_t free = 0, total = 0;
  MG_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  CHECK(free <= total);
  const std::size_t before = allocated();
  const auto elements = static_cast<std::int64_t>(total / 2);  // f32: twice the device
  const std::string message = error_of([&] { Tensor::empty({elements}, {.device = Device::cuda()}); });
  const OomNumbers numbers = numbers_of(message);
  INFO("message: " << message);
  REQUIRE(numbers.found);
  CHECK(numbers.asked == CachingCpuAllocator::size_class(static_cast<std::size_t>(elements) * 4));
  CHECK(std::abs(numbers.total - static_cast<double>(total)) <= 0.05 * numbers.unit_of_total);
  CHECK(numbers.free < static_cast<double>(numbers.asked));
  check_advice(message);
  CHECK(allocated() == before);
  check_close(full({3}, 2.0, {.device = Device::cuda()}), full({3}, 2.0), 0.0, 0.0);  // the device goes on
#endif
}

TEST_CASE("emulator: cudaMalloc fails past the memory limit; cudaMemGetInfo's free falls by what is allocated") {
#ifndef MG_CUDA_EMULATED
  MESSAGE(kNeedsTheEmulator);
#else
  // From MG_EMULATOR_MEMORY_LIMIT when set (ctest runs this case once more with it), else an H100's.
  const char* variable = std::getenv("MG_EMULATOR_MEMORY_LIMIT");
  CHECK(emu::settings().memory_limit_bytes ==
        (variable != nullptr ? emu::parse_memory_size(variable) : std::size_t{80} << 30));
  CHECK(emu::parse_memory_size("4096") == 4096);
  CHECK(emu::parse_memory_size("512MiB") == std::size_t{512} << 20);
  CHECK(emu::parse_memory_size("80GiB") == std::size_t{80} << 30);
  check_error([] { emu::parse_memory_size("1.5GiB"); }, "MG_EMULATOR_MEMORY_LIMIT=1.5GiB is not a size");
  check_error([] { emu::parse_memory_size("2GB"); }, "KiB, MiB or GiB");

  MemoryLimit limit(1 << 20);  // 1 MiB beyond what is allocated
  std::size_t free = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  CHECK(total == emu::settings().memory_limit_bytes);
  CHECK(free == 1 << 20);
  void* first = nullptr;
  REQUIRE(cudaMalloc(&first, 600 * kKiB) == cudaSuccess);
  CHECK(device_free() == free - 600 * kKiB);
  void* second = nullptr;
  CHECK(cudaMalloc(&second, 600 * kKiB) == cudaErrorMemoryAllocation);  // 1200 KiB > 1 MiB
  CHECK(second == nullptr);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);  // the error is the thread's last, once
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(device_free() == free - 600 * kKiB);  // a failed cudaMalloc takes nothing
  REQUIRE(cudaMalloc(&second, free - 600 * kKiB) == cudaSuccess);  // exactly what is left
  CHECK(device_free() == 0);
  CHECK(cudaFree(first) == cudaSuccess);
  CHECK(cudaFree(second) == cudaSuccess);
  CHECK(device_free() == free);
#endif
}

TEST_CASE("CUDA allocator: out of memory gives the cache back and retries: a size the cache held room for fits") {
#ifndef MG_CUDA_EMULATED
  MESSAGE(kNeedsTheEmulator);
#else
  constexpr std::size_t kBlock = 256 * kKiB;  // a size class of its own
  MemoryLimit limit(4 * kBlock);
  {
    // Four blocks fill the device; freed, they stay reserved in the cache, in their size class.
    std::vector<Tensor> filling;
    for (int i = 0; i < 4; ++i) filling.push_back(Tensor::empty({kBlock / 4}, {.device = Device::cuda()}));
  }
  const AllocatorStats cached = cuda::allocator().stats(0);
  CHECK(cached.reserved_bytes - cached.allocated_bytes == 4 * kBlock);
  CHECK(device_free() == 0);
  // Twice the block is another size class: no cached block serves it, and the device has room for it
  // only once the cache is given back.
  const Tensor big = full({2 * kBlock / 4}, 1.5, {.device = Device::cuda()});
  const AllocatorStats after = cuda::allocator().stats(0);
  CHECK(after.reserved_bytes == after.allocated_bytes);  // the whole cache went back
  CHECK(after.allocated_bytes == cached.allocated_bytes + 2 * kBlock);
  CHECK(after.system_allocations == cached.system_allocations + 1);
  CHECK(device_free() == 2 * kBlock);
  CHECK(big.to(Device::cpu()).to_vector<float>() == std::vector<float>(2 * kBlock / 4, 1.5f));
  // Past what the device has even without a cache: the error, and nothing taken.
  const std::string message = error_of([] { Tensor::empty({4 * kBlock / 4}, {.device = Device::cuda()}); });
  INFO("message: " << message);
  const OomNumbers numbers = numbers_of(message);
  REQUIRE(numbers.found);
  CHECK(numbers.asked == 4 * kBlock);
  CHECK(numbers.free == 2 * kBlock);
  CHECK(std::abs(numbers.total - static_cast<double>(emu::settings().memory_limit_bytes)) <=
        0.05 * numbers.unit_of_total);
  check_advice(message);
  CHECK(cuda::allocator().stats(0).allocated_bytes == after.allocated_bytes);
#endif
}

// ---- a training step that runs out of memory ---------------------------------------------------

TEST_CASE("Trainer: out of device memory in forward or in backward; then a smaller batch trains") {
#ifndef MG_CUDA_EMULATED
  MESSAGE(kNeedsTheEmulator);
#else
  auto trainer = make_trainer(1);
  const Batch big = batch(kBigBatch), small = batch(kSmallBatch);
  StepMemory big_step, small_step;  // measured without a limit
  trainer->step(big.x, big.y, {&big_step});
  trainer->step(small.x, small.y, {&small_step});
  INFO("a step of 512 takes " << big_step.forward << " bytes in forward, " << big_step.backward
                              << " to the end of backward; a step of 8: " << small_step.backward);
  // A limit below the forward pass's peak fails there; one between it and backward's peak, in backward.
  REQUIRE(big_step.backward > big_step.forward);  // the emulator's count is exact: a byte would do
  const std::size_t in_forward = big_step.forward / 2, in_backward = (big_step.forward + big_step.backward) / 2;
  REQUIRE(small_step.backward < in_forward);  // either limit leaves room for a small step
  for (const bool fails_in_backward : {false, true}) {
    INFO((fails_in_backward ? "in backward" : "in forward"));
    trainer->optimizer().zero_grad();
    const Snapshot before = snapshot(*trainer);  // (its reads free the optimizer's unread step flags)
    const std::size_t held = allocated();  // the model, the optimizer's state, the scaler's numbers
    MemoryLimit limit(fails_in_backward ? in_backward : in_forward);
    Phases phases;
    std::string message;
    {
      TapeWatch tape;
      message = error_of([&] { trainer->step(big.x, big.y, {&phases}); });
      CHECK(tape.most > 0);  // nodes holding activations were on the tape when the error came
    }
    CHECK(phases.forward == fails_in_backward);
    CHECK_FALSE(phases.backward);
    INFO("message: " << message);
    const OomNumbers numbers = numbers_of(message);
    REQUIRE(numbers.found);
    CHECK(static_cast<double>(numbers.asked) > numbers.free);
    CHECK(std::abs(numbers.total - static_cast<double>(emu::settings().memory_limit_bytes)) <=
          0.05 * numbers.unit_of_total);
    check_advice(message);
    // Usable: nothing of the step is left, the update did not run.
    CHECK(tape_size() == 0);
    CHECK_FALSE(any_gradient(*trainer));
    CHECK(allocated() == held);
    CHECK(snapshot(*trainer) == before);
    // Under the same limit, a smaller batch trains.
    trainer->step(small.x, small.y);
    CHECK(snapshot(*trainer).parameters != before.parameters);
  }
#endif
}

TEST_CASE("Trainer: a checkpoint written before running out of device memory loads afterwards, bit for bit") {
#ifndef MG_CUDA_EMULATED
  MESSAGE(kNeedsTheEmulator);
#else
  TempDir dir;
  auto trainer = make_trainer(1);
  const Batch big = batch(kBigBatch), small = batch(kSmallBatch);
  for (int i = 0; i < 3; ++i) trainer->step(small.x, small.y);
  train::save_checkpoint(dir / "before.safetensors", trainer->checkpoint_objects());  // copied from the device
  const Snapshot saved = snapshot(*trainer);
  {
    MemoryLimit limit(128 * kKiB);  // room for the batch and the first layer, not for the whole forward pass
    check_error([&] { trainer->step(big.x, big.y); }, "CUDA allocator: out of memory");
  }
  CHECK(snapshot(*trainer) == saved);
  auto resumed = make_trainer(2);  // other initial weights: the checkpoint must replace them
  CHECK(snapshot(*resumed).parameters != saved.parameters);
  train::load_checkpoint(dir / "before.safetensors", resumed->checkpoint_objects());
  CHECK(snapshot(*resumed) == saved);
  trainer->step(small.x, small.y);
  resumed->step(small.x, small.y);
  CHECK(snapshot(*resumed) == snapshot(*trainer));
#endif
}
