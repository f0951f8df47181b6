// The CUDA emulator's model of sm_90's asynchronous machinery (emulator.h, "Hopper"; the PTX beside it
// in kernels/cuda/hopper.cuh), with small kernels of its own, compiled like test_cuda_emulator.cpp: an
// mbarrier's phases and the parity a wait names, its misuse (an arrival too many, a barrier nobody
// initialised, a wait that can never end), TMA's box with its 128-byte swizzle and zeros outside the
// tensor, a stage read before its bytes land (the wrong parity), and ordinary stores that TMA sees
// only after fence.proxy.async. What rung 4 of the GEMM does with all of it: tests/test_cuda_gemm.cpp
// and its planted bugs.
#include "tests/testing.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/wgmma_layout.h"

using namespace mg;
using namespace mg::testing;
namespace hopper = mg::kernels::cuda::hopper;

namespace {

struct AllSchedules {
  std::vector<emu::Schedule> saved = emu::settings().schedules;
  AllSchedules() { emu::settings().schedules = emu::parse_schedules("forward:issue,reverse:wait,random:wait"); }
  ~AllSchedules() { emu::settings().schedules = saved; }
};

// Warp 1 writes its lanes' indices, then arrives (32 arrivals complete the phase); warp 0 waits on
// `parity` and copies what warp 1 wrote. kArrivals: the barrier's count (33: one arrival short).
template <unsigned kArrivals>
__global__ void handoff(float* out, unsigned parity) {
  MG_SHARED_ALIGNED(8, std::uint64_t, barrier);
  MG_SHARED(float[32], slots);
  if (threadIdx.x == 0) hopper::mbarrier_init(&barrier, kArrivals);
  __syncthreads();
  if (threadIdx.x >= 32) {
    slots[threadIdx.x - 32] = static_cast<float>(threadIdx.x);
    hopper::mbarrier_arrive(&barrier);
  } else {
    hopper::mbarrier_wait(&barrier, parity);
    out[threadIdx.x] = slots[threadIdx.x];
  }
}

// Each of 32 threads arrives twice on a barrier of 32: the second round is the next phase, fine.
// kExtra: thread 0 then arrives on a barrier of 1 with bytes expected and again before they came, an
// arrival the phase has no room for.
template <bool kExtra>
__global__ void arrive_twice(float* out) {
  MG_SHARED_ALIGNED(8, std::uint64_t, barrier);
  MG_SHARED_ALIGNED(8, std::uint64_t, expecting);
  if (threadIdx.x == 0) hopper::mbarrier_init(&barrier, 32), hopper::mbarrier_init(&expecting, 1);
  __syncthreads();
  hopper::mbarrier_arrive(&barrier);
  hopper::mbarrier_arrive(&barrier);
  if (kExtra && threadIdx.x == 0) {
    hopper::mbarrier_arrive_expect_tx(&expecting, 16);
    hopper::mbarrier_arrive(&expecting);
  }
  out[threadIdx.x] = 1.0f;
}

__global__ void wait_uninitialised(float* out) {
  MG_SHARED_ALIGNED(8, std::uint64_t, barrier);
  hopper::mbarrier_wait(&barrier, 0);
  out[threadIdx.x] = 1.0f;
}

// Thread 0 loads the box of `map` at (c0, c1) into dynamic shared memory with TMA and every thread
// waits for it on `parity` (0 is right; 1 waits for the phase after, which never comes; 2: no wait,
// reading what has not landed); then the block copies the box's bytes out as they lie in shared
// memory (swizzled).
__global__ void tma_box(const __grid_constant__ CUtensorMap map, int c0, int c1, unsigned parity, std::uint16_t* out,
                        int box_bytes) {
  MG_DYNAMIC_SHARED(unsigned char, shared);
  auto* barrier = reinterpret_cast<std::uint64_t*>(shared + box_bytes);
  if (threadIdx.x == 0) {
    hopper::mbarrier_init(barrier, 1);
    hopper::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    hopper::mbarrier_arrive_expect_tx(barrier, static_cast<unsigned>(box_bytes));
    hopper::tma_load(shared, &map, c0, c1, 0, barrier);
  }
  if (parity < 2) hopper::mbarrier_wait(barrier, parity);
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < box_bytes / 2; i += static_cast<int>(blockDim.x))
    std::memcpy(&out[i], shared + 2 * i, 2);
}

// The block writes i + 1 into element i of a 16 x 64 box (swizzled, as TMA expects), fences (or not),
// and thread 0 stores the box to `map` at (0, 0).
template <bool kFence>
__global__ void tma_store_box(const __grid_constant__ CUtensorMap map) {
  MG_DYNAMIC_SHARED(unsigned char, shared);
  const std::uint32_t base = hopper::window_address(shared);
  for (int i = static_cast<int>(threadIdx.x); i < 16 * 64; i += static_cast<int>(blockDim.x)) {
    const std::uint16_t value = static_cast<std::uint16_t>(i + 1);
    const std::uint32_t at = kernels::cuda::wgmma_layout::swizzle(base + static_cast<std::uint32_t>(2 * i),
                                                                  kernels::cuda::wgmma_layout::Swizzle::B128);
    std::memcpy(shared + (at - base), &value, 2);
  }
  if constexpr (kFence) hopper::fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    hopper::tma_store(&map, 0, 0, 0, shared);
    hopper::bulk_commit();
    hopper::bulk_wait_read<0>();
  }
}

// A 2-D tensor map of u16 (rows x columns), box box_rows x 64 columns (128 bytes), 128-byte swizzle.
CUtensorMap map_of(void* data, int rows, int columns, int box_rows) {
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found{};
  REQUIRE(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault, &found) ==
          cudaSuccess);
  REQUIRE(found == cudaDriverEntryPointSuccess);
  const auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry);
  CUtensorMap map{};
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(columns), static_cast<cuuint64_t>(rows), 1};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(columns) * 2, static_cast<cuuint64_t>(rows * columns) * 2};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(box_rows), 1}, element_strides[3] = {1, 1, 1};
  REQUIRE(encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, data, dims, strides, box, element_strides,
                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS);
  return map;
}

// The emulator runs every copy when it is called.
cudaError_t copy(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(to, from, bytes, kind, nullptr);
}

Tensor device_floats(std::int64_t n) { return Tensor::empty({n}, {.dtype = DType::F32, .device = Device::cuda()}); }

}  // namespace

TEST_CASE("emulator (sm_90): an mbarrier's phase completes at its count; a wait names the parity it waits for") {
  AllSchedules schedules;
  Tensor out = device_floats(32);
  MG_LAUNCH(handoff<32>, 1, 64, 0, nullptr)(static_cast<float*>(out.data_ptr()), 0u);
  std::vector<float> expected(32);
  for (int i = 0; i < 32; ++i) expected[static_cast<std::size_t>(i)] = static_cast<float>(32 + i);
  CHECK(out.to(Device::cpu()).to_vector<float>() == expected);
  // Parity 1 names the phase before the first, complete: where warp 0 runs first (forward), its wait
  // returns before warp 1 wrote; where warp 1 runs first (reverse), phase 0 has completed and the wait
  // is for phase 1, which nothing completes.
  check_error(
      [&] {
        MG_LAUNCH(handoff<32>, 1, 64, 0, nullptr)
        (static_cast<float*>(out.data_ptr()), 1u);
      },
      "deadlock: no thread can go on");
  // One arrival short: the phase never completes, and the deadlock says what each waits for.
  check_error(
      [&] {
        MG_LAUNCH(handoff<33>, 1, 64, 0, nullptr)
        (static_cast<float*>(out.data_ptr()), 0u);
      },
      "mbarrier.try_wait.parity 0 on the mbarrier at");
  MG_LAUNCH(arrive_twice<false>, 1, 32, 0, nullptr)(static_cast<float*>(out.data_ptr()));
  check_error(
      [&] {
        MG_LAUNCH(arrive_twice<true>, 1, 32, 0, nullptr)
        (static_cast<float*>(out.data_ptr()));
      },
      "beyond its count of 1 in one phase (the phase waits for 16 more bytes)");
  check_error(
      [&] {
        MG_LAUNCH(wait_uninitialised, 1, 32, 0, nullptr)
        (static_cast<float*>(out.data_ptr()));
      },
      "where no mbarrier.init has set up an mbarrier");
}

TEST_CASE("emulator (sm_90): TMA lays its box with the 128-byte swizzle, zeros outside the tensor") {
  AllSchedules schedules;
  // A 20 x 40 tensor of u16 (value 1000 r + c); the box of 16 x 64 at (column 8, row 12) reaches past
  // both edges.
  constexpr int kRows = 20, kColumns = 40, kBoxRows = 16, kBoxBytes = kBoxRows * 128;
  std::vector<std::uint16_t> u16(kRows * kColumns);
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kColumns; ++c)
      u16[static_cast<std::size_t>(r * kColumns + c)] = static_cast<std::uint16_t>(1000 * r + c);
  // u16 in the bytes of an i32 tensor (mixgrad has no u16 dtype).
  Tensor storage = Tensor::empty({kRows * kColumns / 2}, {.dtype = DType::I32, .device = Device::cuda()});
  REQUIRE(copy(storage.data_ptr(), u16.data(), u16.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess);
  const CUtensorMap map = map_of(storage.data_ptr(), kRows, kColumns, kBoxRows);
  Tensor out = Tensor::empty({kBoxBytes / 4}, {.dtype = DType::I32, .device = Device::cuda()});
  const auto run = [&](unsigned parity) {
    MG_LAUNCH(tma_box, 1, 64, kBoxBytes + 8, nullptr)
    (map, 8, 12, parity, static_cast<std::uint16_t*>(out.data_ptr()), kBoxBytes);
    std::vector<std::uint16_t> got(kBoxBytes / 2);
    REQUIRE(copy(got.data(), out.data_ptr(), kBoxBytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    return got;
  };
  const std::vector<std::uint16_t> got = run(0);
  int wrong = 0;
  std::string first;
  for (int r = 0; r < kBoxRows; ++r)
    for (int c = 0; c < 64; ++c) {
      const int row = 12 + r, column = 8 + c;
      const int expected = row < kRows && column < kColumns ? 1000 * row + column : 0;
      const std::uint32_t at = kernels::cuda::wgmma_layout::swizzle(static_cast<std::uint32_t>(r * 128 + 2 * c),
                                                                    kernels::cuda::wgmma_layout::Swizzle::B128);
      if (got[at / 2] != expected && wrong++ == 0)
        first = fmt::format("box ({}, {}) at byte {}: {} where {} was expected", r, c, at, got[at / 2], expected);
    }
  INFO(first);
  CHECK(wrong == 0);
  // No wait: the box reads as poison until it lands (":wait"), a race against ":issue"; the wrong
  // parity waits for a phase that never comes.
  check_error([&] { run(2); }, "a race");
  check_error([&] { run(1); }, "mbarrier.try_wait.parity 1 on the mbarrier at");
}

TEST_CASE("emulator (sm_90): TMA reads ordinary stores to shared memory only after fence.proxy.async") {
  AllSchedules schedules;
  Tensor out = Tensor::empty({16 * 64 / 2}, {.dtype = DType::I32, .device = Device::cuda()});
  const CUtensorMap map = map_of(out.data_ptr(), 16, 64, 16);
  const auto stored = [&] {
    std::vector<std::uint16_t> got(16 * 64);
    REQUIRE(copy(got.data(), out.data_ptr(), got.size() * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
    return got;
  };
  MG_LAUNCH(tma_store_box<true>, 1, 128, 16 * 128, nullptr)(map);
  std::vector<std::uint16_t> expected(16 * 64);
  for (int i = 0; i < 16 * 64; ++i) expected[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(i + 1);
  CHECK(stored() == expected);
  MG_LAUNCH(tma_store_box<false>, 1, 128, 16 * 128, nullptr)(map);
  CHECK(stored() == std::vector<std::uint16_t>(16 * 64, 0xFFFF));  // the async proxy's view: still poison
}
