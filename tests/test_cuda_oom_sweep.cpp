// Every allocation of a training step may be the one that runs out of device memory (issue 33):
// a stand-in for the CUDA allocator fails the n-th request of a step, for each n up to the end of
// backward, and after each failure the process must be usable: the tape empty, the step's memory
// given back, no gradients, the run as it was (train::Trainer::step); and backward() alone changes
// no .grad when it runs out (autograd/tape.h). test_cuda_oom.cpp runs out through the emulator's
// memory limit instead, where the allocator's own message is checked.
//
// The stand-in runs on a real GPU and on the emulator alike; without a device the cases skip.
#include "tests/testing.h"
#ifdef MG_WITH_CUDA
#include "tests/oom_checks.h"
#endif

using namespace mg;
using namespace mg::testing;

#ifdef MG_WITH_CUDA
namespace {

// Serves every request from the CUDA allocator, except the n-th after fail_at(n), which throws as a
// full device does; counts the requests.
class FailingAllocator final : public Allocator {
 public:
  std::int64_t requests = 0;
  void fail_at(std::int64_t n) { countdown_ = n; }  // 0: none fails
  void* allocate_on(Device device, std::size_t nbytes) override {
    ++requests;
    if (countdown_ > 0 && --countdown_ == 0)
      throw Error(fmt::format("CUDA allocator: out of memory allocating {} bytes (injected by the test)", nbytes));
    return cuda::allocator().allocate_on(device, nbytes);
  }
  void deallocate_on(Device device, void* ptr, std::size_t nbytes) override {
    cuda::allocator().deallocate_on(device, ptr, nbytes);
  }
  void* allocate(std::size_t nbytes) override { return allocate_on(Device::cuda(), nbytes); }
  void deallocate(void* ptr, std::size_t nbytes) override { deallocate_on(Device::cuda(), ptr, nbytes); }
  Device device() const override { return Device::cuda(); }
  AllocatorStats stats_on(Device device) const override { return cuda::allocator().stats_on(device); }

 private:
  std::int64_t countdown_ = 0;
};

// One for the process, never destroyed: storages made through it give their memory back through it,
// however late (and LeakSanitizer sees it held by a static).
FailingAllocator& failing_allocator() {
  static auto* instance = new FailingAllocator();
  return *instance;
}

// The stand-in in place of the CUDA allocator while it lives, counting from 0, failing nothing yet.
struct UseFailingAllocator {
  FailingAllocator& allocator = failing_allocator();
  UseFailingAllocator() {
    allocator.requests = 0;
    allocator.fail_at(0);
    set_allocator(DeviceType::CUDA, &allocator);
  }
  ~UseFailingAllocator() { set_allocator(DeviceType::CUDA, nullptr); }
  UseFailingAllocator(const UseFailingAllocator&) = delete;
  UseFailingAllocator& operator=(const UseFailingAllocator&) = delete;
};

}  // namespace
#endif

TEST_CASE("Trainer: running out at any one allocation of forward or backward leaves the process usable") {
#ifdef MG_WITH_CUDA
  if (!have_gpu()) return;
  auto trainer = make_trainer(1);
  const Batch data = batch(kSmallBatch);
  UseFailingAllocator use;
  trainer->step(data.x, data.y);  // the optimizer's moments and the scaler's numbers exist from here on
  struct CountRequests : train::StepObserver {
    FailingAllocator& allocator;
    std::int64_t through_backward = 0;
    explicit CountRequests(FailingAllocator& a) : allocator(a) {}
    void after_backward(const optim::Optimizer&) override { through_backward = allocator.requests; }
  } count(use.allocator);
  use.allocator.requests = 0;
  trainer->step(data.x, data.y, {&count});
  REQUIRE(count.through_backward > 10);
  trainer->optimizer().zero_grad();
  const Snapshot before = snapshot(*trainer);  // (its reads free the optimizer's unread step flags)
  const std::size_t held = allocated();
  for (std::int64_t n = 1; n <= count.through_backward; ++n) {
    INFO("request " << n << " of the " << count.through_backward << " up to the end of backward fails");
    use.allocator.fail_at(n);
    check_error([&] { trainer->step(data.x, data.y); }, "injected by the test");
    CHECK(tape_size() == 0);
    CHECK_FALSE(any_gradient(*trainer));
    CHECK(allocated() == held);
    CHECK(snapshot(*trainer) == before);
  }
  // An error after backward (an observer's, here) finds the gradients made: the step drops them.
  struct StopAfterBackward : train::StepObserver {
    void after_backward(const optim::Optimizer&) override { throw Error("stopped after backward"); }
  } stop;
  check_error([&] { trainer->step(data.x, data.y, {&stop}); }, "stopped after backward");
  CHECK_FALSE(any_gradient(*trainer));
  CHECK(allocated() == held);
  trainer->step(data.x, data.y);
  CHECK(snapshot(*trainer).parameters != before.parameters);
#endif
}

TEST_CASE("backward: running out at any one of its allocations changes no .grad and clears the tape") {
#ifdef MG_WITH_CUDA
  if (!have_gpu()) return;
  // f16 leaves, each used twice: their two gradients meet in f32, and each sum is rounded to f16
  // after the walk, one allocation a leaf: failing there must not leave the other leaf updated.
  Generator generator(3);
  Tensor w = randn({16, 8}, generator, {.dtype = DType::F16}).to(Device::cuda()).set_requires_grad(true);
  Tensor b = zeros({8}, {.dtype = DType::F16, .device = Device::cuda()}).set_requires_grad(true);
  const Tensor x = randn({4, 16}, generator, {.dtype = DType::F16}).to(Device::cuda());
  auto loss_of = [&] { return mean(cast(relu(add(add(matmul(x, w), matmul(x, w)), add(b, b))), DType::F32)); };
  UseFailingAllocator use;
  backward(loss_of());
  {
    const Tensor loss = loss_of();
    use.allocator.requests = 0;
    backward(loss);
  }
  const std::int64_t requests = use.allocator.requests;
  REQUIRE(requests > 3);
  b.zero_grad();  // b's next gradient is adopted; w's is added into its .grad
  const std::vector<unsigned char> w_grad = w.grad().host_bytes("test");
  const std::size_t before = allocated();
  for (std::int64_t n = 1; n <= requests; ++n) {
    INFO("request " << n << " of backward's " << requests << " fails");
    {
      const Tensor loss = loss_of();
      use.allocator.fail_at(n);
      check_error([&] { backward(loss); }, "injected by the test");
    }
    CHECK(tape_size() == 0);
    CHECK(w.grad().host_bytes("test") == w_grad);
    CHECK_FALSE(b.grad().defined());
    CHECK(allocated() == before);
  }
  backward(loss_of());
  CHECK(w.grad().host_bytes("test") != w_grad);
  CHECK(b.grad().defined());
#endif
}
