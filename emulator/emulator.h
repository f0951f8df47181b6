// The CUDA emulator: runs the kernels of kernels/cuda/ on the CPU, in a build configured with
// -DMG_CUDA=EMULATE, so that every GPU test suite runs on every commit without a GPU.
//
// How a launch runs (scheduler.cpp; barriers.cpp, shared_memory_calls.cpp):
//   - The blocks of the grid run one at a time, in the order of the schedule (below).
//   - The threads of a block are fibers (fiber.h) on the one host thread: each runs until it reaches
//     __syncthreads, a warp collective (a shuffle, a WMMA load, multiply or store) or its end, and the
//     scheduler then picks the next thread. A barrier releases its threads when all have arrived;
//     a collective is carried out once, by the last lane of the warp to arrive, for all of them.
//   - Shared memory is a per-block arena, filled with 0xFF bytes (NaN in f32, f16 and bf16) when the
//     block starts, so a read of shared memory nobody wrote shows as NaN; under AddressSanitizer the
//     bytes between shared variables are poisoned as well. Device memory (memory.cpp) is exactly
//     sized heap memory, NaN-filled when handed out, counted against the device's memory limit
//     (Settings::memory_limit_bytes), past which cudaMalloc fails as a full GPU's does.
// The race check: every launch runs once per schedule of settings().schedules (by default threads
// and blocks in forward order with cp.async copies landing at issue, in reverse order with copies
// landing only at the wait that covers them, and in a seeded random order, landing at the wait),
// each from the same device memory; the device memory the kernel can reach (what its arguments point
// into) must then hold the same bytes after every run, or the launch is an mg::Error that names the
// kernel, the two schedules and the first byte that differs. Kernels whose result legitimately
// depends on the order of float atomics are launched with MG_LAUNCH_UNORDERED and run once.
// Misuse is an mg::Error naming the kernel, the block and the thread: a barrier that some threads
// of the block never reach (divergence), a deadlock, a warp collective whose mask names lanes that
// have exited or that do not exist, lanes of a warp meeting at different collectives, WMMA pointers
// and leading dimensions that break the API's alignment rules, cp.async outside shared memory.
//
// What the emulator cannot see is listed in kernels/cuda/README.md (the memory model, bank
// conflicts, occupancy, performance, nvcc's contractions, the Tensor Cores' order of additions).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <source_location>
#include <string>
#include <vector>

namespace mg::emu {

// ---- settings (read from the environment once; tests may change them) ---------------------------

enum class Order { Forward, Reverse, Random };  // of the threads of a block, and of the blocks
enum class Landing { AtIssue, AtWait };  // when a cp.async copy reaches shared memory

struct Schedule {
  Order order;
  Landing landing;
};

struct Settings {
  // MG_EMULATOR_SCHEDULES, e.g. "forward:issue,reverse:wait,random:wait" (the default). One
  // schedule runs each launch once: no race check, a third of the time.
  std::vector<Schedule> schedules;
  // MG_EMULATOR_SEED: the random schedule's seed, mixed with the launch's number in the process.
  std::uint64_t seed = 1;
  // MG_EMULATOR_MAX_BLOCKS: the most blocks blocks_for() gives a grid-stride loop (a GPU gets up to
  // 132 x 32), so that small inputs still take several rounds of the loop.
  std::int64_t max_grid_stride_blocks = 32;
  // MG_EMULATOR_COMPUTE_CAPABILITY: what the device reports as its compute capability, major * 10 +
  // minor: 90 (an H100); e.g. 80 to see how the backend refuses what an A100 lacks (FP8 mma.sync).
  int compute_capability = 90;
  // MG_EMULATOR_MULTIPROCESSORS: the SM count the device reports (cudaDevAttrMultiProcessorCount), 132
  // (an H100's). The GEMM picks its tile and its split of k from it: a small count lets a test reach
  // the large tile of rung 3 (kernels/cuda/gemm.cu) with a product small enough to emulate.
  int multiprocessors = 132;
  // MG_EMULATOR_MEMORY_LIMIT: the device's memory, in bytes (or with a suffix: 512MiB, 2GiB), 80 GiB
  // (an H100's) by default. Allocations are the host's heap, so the limit is a count: a cudaMalloc
  // that would take the device's allocations past it fails with cudaErrorMemoryAllocation, whether
  // or not the host has the memory, and cudaMemGetInfo reports it as the total. Tests lower it to
  // run out of device memory on purpose; lowering it below what is allocated fails every cudaMalloc.
  std::size_t memory_limit_bytes = std::size_t{80} << 30;
};

Settings& settings();
std::string describe(const Schedule& schedule);
// Parses a MG_EMULATOR_SCHEDULES value; an mg::Error names what it could not read.
std::vector<Schedule> parse_schedules(const std::string& text);
// Parses a MG_EMULATOR_MEMORY_LIMIT value: whole bytes, or with a suffix KiB, MiB or GiB; an
// mg::Error names what it could not read.
std::size_t parse_memory_size(const std::string& text);

// ---- launches --------------------------------------------------------------------------------------

// Where a launch comes from, for error messages (and the kernel's address, for its attributes).
struct KernelSite {
  const char* kernel;  // as written at the launch
  const char* function;  // the host function that launches it, with its template arguments
  const char* file;
  int line;
  const void* address;  // the kernel function, or null when the launch names a template to deduce
  bool ordered;  // false: MG_LAUNCH_UNORDERED (run once, not compared across schedules)
};

// Runs every block of the grid under each schedule, comparing the results (the race check).
// `invoke(closure)` runs the kernel body as the current emulated thread; `params` are the kernel's
// arguments as bytes, scanned for pointers into device memory (what the kernel can write).
// A launch the hardware would refuse (block size, grid size, shared memory above the kernel's
// opt-in) runs nothing and leaves the error for cudaGetLastError, as CUDA does.
void run_grid(const KernelSite& site, dim3 grid, dim3 block, std::size_t dynamic_shared_bytes,
              void (*invoke)(void* closure), void* closure, const void* params, std::size_t params_bytes);

// The index variables of the running emulated thread (threadIdx, blockIdx, blockDim, gridDim).
extern uint3 thread_index;
extern uint3 block_index;
extern dim3 block_dim;
extern dim3 grid_dim;

// ---- what device code calls (on an emulated thread) -------------------------------------------

// __syncthreads_or(predicate): waits for every thread of the block, then returns whether any
// passed a non-zero predicate. __syncthreads() is block_barrier(0, ...).
int block_barrier(int predicate, std::source_location where);

// A warp collective: every lane named by `mask` calls it with its own `lane_data`; when the last
// one arrives, kind.complete(lane_data of all 32 lanes, mask) runs once, then every lane goes on.
struct Collective {
  const char* name;
  void (*complete)(void* const lane_data[32], unsigned mask);
};
void warp_collective(unsigned mask, const Collective& kind, void* lane_data, std::source_location where);

// Shared memory: the block's variable for `key` (one per declaration), `bytes` large, created
// (NaN-filled) by the first thread of the block to reach the declaration.
void* shared_variable(const void* key, std::size_t bytes, std::size_t alignment, const char* name);
// The launch's dynamic shared memory (extern __shared__): exactly the launch's bytes.
void* dynamic_shared();

// cp.async (kernels/cuda/cp_async.cuh): a copy of `bytes` from global to shared memory of which
// the first `src_bytes` are read and the rest zero-filled; commit closes the thread's open group;
// wait lands every committed group but the newest `pending`.
void copy_async(void* shared, const void* global, int bytes, int src_bytes);
// An instruction that reads or writes only shared memory (ldmatrix) checks its address: `bytes`
// within the block's shared memory and aligned to `bytes`; an mg::Error naming `what` otherwise.
void check_shared(const void* address, std::size_t bytes, const char* what);
void commit_copies();
void wait_copies(int pending);

// ---- Hopper: the shared-memory window, mbarriers, TMA, the async proxy, wgmma (hopper_calls.cpp) ------
//
// What sm_90's asynchronous instructions need of the machine (kernels/cuda/hopper.cuh and wgmma.cuh
// put the PTX beside these calls):
//   - The shared-memory window: a shared address (__cvta_generic_to_shared) is a 32-bit offset; the
//     launch's dynamic shared memory starts at 0 (on a GPU it starts at some multiple of 1024: 0, or
//     after the system's reserved KiB), the block's __shared__ variables at kStaticWindow. Descriptors,
//     TMA and swizzles see these offsets, so a swizzle repeats where it would on the hardware. A wgmma
//     descriptor holds 18 bits of address: its operands must lie in dynamic shared memory here.
//   - mbarriers: a 64-bit object in shared memory with an arrival count, a transaction (tx) count and
//     a phase. A phase completes when its arrivals and its expected bytes have all come in; a wait
//     on parity p returns once the phase of that parity has completed (at once if the current phase
//     has the other parity, as mbarrier.try_wait.parity does). A waiting thread sleeps until then;
//     no thread able to go on is a deadlock, reported with the barriers the first threads wait on.
//   - TMA (cp.async.bulk.tensor): a tile of a tensor map's box, zeros outside the tensor, laid into
//     shared memory with the map's swizzle, completing bytes on an mbarrier. Under ":issue" it lands
//     at once; under ":wait" its destination reads as poison (0xFF) until a thread's wait on the
//     barrier observes the phase complete, so a wait on the wrong parity reads poison. Stores (shared
//     to global, clipped to the tensor) are a thread's bulk groups, done at issue or at their wait.
//   - The async proxy: TMA and wgmma read shared memory through their own view, which sees ordinary
//     stores only after a fence.proxy.async; TMA's own writes reach both views. One thread's fence
//     publishes every thread's stores here (the hardware orders only the fencing thread's own), so a
//     fence missing from some threads while others fence can pass; one missing everywhere cannot.
//   - wgmma: a warp's issued operations run at issue (":issue") or at the wgmma.wait_group that
//     covers their group (":wait"), reading shared memory then.
constexpr std::uint32_t kStaticWindow = 0x40000;
std::uint32_t shared_address(const void* pointer);  // an mg::Error for a pointer outside shared memory
void mbarrier_init(void* barrier, unsigned count);
// arrive (count 1); with `tx_bytes`, mbarrier.arrive.expect_tx: the bytes first, then the arrival.
void mbarrier_arrive(void* barrier, unsigned tx_bytes = 0);
void mbarrier_wait(void* barrier, unsigned parity, std::source_location where);
// A TMA load of the box at `coordinates` (the map's rank of them) into `shared`, completing its
// bytes on `barrier`; a TMA store of the box at `shared` to the tensor.
void tma_load(void* shared, const void* tensor_map, const int* coordinates, void* barrier);
void tma_store(const void* tensor_map, const int* coordinates, const void* shared);
void bulk_commit();
void bulk_wait(int pending);
void fence_proxy_async();
// The async proxy's view of `bytes` of dynamic shared memory at window address `address`.
const unsigned char* async_view(std::uint32_t address, std::size_t bytes, const char* what);
// Run by a wgmma collective's complete(): one operation of the calling warp, run at once or at the
// wait that covers its group; commit and wait are the warp's wgmma.commit_group and wait_group.
void wgmma_issue(std::function<void()> operation);
void wgmma_commit();
void wgmma_wait(int pending);

// An mg::Error naming the kernel, block and thread; for the checks of device-side code.
[[noreturn]] void fail(const std::string& message);

// blocks_for()'s cap for grid-stride loops (Settings::max_grid_stride_blocks).
std::int64_t grid_stride_block_cap();

// ---- device memory (memory.cpp) -----------------------------------------------------------------

// The caching device allocator's blocks are size classes: `used` of the block's bytes belong to the
// tensor. Marking them makes the rest unreadable to AddressSanitizer and excludes it from the race
// check, and fills the block with NaN (a kernel that reads memory nobody wrote, or reads past the
// tensor, sees NaN).
// A cached (free) block is unreadable as a whole.
void mark_in_use(void* block, std::size_t used);
void mark_cached(void* block);

}  // namespace mg::emu
