// The CUDA emulator itself (emulator/), in -DMG_CUDA=EMULATE builds only: this file is compiled
// like a kernel file (emulator/device.h force-included), so the small kernels below are emulated
// kernels. They check what the emulator promises: that a race, a divergent barrier, a deadlock and
// the misuse of warp collectives, WMMA and cp.async are errors that name the kernel; that shared
// and fresh device memory read as NaN; that WMMA multiplies exactly and TF32 rounds as the hardware
// does; that the launch limits are an H100's.
#include "tests/testing.h"

#include <limits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cp_async.cuh"

using namespace mg;
using namespace mg::testing;

namespace {

// The three default schedules, whatever the environment says (CI's sanitizer pass runs one).
struct AllSchedules {
  std::vector<emu::Schedule> saved = emu::settings().schedules;
  AllSchedules() { emu::settings().schedules = emu::parse_schedules("forward:issue,reverse:wait,random:wait"); }
  ~AllSchedules() { emu::settings().schedules = saved; }
};

Tensor device_floats(std::int64_t n) { return Tensor::empty({n}, {.dtype = DType::F32, .device = Device::cuda()}); }
float* pointer(Tensor& t) { return static_cast<float*>(t.data_ptr()); }
std::vector<float> values(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

// Each thread writes its index to shared memory and reads its neighbour's, with or without the
// barrier in between.
template <bool kBarrier>
__global__ void neighbour(float* out) {
  MG_SHARED(float[64], slots);
  slots[threadIdx.x] = static_cast<float>(threadIdx.x);
  if constexpr (kBarrier) __syncthreads();
  out[threadIdx.x] = slots[(threadIdx.x + 1) % 64];
}

// Every block writes its index to out[0].
__global__ void last_block_wins(float* out) {
  if (threadIdx.x == 0) out[0] = static_cast<float>(blockIdx.x);
}

__global__ void read_unwritten_shared(float* out) {
  MG_SHARED(float[32], never_written);
  out[threadIdx.x] = never_written[threadIdx.x];
}

__global__ void threads_return_before_barrier(float* out) {
  if (threadIdx.x >= 16) return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

__global__ void barriers_at_two_lines(float* out) {
  if (threadIdx.x % 2 == 0)
    __syncthreads();
  else
    __syncthreads();
  out[threadIdx.x] = 1.0f;
}

// Thread 0 waits for its warp at a shuffle; the others wait for thread 0 at a barrier.
__global__ void shuffle_against_barrier(float* out) {
  if (threadIdx.x == 0)
    out[0] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  else
    __syncthreads();
}

__global__ void mask_names_returned_lanes(float* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

__global__ void lanes_at_two_shuffles(float* out) {
  if (threadIdx.x < 16)
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  else
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 2.0f, 1);
}

// out[t] = the sum of the lane numbers of t's warp, by xor shuffles.
__global__ void warp_total(float* out) {
  float v = static_cast<float>(threadIdx.x % 32);
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  out[threadIdx.x] = v;
}

// One 16x16x16 WMMA product of f16 tiles at `a` and `b` (row-major, leading dimension ldm), into out.
__global__ void wmma_product(const __half* a, const __half* b, float* out, unsigned ldm) {
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a_frag;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b_frag;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> sum;
  wmma::fill_fragment(sum, 0.0f);
  wmma::load_matrix_sync(a_frag, a, ldm);
  wmma::load_matrix_sync(b_frag, b, ldm);
  wmma::mma_sync(sum, a_frag, b_frag, sum);
  wmma::store_matrix_sync(out, sum, 16, wmma::mem_row_major);
}

// Copies 16 bytes of `in` into shared memory with cp.async, waiting for the group (or not), and
// writes them out. With kToGlobal, the copy's destination is global memory: an error.
template <bool kWait, bool kToGlobal>
__global__ void copy_through_shared(const float* in, float* out) {
  MG_SHARED_ALIGNED(16, float[4], staged);
  if (threadIdx.x == 0) {
    kernels::cuda::copy_async(kToGlobal ? static_cast<void*>(out) : staged, in, 16);
    kernels::cuda::commit_copies();
    if constexpr (kWait) kernels::cuda::wait_copies<0>();
  }
  __syncthreads();
  if (threadIdx.x < 4) out[threadIdx.x] = staged[threadIdx.x];
}

__global__ void read_dynamic_shared(float* out) {
  MG_DYNAMIC_SHARED(float, dynamic);
  out[threadIdx.x] = dynamic[threadIdx.x];
}

}  // namespace

TEST_CASE("emulator: a missing __syncthreads is a race, named with the kernel and the two schedules") {
  AllSchedules schedules;
  Tensor out = device_floats(64);
  MG_LAUNCH(neighbour<true>, 1, 64, 0, nullptr)(pointer(out));
  std::vector<float> expected(64);
  for (int t = 0; t < 64; ++t) expected[static_cast<std::size_t>(t)] = static_cast<float>((t + 1) % 64);
  CHECK(values(out) == expected);
  const auto racy = [&] { MG_LAUNCH(neighbour<false>, 1, 64, 0, nullptr)(pointer(out)); };
  check_error(racy, "kernel neighbour<false> (launched at");
  check_error(racy, "a race: the result depends on the order the threads run in");
}

TEST_CASE("emulator: blocks writing one element race; an unordered launch runs once and is not compared") {
  AllSchedules schedules;
  Tensor out = device_floats(1);
  check_error([&] { MG_LAUNCH(last_block_wins, 4, 32, 0, nullptr)(pointer(out)); }, "a race");
  MG_LAUNCH_UNORDERED(last_block_wins, 4, 32, 0, nullptr)(pointer(out));
  CHECK(values(out)[0] == 3.0f);  // the first schedule runs the blocks forward: block 3 writes last
}

TEST_CASE("emulator: shared memory, dynamic shared memory and fresh device memory read as NaN") {
  Tensor out = device_floats(32);
  CHECK(std::isnan(values(out)[31]));  // nothing wrote it yet
  MG_LAUNCH(read_unwritten_shared, 1, 32, 0, nullptr)(pointer(out));
  for (float v : values(out)) CHECK(std::isnan(v));
  Tensor zeros_out = zeros({32}, {.device = Device::cuda()});
  MG_LAUNCH(read_dynamic_shared, 1, 32, 32 * sizeof(float), nullptr)(pointer(zeros_out));
  for (float v : values(zeros_out)) CHECK(std::isnan(v));
}

TEST_CASE("emulator: divergent barriers, deadlocks and misused warp collectives are errors naming the kernel") {
  Tensor out = device_floats(64);
  check_error(
      [&] {
        MG_LAUNCH(threads_return_before_barrier, 1, 32, 0, nullptr)
        (pointer(out));
      },
      "divergent __syncthreads");
  check_error(
      [&] {
        MG_LAUNCH(threads_return_before_barrier, 1, 32, 0, nullptr)
        (pointer(out));
      },
      "threads_return_before_barrier");
  check_error([&] { MG_LAUNCH(barriers_at_two_lines, 1, 32, 0, nullptr)(pointer(out)); }, "divergent __syncthreads");
  check_error([&] { MG_LAUNCH(shuffle_against_barrier, 1, 32, 0, nullptr)(pointer(out)); }, "deadlock");
  // Which lane notices depends on the order: a waiting lane, or the last lane to return.
  check_error(
      [&] {
        MG_LAUNCH(mask_names_returned_lanes, 1, 32, 0, nullptr)
        (pointer(out));
      },
      "returned from the kernel");
  check_error([&] { MG_LAUNCH(warp_total, 1, 16, 0, nullptr)(pointer(out)); }, "which the block does not have");
  check_error(
      [&] {
        MG_LAUNCH(lanes_at_two_shuffles, 1, 32, 0, nullptr)
        (pointer(out));
      },
      "meet at different collectives");
  // The same shuffles, used right: every lane gets the warp's total, 0 + 1 + ... + 31.
  MG_LAUNCH(warp_total, 1, 64, 0, nullptr)(pointer(out));
  for (float v : values(out)) CHECK(v == 496.0f);
}

TEST_CASE("emulator: WMMA multiplies exactly, checks its alignment rules, and TF32 rounds as cvt.rna does") {
  // Small integers: every product and sum is exact, so the result is known to the bit.
  std::vector<double> a(16 * 24), b(16 * 24);
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<double>(static_cast<int>(i % 7) - 3);
    b[i] = static_cast<double>(static_cast<int>(i % 5) - 2);
  }
  Tensor a_gpu = from_vector(a, {16 * 24}, {.dtype = DType::F16}).to(Device::cuda());
  Tensor b_gpu = from_vector(b, {16 * 24}, {.dtype = DType::F16}).to(Device::cuda());
  const auto* a_ptr = static_cast<const __half*>(a_gpu.data_ptr());
  const auto* b_ptr = static_cast<const __half*>(b_gpu.data_ptr());
  Tensor out = device_floats(256);
  MG_LAUNCH(wmma_product, 1, 32, 0, nullptr)(a_ptr, b_ptr, pointer(out), 24u);
  const std::vector<float> got = values(out);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      double sum = 0;
      for (int k = 0; k < 16; ++k)
        sum += a[static_cast<std::size_t>(i * 24 + k)] * b[static_cast<std::size_t>(k * 24 + j)];
      CHECK(got[static_cast<std::size_t>(i * 16 + j)] == sum);
    }
  check_error(
      [&] {
        MG_LAUNCH(wmma_product, 1, 32, 0, nullptr)
        (a_ptr + 8, b_ptr, pointer(out), 24u);
      },
      "not 32-byte aligned");
  check_error(
      [&] {
        MG_LAUNCH(wmma_product, 1, 32, 0, nullptr)
        (a_ptr, b_ptr, pointer(out), 20u);
      },
      "not a multiple of 16");
  // 1 + 2^-11 is a tie between two TF32 values: away from zero, to 1 + 2^-10; just below it, down to 1.
  CHECK(nvcuda::wmma::__float_to_tf32(1.0f + 0x1p-11f) == 1.0f + 0x1p-10f);
  CHECK(nvcuda::wmma::__float_to_tf32(-(1.0f + 0x1p-11f)) == -(1.0f + 0x1p-10f));
  CHECK(nvcuda::wmma::__float_to_tf32(1.0f + 0x1p-11f - 0x1p-23f) == 1.0f);
}

TEST_CASE("emulator: cp.async lands at issue or at its wait; a missing wait is a race; shared memory only") {
  AllSchedules schedules;
  Tensor in = from_vector({1.0, 2.0, 3.0, 4.0}, {4}).to(Device::cuda());
  Tensor out = device_floats(4);
  MG_LAUNCH((copy_through_shared<true, false>), 1, 32, 0, nullptr)(pointer(in), pointer(out));
  CHECK(values(out) == std::vector<float>{1, 2, 3, 4});
  check_error(
      [&] {
        MG_LAUNCH((copy_through_shared<false, false>), 1, 32, 0, nullptr)
        (pointer(in), pointer(out));
      },
      "a race");
  check_error(
      [&] {
        MG_LAUNCH((copy_through_shared<true, true>), 1, 32, 0, nullptr)
        (pointer(in), pointer(out));
      },
      "which is not shared memory of the block");
}

TEST_CASE("emulator: the launch limits of an H100, refused as CUDA refuses them") {
  Tensor out = device_floats(1024);
  // Over 48 KiB of dynamic shared memory without the kernel's opt-in: cudaErrorInvalidValue.
  MG_LAUNCH(read_dynamic_shared, 1, 32, 64 << 10, nullptr)(pointer(out));
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  REQUIRE(cudaFuncSetAttribute(read_dynamic_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10) ==
          cudaSuccess);
  MG_LAUNCH(read_dynamic_shared, 1, 32, 64 << 10, nullptr)(pointer(out));
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaFuncSetAttribute(read_dynamic_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 << 10) ==
        cudaErrorInvalidValue);  // above the 227 KiB a block may have
  cudaGetLastError();
  MG_LAUNCH(read_dynamic_shared, 1, 1025, 0, nullptr)(pointer(out));
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  int sms = 0;
  REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
  CHECK(sms == 132);
  // Grid-stride loops get at most MG_EMULATOR_MAX_BLOCKS blocks.
  CHECK(static_cast<std::int64_t>(kernels::cuda::blocks_for(std::int64_t{1} << 30, 256)) ==
        emu::settings().max_grid_stride_blocks);
}

TEST_CASE("emulator: MG_EMULATOR_SCHEDULES is read as written, and a bad one says what to write") {
  const std::vector<emu::Schedule> parsed = emu::parse_schedules("random:wait,forward:issue");
  REQUIRE(parsed.size() == 2);
  CHECK(emu::describe(parsed[0]) == "random:wait");
  CHECK(emu::describe(parsed[1]) == "forward:issue");
  check_error([] { emu::parse_schedules("sideways:issue"); }, "forward, reverse or random");
  check_error([] { emu::parse_schedules("forward"); }, "order:issue or order:wait");
}
