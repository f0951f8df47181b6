// The CUDA backend's runtime: moving tensors between the CPU and GPUs (mg::to_device), the caching
// device allocator, and the errors on a machine or a build without a GPU. The GPU cases skip with a
// message when no device is visible (CI has nvcc but no GPU); the error cases run everywhere.
#include "core/device_ops.h"
#include "tests/testing.h"
#ifdef MG_WITH_CUDA
#include "kernels/copy.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/runtime.h"
#endif

using namespace mg;
using namespace mg::testing;

TEST_CASE("the CUDA backend core uses is the one kernels/dispatch.cpp's register_cuda_backend hands it") {
#ifdef MG_WITH_CUDA
  const CudaBackend& backend = cuda_backend();
  CHECK(backend.allocator == &cuda::allocator());
  CHECK((backend.ops.copy == &kernels::cuda::copy_bytes));  // doctest cannot print function pointers
  CHECK((backend.ops.fill == &kernels::cuda::fill));
  CHECK(&allocator_for(Device::cuda()) == &cuda::allocator());
#else
  CHECK(cuda_backend().allocator == nullptr);
  check_error([] { Tensor::empty({2}, {.device = Device::cuda()}); },
              "allocate on cuda:0: no CUDA allocator: this build has no CUDA backend");
#endif
}

TEST_CASE("to_device: the same device returns the tensor itself") {
  Tensor x = ones({3});
  CHECK(to_device(x, Device::cpu()).id() == x.id());
  CHECK(x.to(Device::cpu()).id() == x.id());
}

TEST_CASE("to_device: a missing GPU or a missing backend is a clear error, and nothing is allocated") {
  if (cuda_device_count() > 0) {
    check_error([] { ones({2}).to(Device::cuda(cuda_device_count())); }, "use an index below that count");
    return;
  }
  const std::size_t before = cpu_allocator().stats().allocated_bytes;
  check_error([] { ones({2, 3}).to(Device::cuda()); }, "mg::to_device: cannot move [2, 3] f32 to cuda:0");
  check_error([] { ones({2}).to(Device::cuda()); }, built_with_cuda() ? "sees 0 CUDA device(s)" : "no CUDA backend");
  CHECK(cpu_allocator().stats().allocated_bytes == before);
}

TEST_CASE("to_device: f64 stays on the CPU") {
  check_error([] { ones({2}, {.dtype = DType::F64}).to(Device::cuda()); }, "f64 lives on the CPU only");
}

TEST_CASE("to_device: every dtype goes to the GPU and back bit for bit") {
  if (!have_gpu()) return;
  Generator gen(3);
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    INFO(dtype_name(dtype));
    Tensor x = randn({37, 129}, gen).to(dtype);  // odd sizes: no chunk or alignment is assumed
    Tensor on_gpu = x.to(Device::cuda());
    CHECK(on_gpu.device() == Device::cuda());
    CHECK(on_gpu.dtype() == dtype);
    check_close(on_gpu.to(Device::cpu()), x, 0.0, 0.0);
  }
  Tensor labels = randint(0, 10, {100}, gen);
  CHECK(labels.to(Device::cuda()).to(Device::cpu()).to_vector<std::int32_t>() == labels.to_vector<std::int32_t>());
  // Larger than the 8 MiB staging buffer: several chunks each way.
  Tensor big = randn({3 * 1024 * 1024 + 5}, gen);
  check_close(big.to(Device::cuda()).to(Device::cpu()), big, 0.0, 0.0);
}

TEST_CASE("to_device: the gradient comes back to the source device") {
  if (!have_gpu()) return;
  Tensor x = from_vector({1.0, -2.0, 3.0}, {3}).set_requires_grad(true);
  Tensor back = x.to(Device::cuda()).to(Device::cpu());
  backward(sum(mul(back, back)));
  check_values(x.grad(), {2.0, -4.0, 6.0});
  CHECK(x.grad().device() == Device::cpu());
}

TEST_CASE("factories, item() and to_vector() work on a GPU tensor, with the CPU's values") {
  if (!have_gpu()) return;
  Tensor x = full({3}, 2.5, {.dtype = DType::F16, .device = Device::cuda()});
  CHECK(x.device() == Device::cuda());
  CHECK(x.to_vector<float>() == std::vector<float>{2.5f, 2.5f, 2.5f});
  CHECK(sum(x).item() == 7.5);
  CHECK(zeros({5}, {.dtype = DType::I32, .device = Device::cuda()}).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>(5, 0));
  // Counter-based random numbers: the same seed gives the same bits on either device.
  Generator on_cpu(11), on_gpu(11);
  check_close(randn({1000}, on_gpu, {.device = Device::cuda()}).to(Device::cpu()), randn({1000}, on_cpu), 0.0, 0.0);
  CHECK(on_cpu.offset() == on_gpu.offset());
  Tensor w = ones({4}, {.device = Device::cuda(), .requires_grad = true});
  CHECK(w.requires_grad());
}

#ifdef MG_WITH_CUDA
TEST_CASE("host waits are counted: queued work none, a copy to the CPU one, an upload none") {
  if (!have_gpu()) return;
  Tensor a = full({64}, 1.5, {.device = Device::cuda()});
  std::uint64_t before = cuda::host_waits();
  Tensor b = mul(add(a, a), 2.0);  // queued on the stream: the host goes on
  CHECK(cuda::host_waits() == before);
  CHECK(sum(b).item() == 64 * 6.0);  // the value reaches the host: one wait
  CHECK(cuda::host_waits() == before + 1);
  Tensor first = ones({8}).to(Device::cuda());  // an upload through the pinned staging ring
  before = cuda::host_waits();
  Tensor again = ones({8}).to(Device::cuda());  // the next region of the ring: no wait (until issue 31, one)
  CHECK(cuda::host_waits() == before);
  // 80 MiB: the ring (64 MiB) wraps onto regions whose uploads are done; the emulator's are done at
  // once, so nothing waits here (a GPU waits only for an upload it has not finished).
  Tensor big = Tensor::empty({20 << 20}).to(Device::cuda());
  CHECK(cuda::host_waits() == before);
  CHECK(again.to_vector<float>() == std::vector<float>(8, 1.0f));  // the download: one wait
  CHECK(cuda::host_waits() == before + 1);
}

TEST_CASE("CUDA allocator: a freed block is reused without cudaMalloc; statistics per device") {
  if (!have_gpu()) return;
  cuda::CachingCudaAllocator& allocator = cuda::allocator();
  const AllocatorStats start = allocator.stats(0);
  {
    Tensor a = Tensor::empty({1000}, {.device = Device::cuda()});
    CHECK(allocator.stats(0).allocated_bytes == start.allocated_bytes + CachingCpuAllocator::size_class(4000));
  }
  const std::size_t mallocs = allocator.stats(0).system_allocations;
  for (int i = 0; i < 10; ++i) Tensor b = Tensor::empty({999}, {.device = Device::cuda()});  // same size class
  CHECK(allocator.stats(0).system_allocations == mallocs);
  CHECK(allocator.stats(0).allocated_bytes == start.allocated_bytes);
  CHECK(allocator.stats(0).peak_allocated_bytes >= start.allocated_bytes + CachingCpuAllocator::size_class(4000));
  allocator.empty_cache();
  CHECK(allocator.stats(0).reserved_bytes == allocator.stats(0).allocated_bytes);
}
#endif
