// The caching CPU allocator: size classes, reuse, statistics, and the property that matters for
// speed on this hardware: after one warm-up step, a training step takes no new memory from the
// system (so it faults no fresh pages).
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

TEST_CASE("allocator: size classes waste at most a quarter") {
  CHECK(CachingCpuAllocator::size_class(1) == 256);
  CHECK(CachingCpuAllocator::size_class(256) == 256);
  CHECK(CachingCpuAllocator::size_class(257) == 320);  // 256 + 64
  CHECK(CachingCpuAllocator::size_class(1024) == 1024);
  CHECK(CachingCpuAllocator::size_class(1025) == 1280);
  CHECK(CachingCpuAllocator::size_class(3000) == 3072);
  for (std::size_t n : {300ul, 5000ul, 70000ul, 1234567ul, 100000000ul}) {
    std::size_t c = CachingCpuAllocator::size_class(n);
    CHECK(c >= n);
    CHECK(c <= n + n / 4 + 64);
    CHECK(c % 64 == 0);
  }
}

TEST_CASE("allocator: a freed block is reused and counted") {
  CachingCpuAllocator allocator;
  void* a = allocator.allocate(10000);
  CHECK(reinterpret_cast<std::uintptr_t>(a) % 64 == 0);
  AllocatorStats s = allocator.stats();
  CHECK(s.system_allocations == 1);
  CHECK(s.allocated_bytes == CachingCpuAllocator::size_class(10000));
  allocator.deallocate(a, 10000);
  CHECK(allocator.stats().allocated_bytes == 0);
  CHECK(allocator.stats().reserved_bytes == CachingCpuAllocator::size_class(10000));
  void* b = allocator.allocate(9990);  // same size class
  CHECK(b == a);
  CHECK(allocator.stats().cache_hits == 1);
  CHECK(allocator.stats().system_allocations == 1);
  CHECK(allocator.stats().peak_allocated_bytes == CachingCpuAllocator::size_class(10000));
  allocator.deallocate(b, 9990);
  allocator.empty_cache();
  CHECK(allocator.stats().reserved_bytes == 0);
  CHECK(allocator.allocate(0) == nullptr);
}

TEST_CASE("allocator: steady-state training steps take no new memory from the system") {
  Generator generator(0);
  Tensor x = randn({64, 784}, generator);
  Tensor labels = randint(0, 10, {64}, generator);
  Tensor w1 = mul(randn({784, 128}, generator), 0.05).detach().set_requires_grad(true);
  Tensor w2 = mul(randn({128, 10}, generator), 0.05).detach().set_requires_grad(true);
  auto step = [&] {
    Tensor h = relu(matmul(cast(x, DType::F16), cast(w1, DType::F16)));
    Tensor loss = cross_entropy(cast(matmul(h, cast(w2, DType::F16)), DType::F32), labels);
    backward(loss);
    NoGradGuard no_grad;
    w1.copy_(sub(w1, mul(w1.grad(), 0.1)));
    w2.copy_(sub(w2, mul(w2.grad(), 0.1)));
    w1.zero_grad();
    w2.zero_grad();
  };
  step();  // warm-up: fills the cache
  step();
  const std::size_t before = cpu_allocator().stats().system_allocations;
  for (int i = 0; i < 5; ++i) step();
  CHECK(cpu_allocator().stats().system_allocations == before);
  CHECK(cpu_allocator().stats().cache_hits > 0);
}

TEST_CASE("allocator: a tensor on a device without an allocator, or a missing GPU, is a clear error") {
  if (!built_with_cuda()) {
    check_error([] { Tensor::empty({2}, {.device = Device::cuda(0)}); }, "no CUDA allocator");
  } else {  // the CUDA backend's allocator serves; the device itself must exist
    const int missing = cuda_device_count();  // the first index past the visible devices
    check_error([=] { Tensor::empty({2}, {.device = Device::cuda(missing)}); },
                fmt::format("cuda:{} is not available", missing));
  }
  check_error([] { set_allocator(DeviceType::CPU, nullptr); }, "set_allocator");
}

// AddressSanitizer's allocator stops the process at a request this large rather than returning null
// (its allocator_may_return_null is off by default), so the case runs in the builds without it.
#if defined(__SANITIZE_ADDRESS__)
#define MG_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MG_TEST_ASAN 1
#endif
#endif

TEST_CASE("allocator: out of memory frees the cache, retries, and says so; the allocator then goes on") {
#ifdef MG_TEST_ASAN
  MESSAGE("skipped under AddressSanitizer, which aborts at a 2^62-byte request instead of failing it");
#else
  CachingCpuAllocator allocator;
  allocator.deallocate(allocator.allocate(10000), 10000);  // one cached block of 10240 bytes
  REQUIRE(allocator.stats().reserved_bytes == 10240);
  // 2^62 bytes: no machine has it, so the heap refuses at once without touching a page.
  constexpr std::size_t kHuge = std::size_t{1} << 62;
  check_error([&] { allocator.allocate(kHuge); },
              fmt::format("CPU allocator: out of memory allocating {} bytes, even after freeing its cache (10240 "
                          "bytes) and retrying; tensors hold 0 bytes; use a smaller --batch, or a --precision",
                          kHuge));
  const AllocatorStats after = allocator.stats();
  CHECK(after.allocated_bytes == 0);  // the failed request is not counted
  CHECK(after.reserved_bytes == 0);  // the cache was given back
  void* block = allocator.allocate(10000);
  CHECK(block != nullptr);
  CHECK(allocator.stats().allocated_bytes == 10240);
  allocator.deallocate(block, 10000);
#endif
}
