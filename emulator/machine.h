// The one emulated device of the CUDA emulator's scheduler (emulator.h has the model): the launch
// being run, the threads of its block as fibers, their warps and the block's shared memory.
// Internal to the emulator: device code reaches it through emulator.h's functions. Its parts are
// defined in three files:
//   scheduler.cpp            a launch: the race check's runs, the blocks one by one, the threads
//                            switching in the schedule's order, their return, deadlocks, errors
//   barriers.cpp             __syncthreads and the warp collectives
//   shared_memory_calls.cpp  __shared__ variables, dynamic shared memory and cp.async, checked
//   hopper_calls.cpp         sm_90's mbarriers, TMA, the async proxy and wgmma's groups
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <vector>

#include "emulator/async_copies.h"
#include "emulator/deferred.h"
#include "emulator/emulator.h"
#include "emulator/fiber.h"
#include "emulator/run_set.h"
#include "emulator/shared_memory.h"

namespace mg::emu::scheduler {

constexpr int kWarpSize = 32;

enum class State { Runnable, AtBarrier, AtCollective, AtMbarrier, Exited };

// One emulated thread of the block being run.
struct Thread {
  Fiber fiber;
  uint3 index{};
  int linear = 0;
  State state = State::Runnable;
  bool started = false;
  std::source_location where;  // the barrier or collective it waits at
  int predicate = 0;  // its __syncthreads_or argument, then the barrier's result
  AsyncCopies copies;  // its cp.async copies in flight
  Deferred bulk;  // its TMA stores, in bulk groups
  std::uint32_t waiting_barrier = 0;  // AtMbarrier: the mbarrier's shared address and the parity waited for
  unsigned waiting_parity = 0;
};

// The collective a warp's lanes are gathering at.
struct Warp {
  unsigned alive = 0;  // lanes the block has and that have not returned from the kernel
  unsigned arrived = 0;  // lanes that have arrived
  unsigned mask = 0;
  const Collective* kind = nullptr;
  std::source_location where;
  void* lane_data[kWarpSize] = {};
  Deferred wgmma;  // its wgmma operations, in wgmma groups
};

// An mbarrier of the block (emulator.h has the model). `tx` counts the bytes still expected, less
// those landed; copies issued under ":wait" are in flight until the phase completes.
struct Mbarrier {
  std::uint32_t address = 0;
  unsigned expected = 0, pending = 0;  // arrivals a phase needs, and those still to come
  std::int64_t tx = 0;
  unsigned phase = 0;  // the parity of the phase in progress
  std::vector<std::function<void()>> in_flight;
  std::int64_t in_flight_bytes = 0;
};

// "file:line" of a barrier or collective, the file from kernels/ on, for error messages.
std::string site_of(const std::source_location& where);

// The one emulated device: everything a launch needs, reused by the next. Launches are serialised
// (the threads of a block share this state; blocks run one at a time).
class Machine {
 public:
  // Recursive, so that a launch from inside a kernel reaches run()'s check instead of deadlocking.
  std::recursive_mutex mutex;

  // scheduler.cpp, as is everything private but release_barrier() (barriers.cpp).
  void run(const KernelSite& site, dim3 grid, dim3 block, std::size_t dynamic_bytes, void (*invoke)(void*),
           void* closure, const void* params, std::size_t params_bytes);
  [[noreturn]] void fail(const std::string& message) const;
  bool running() const { return current_ != nullptr; }

  // Device side (the current thread is an emulated one). barriers.cpp:
  int barrier(int predicate, std::source_location where);
  void collective(unsigned mask, const Collective& kind, void* lane_data, std::source_location where);
  // shared_memory_calls.cpp:
  void* shared(const void* key, std::size_t bytes, std::size_t alignment, const char* name);
  void* dynamic() { return shared_memory_.dynamic(); }
  void copy(void* shared, const void* global, int bytes, int src_bytes);
  void check_shared(const void* address, std::size_t bytes, const char* what) const;
  void commit();
  void wait(int pending);
  // hopper_calls.cpp:
  std::uint32_t shared_address(const void* pointer) const;
  void mbarrier_init(void* barrier, unsigned count);
  void mbarrier_arrive(void* barrier, unsigned tx_bytes);
  void mbarrier_wait(void* barrier, unsigned parity, std::source_location where);
  void tma_load(void* shared, const void* tensor_map, const int* coordinates, void* barrier);
  void tma_store(const void* tensor_map, const int* coordinates, const void* shared);
  void bulk_commit();
  void bulk_wait(int pending);
  void fence_proxy_async();
  const unsigned char* async_view(std::uint32_t address, std::size_t bytes, const char* what);
  void wgmma_issue(std::function<void()> operation);
  void wgmma_commit();
  void wgmma_wait(int pending);

 private:
  void execute(const Schedule& schedule, std::uint64_t seed);
  void run_block(unsigned linear_block);
  void start_block();
  void exit_current();
  void release_barrier();
  void yield();
  void switch_from(Fiber& from, bool finished);
  [[noreturn]] void deadlock() const;
  // hopper_calls.cpp:
  void start_hopper_block();
  Mbarrier& barrier_at(const void* pointer, const char* what);
  bool ready(const Mbarrier& b) const;
  void complete_if_due(Mbarrier& b);
  void complete(Mbarrier& b);
  std::string describe_mbarrier_wait(const Thread& t) const;
  void write_both_views(std::uint32_t address, const unsigned char* bytes, std::size_t count);
  std::vector<unsigned char>& async_view_of();
  std::string describe_thread(const Thread& t) const;
  std::string where_launched() const;
  static void thread_main(void* argument);

  Thread& me() { return *current_; }
  int thread_count() const { return static_cast<int>(block_dim.x * block_dim.y * block_dim.z); }

  // The launch.
  const KernelSite* site_ = nullptr;
  void (*invoke_)(void*) = nullptr;
  void* closure_ = nullptr;
  Schedule schedule_{};
  std::uint64_t random_state_ = 0;

  // The block.
  Fiber host_;
  std::vector<std::unique_ptr<Thread>> threads_;
  std::array<Warp, kMaxThreads / kWarpSize> warps_;
  RunSet runnable_;
  Thread* current_ = nullptr;
  int exited_ = 0, at_barrier_ = 0;
  std::source_location barrier_where_;
  std::exception_ptr error_;
  SharedMemory shared_memory_;
  std::vector<Mbarrier> mbarriers_;
  std::vector<unsigned char> async_view_;  // the async proxy's view of dynamic shared memory
  std::uint64_t launches_ = 0;
};

// The one Machine, created at the first launch.
Machine& machine();

}  // namespace mg::emu::scheduler
