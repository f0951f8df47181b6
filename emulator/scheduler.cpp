// The CUDA emulator's scheduler: runs a grid block by block, the threads of a block as fibers, under
// each schedule of the race check (race_check.h); barriers and warp collectives; the device-side
// calls into shared memory (shared_memory.h) and cp.async (async_copies.h), checked first.
// The model it implements is in emulator.h.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>

#ifdef __BMI2__
#include <immintrin.h>
#endif

#include "core/error.h"
#include "emulator/async_copies.h"
#include "emulator/emulator.h"
#include "emulator/fiber.h"
#include "emulator/memory.h"
#include "emulator/race_check.h"
#include "emulator/runtime_state.h"
#include "emulator/shared_memory.h"

namespace mg::emu {

uint3 thread_index{};
uint3 block_index{};
dim3 block_dim{};
dim3 grid_dim{};

namespace {

constexpr int kWarpSize = 32;
constexpr int kMaxThreads = 1024;

enum class State { Runnable, AtBarrier, AtCollective, Exited };

// One emulated thread of the block being run.
struct Thread {
  Fiber fiber;
  uint3 index{};
  int linear = 0;
  State state = State::Runnable;
  bool started = false;
  std::source_location where;  // the barrier or collective it waits at
  int predicate = 0;           // its __syncthreads_or argument, then the barrier's result
  AsyncCopies copies;           // its cp.async copies in flight
};

// The collective a warp's lanes are gathering at.
struct Warp {
  unsigned alive = 0;    // lanes the block has and that have not returned from the kernel
  unsigned arrived = 0;  // lanes that have arrived
  unsigned mask = 0;
  const Collective* kind = nullptr;
  std::source_location where;
  void* lane_data[kWarpSize] = {};
};

std::string site_of(const std::source_location& where) {
  std::string_view file = where.file_name();
  const std::size_t slash = file.rfind("kernels/");
  if (slash != std::string_view::npos) file = file.substr(slash);
  return fmt::format("{}:{}", file, where.line());
}

bool same_site(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && (a.file_name() == b.file_name() || std::strcmp(a.file_name(), b.file_name()) == 0);
}

std::uint64_t split_mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The position of the n-th (from 0) set bit of `word`, which has more than n.
int nth_set_bit(std::uint64_t word, int n) {
#ifdef __BMI2__
  return std::countr_zero(_pdep_u64(std::uint64_t{1} << n, word));
#else
  for (int i = 0; i < n; ++i) word &= word - 1;  // drop the lowest set bits
  return std::countr_zero(word);
#endif
}

// The threads that may run next, as a bit set: the schedule's pick is the lowest, the highest or a
// random one.
class RunSet {
 public:
  // Empty, for a block of `threads` threads.
  void reset(int threads) {
    words_.fill(0);
    used_words_ = (threads + 63) / 64;
    count_ = 0;
  }
  void insert(int t) {
    const std::uint64_t bit = std::uint64_t{1} << (t % 64);
    count_ += (words_[t / 64] & bit) == 0;
    words_[t / 64] |= bit;
  }
  void erase(int t) {
    const std::uint64_t bit = std::uint64_t{1} << (t % 64);
    count_ -= (words_[t / 64] & bit) != 0;
    words_[t / 64] &= ~bit;
  }
  int pick(Order order, std::uint64_t& random_state) const {
    if (count_ == 0) return -1;
    if (order == Order::Forward) {
      for (int w = 0; w < used_words_; ++w)
        if (words_[w]) return w * 64 + std::countr_zero(words_[w]);
    } else if (order == Order::Reverse) {
      for (int w = used_words_ - 1; w >= 0; --w)
        if (words_[w]) return w * 64 + 63 - std::countl_zero(words_[w]);
    } else {
      random_state = split_mix(random_state);
      int chosen = static_cast<int>(random_state % static_cast<std::uint64_t>(count_));
      for (int w = 0; w < used_words_; ++w) {
        const int here = std::popcount(words_[w]);
        if (chosen < here) return w * 64 + nth_set_bit(words_[w], chosen);
        chosen -= here;
      }
    }
    return -1;
  }

 private:
  std::array<std::uint64_t, kMaxThreads / 64> words_{};
  int used_words_ = 0, count_ = 0;
};

// The one emulated device: everything a launch needs, reused by the next. Launches are serialised
// (the threads of a block share this state; blocks run one at a time).
class Machine {
 public:
  // Recursive, so that a launch from inside a kernel reaches run()'s check instead of deadlocking.
  std::recursive_mutex mutex;

  void run(const KernelSite& site, dim3 grid, dim3 block, std::size_t dynamic_bytes, void (*invoke)(void*),
           void* closure, const void* params, std::size_t params_bytes);

  // Device side (the current thread is an emulated one).
  int barrier(int predicate, std::source_location where);
  void collective(unsigned mask, const Collective& kind, void* lane_data, std::source_location where);
  void* shared(const void* key, std::size_t bytes, std::size_t alignment, const char* name);
  void* dynamic() { return shared_memory_.dynamic(); }
  void copy(void* shared, const void* global, int bytes, int src_bytes);
  void commit();
  void wait(int pending);
  [[noreturn]] void fail(const std::string& message) const;
  bool running() const { return current_ != nullptr; }

 private:
  void execute(const Schedule& schedule, std::uint64_t seed);
  void run_block(unsigned linear_block);
  void start_block();
  void exit_current();
  void release_barrier();
  void yield();
  void switch_from(Fiber& from, bool finished);
  [[noreturn]] void deadlock() const;
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
  std::uint64_t launches_ = 0;
};

Machine& machine() {
  static auto* instance = new Machine();  // never destroyed: a storage freed after main() may launch nothing
  return *instance;
}

std::string Machine::where_launched() const {
  std::string_view file = site_->file;
  const std::size_t slash = file.rfind("kernels/");
  if (slash != std::string_view::npos) file = file.substr(slash);
  return fmt::format("kernel {} (launched at {}:{} by {})", site_->kernel, file, site_->line, site_->function);
}

std::string Machine::describe_thread(const Thread& t) const {
  return fmt::format("thread ({}, {}, {})", t.index.x, t.index.y, t.index.z);
}

void Machine::fail(const std::string& message) const {
  std::string who = site_ ? where_launched() : std::string("CUDA emulator");
  if (current_ != nullptr)
    who += fmt::format(", block ({}, {}, {}), {}, schedule {}", block_index.x, block_index.y, block_index.z,
                       describe_thread(*current_), describe(schedule_));
  throw Error(fmt::format("CUDA emulator: {}: {}", who, message));
}

// ---- a launch ---------------------------------------------------------------------------------------

void Machine::run(const KernelSite& site, dim3 grid, dim3 block, std::size_t dynamic_bytes, void (*invoke)(void*),
                  void* closure, const void* params, std::size_t params_bytes) {
  std::lock_guard lock(mutex);
  MG_CHECK(current_ == nullptr, "CUDA emulator: kernel {} launched from inside a kernel", site.kernel);
  site_ = &site;
  invoke_ = invoke;
  closure_ = closure;
  grid_dim = grid;
  block_dim = block;
  for (std::size_t t = threads_.size(); t < static_cast<std::size_t>(thread_count()); ++t)
    threads_.push_back(std::make_unique<Thread>());
  shared_memory_.start_launch(dynamic_bytes);
  struct Reset {  // whatever happens, the next launch starts clean
    Machine& m;
    ~Reset() {
      m.site_ = nullptr;
      m.current_ = nullptr;
      m.error_ = nullptr;
    }
  } reset{*this};

  const Settings& s = settings();
  const std::uint64_t seed = s.seed ^ split_mix(++launches_);
  if (!site.ordered || s.schedules.size() == 1) {
    execute(s.schedules.front(), seed);
    return;
  }
  RaceCheck check(params, params_bytes);
  for (std::size_t run = 0; run < s.schedules.size(); ++run) {
    if (run > 0) check.restore();
    execute(s.schedules[run], seed + run);  // two random schedules are two orders
    if (run == 0) {
      check.keep_first_result();
    } else if (const std::optional<std::string> difference = check.difference()) {
      throw Error(fmt::format(
          "CUDA emulator: {}: a race: the result depends on the order the threads run in. After schedule {} and "
          "schedule {} (seed {}), {}. Look for a missing __syncthreads, a cp.async wait that is too weak, lanes of "
          "a warp assumed to run in step, or blocks writing the same element.",
          where_launched(), describe(s.schedules[0]), describe(s.schedules[run]), seed + run, *difference));
    }
  }
}

void Machine::execute(const Schedule& schedule, std::uint64_t seed) {
  schedule_ = schedule;
  random_state_ = seed;
  const unsigned blocks = grid_dim.x * grid_dim.y * grid_dim.z;
  std::vector<unsigned> order(blocks);
  for (unsigned b = 0; b < blocks; ++b) order[b] = b;
  if (schedule.order == Order::Reverse) std::reverse(order.begin(), order.end());
  if (schedule.order == Order::Random)
    for (unsigned b = blocks; b > 1; --b) {
      random_state_ = split_mix(random_state_);
      std::swap(order[b - 1], order[random_state_ % b]);
    }
  for (unsigned b : order) run_block(b);
}

// ---- a block -------------------------------------------------------------------------------------

void Machine::start_block() {
  const int n = thread_count();
  for (int t = 0; t < n; ++t) {
    Thread& th = *threads_[static_cast<std::size_t>(t)];
    th.linear = t;
    th.index = {static_cast<unsigned>(t) % block_dim.x, static_cast<unsigned>(t) / block_dim.x % block_dim.y,
                static_cast<unsigned>(t) / (block_dim.x * block_dim.y)};
    th.state = State::Runnable;
    th.started = false;
    th.copies.clear();
  }
  for (int w = 0; w * kWarpSize < n; ++w) {
    const int lanes = std::min(kWarpSize, n - w * kWarpSize);
    warps_[static_cast<std::size_t>(w)].alive = lanes == kWarpSize ? ~0u : (1u << lanes) - 1;
    warps_[static_cast<std::size_t>(w)].arrived = 0;
  }
  runnable_.reset(n);
  for (int t = 0; t < n; ++t) runnable_.insert(t);
  exited_ = at_barrier_ = 0;
  shared_memory_.start_block();
}

// The block's threads switch from one to the next themselves (switch_from), one switch each, and
// come back here when all have returned, at an error, or when none can go on (a deadlock).
void Machine::run_block(unsigned linear_block) {
  block_index = {linear_block % grid_dim.x, linear_block / grid_dim.x % grid_dim.y,
                 linear_block / (grid_dim.x * grid_dim.y)};
  start_block();
  switch_from(host_, /*finished=*/false);
  current_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  if (exited_ < thread_count()) deadlock();
}

// Runs the thread the schedule picks next (from `from`, the host or a thread), or the host when
// there is none or an error is pending. Returns when something switches back to `from`.
void Machine::switch_from(Fiber& from, bool finished) {
  const int next = error_ ? -1 : runnable_.pick(schedule_.order, random_state_);
  if (next < 0) {
    current_ = nullptr;
    if (&from != &host_) Fiber::switch_to(from, host_, finished);
    return;
  }
  Thread& t = *threads_[static_cast<std::size_t>(next)];
  current_ = &t;
  thread_index = t.index;
  if (&t.fiber == &from) return;  // the schedule picked the thread that is running: it goes on
  if (!t.started) {
    t.fiber.prepare(&Machine::thread_main, this);
    t.started = true;
  }
  Fiber::switch_to(from, t.fiber, finished);
}

void Machine::thread_main(void* argument) {
  auto& m = *static_cast<Machine*>(argument);
  Thread& t = m.me();
  try {
    m.invoke_(m.closure_);
    m.exit_current();
  } catch (...) {
    m.error_ = std::current_exception();
  }
  t.state = State::Exited;
  m.runnable_.erase(t.linear);
  m.switch_from(t.fiber, /*finished=*/true);
}

void Machine::yield() { switch_from(me().fiber, /*finished=*/false); }

// A thread has returned from the kernel: its copies land, and nobody may be waiting for it.
void Machine::exit_current() {
  Thread& t = me();
  t.copies.land_all();
  t.state = State::Exited;
  runnable_.erase(t.linear);
  ++exited_;
  Warp& w = warps_[static_cast<std::size_t>(t.linear / kWarpSize)];
  const unsigned lane_bit = 1u << (t.linear % kWarpSize);
  w.alive &= ~lane_bit;
  if (w.arrived != 0 && (w.mask & lane_bit))
    fail(fmt::format("it returned from the kernel while other lanes of its warp wait for it at {} ({}) with mask "
                     "{:#010x}", w.kind->name, site_of(w.where), w.mask));
  if (at_barrier_ > 0 && at_barrier_ + exited_ == thread_count())
    fail(fmt::format("divergent __syncthreads: {} threads of the block wait at {} but {} returned from the kernel "
                     "without reaching it (a barrier must be reached by every thread of the block, or by none)",
                     at_barrier_, site_of(barrier_where_), exited_));
}

[[noreturn]] void Machine::deadlock() const {
  std::string waiting;
  int listed = 0;
  for (int t = 0; t < thread_count() && listed < 8; ++t) {
    const Thread& th = *threads_[static_cast<std::size_t>(t)];
    if (th.state == State::AtBarrier || th.state == State::AtCollective) {
      const Warp& w = warps_[static_cast<std::size_t>(t / kWarpSize)];
      waiting += fmt::format("{}{} at {} ({})", listed ? "; " : "", describe_thread(th),
                             th.state == State::AtBarrier ? "__syncthreads" : w.kind->name, site_of(th.where));
      ++listed;
    }
  }
  throw Error(fmt::format("CUDA emulator: {}, block ({}, {}, {}): deadlock: no thread can go on ({} at a barrier, {} "
                          "returned); waiting: {}", where_launched(), block_index.x, block_index.y, block_index.z,
                          at_barrier_, exited_, waiting));
}

// ---- barriers and collectives -----------------------------------------------------------------------

int Machine::barrier(int predicate, std::source_location where) {
  if (!running()) throw Error("CUDA emulator: __syncthreads called outside a kernel");
  Thread& t = me();
  if (at_barrier_ == 0) {
    barrier_where_ = where;
  } else if (!same_site(where, barrier_where_)) {
    fail(fmt::format("divergent __syncthreads: it waits at {} while other threads of the block wait at {}",
                     site_of(where), site_of(barrier_where_)));
  }
  t.state = State::AtBarrier;
  t.where = where;
  t.predicate = predicate;
  runnable_.erase(t.linear);
  ++at_barrier_;
  if (at_barrier_ + exited_ == thread_count()) {
    if (exited_ > 0)
      fail(fmt::format("divergent __syncthreads at {}: {} threads of the block returned from the kernel without "
                       "reaching it (a barrier must be reached by every thread of the block, or by none)",
                       site_of(where), exited_));
    release_barrier();
  }
  yield();
  return t.predicate;  // release_barrier's answer
}

void Machine::release_barrier() {
  int any = 0;
  for (int i = 0; i < thread_count(); ++i) any |= threads_[static_cast<std::size_t>(i)]->predicate != 0;
  for (int i = 0; i < thread_count(); ++i) {
    Thread& th = *threads_[static_cast<std::size_t>(i)];
    th.predicate = any;
    th.state = State::Runnable;
    runnable_.insert(i);
  }
  at_barrier_ = 0;
}

void Machine::collective(unsigned mask, const Collective& kind, void* lane_data, std::source_location where) {
  if (!running()) throw Error(fmt::format("CUDA emulator: {} called outside a kernel", kind.name));
  Thread& t = me();
  const int lane = t.linear % kWarpSize, warp_first = t.linear - lane;
  Warp& w = warps_[static_cast<std::size_t>(t.linear / kWarpSize)];
  if (!(mask & (1u << lane)))
    fail(fmt::format("{} at {}: the mask {:#010x} does not name the calling lane {}", kind.name, site_of(where), mask,
                     lane));
  if (const unsigned missing = mask & ~w.alive) {
    const int l = std::countr_zero(missing);
    if (warp_first + l >= thread_count())
      fail(fmt::format("{} at {}: the mask {:#010x} names lane {}, which the block does not have ({} threads)",
                       kind.name, site_of(where), mask, l, thread_count()));
    fail(fmt::format("{} at {}: the mask {:#010x} names lane {}, which has returned from the kernel", kind.name,
                     site_of(where), mask, l));
  }
  if (w.arrived == 0) {
    w.kind = &kind;
    w.mask = mask;
    w.where = where;
  } else if (w.kind != &kind || !same_site(where, w.where)) {
    fail(fmt::format("lanes of warp {} meet at different collectives: lane {} at {} ({}), other lanes at {} ({})",
                     t.linear / kWarpSize, lane, kind.name, site_of(where), w.kind->name, site_of(w.where)));
  } else if (w.mask != mask) {
    fail(fmt::format("{} at {}: lanes of warp {} pass different masks, {:#010x} and {:#010x}", kind.name,
                     site_of(where), t.linear / kWarpSize, w.mask, mask));
  }
  w.lane_data[lane] = lane_data;
  w.arrived |= 1u << lane;
  t.state = State::AtCollective;
  t.where = where;
  runnable_.erase(t.linear);
  if (w.arrived == w.mask) {
    kind.complete(w.lane_data, w.mask);
    for (int l = 0; l < kWarpSize; ++l) {
      if (!(mask & (1u << l))) continue;
      threads_[static_cast<std::size_t>(warp_first + l)]->state = State::Runnable;
      runnable_.insert(warp_first + l);
    }
    w.arrived = 0;
  }
  yield();
}

// ---- shared memory ----------------------------------------------------------------------------------

void* Machine::shared(const void* key, std::size_t bytes, std::size_t alignment, const char* name) {
  if (!running()) throw Error(fmt::format("CUDA emulator: shared variable {} declared outside a kernel", name));
  void* address = shared_memory_.variable(key, bytes, alignment);
  if (address == nullptr)
    fail(fmt::format("the block's __shared__ variables need more than the {} bytes a block may declare statically "
                     "(at {}: {} bytes more); use dynamic shared memory with the opt-in",
                     SharedMemory::kStaticLimit, name, bytes));
  return address;
}

// ---- cp.async ----------------------------------------------------------------------------------------

void Machine::copy(void* shared, const void* global, int bytes, int src_bytes) {
  if (!running()) throw Error("CUDA emulator: cp.async outside a kernel");
  if (!shared_memory_.contains(shared, static_cast<std::size_t>(bytes)))
    fail(fmt::format("cp.async to {}, which is not shared memory of the block", shared));
  if (reinterpret_cast<std::uintptr_t>(shared) % static_cast<unsigned>(bytes) != 0 ||
      reinterpret_cast<std::uintptr_t>(global) % static_cast<unsigned>(bytes) != 0)
    fail(fmt::format("cp.async of {} bytes from {} to {}: both addresses must be aligned to the copy's size", bytes,
                     global, shared));
  if (src_bytes < 0 || src_bytes > bytes)
    fail(fmt::format("cp.async: a source size of {} bytes for a {}-byte copy", src_bytes, bytes));
  if (src_bytes > 0 && !memory::is_device_range(global, static_cast<std::size_t>(src_bytes)))
    fail(fmt::format("cp.async reads {} bytes at {}, outside every device allocation in use", src_bytes, global));
  me().copies.issue(shared, global, bytes, src_bytes, schedule_.landing);
}

void Machine::commit() {
  if (!running()) throw Error("CUDA emulator: cp.async.commit_group outside a kernel");
  me().copies.commit();
}

void Machine::wait(int pending) {
  if (!running()) throw Error("CUDA emulator: cp.async.wait_group outside a kernel");
  me().copies.wait(static_cast<std::size_t>(pending));
}

}  // namespace

// ---- the public functions ------------------------------------------------------------------------------

void run_grid(const KernelSite& site, dim3 grid, dim3 block, std::size_t dynamic_shared_bytes,
              void (*invoke)(void* closure), void* closure, const void* params, std::size_t params_bytes) {
  const cudaError_t refused = runtime::check_launch(site, grid, block, dynamic_shared_bytes);
  if (refused != cudaSuccess) return;  // cudaGetLastError reports it, as after a refused <<<...>>>
  machine().run(site, grid, block, dynamic_shared_bytes, invoke, closure, params, params_bytes);
}

int block_barrier(int predicate, std::source_location where) {
  return machine().barrier(predicate, where);
}

void warp_collective(unsigned mask, const Collective& kind, void* lane_data, std::source_location where) {
  machine().collective(mask, kind, lane_data, where);
}

void* shared_variable(const void* key, std::size_t bytes, std::size_t alignment, const char* name) {
  return machine().shared(key, bytes, alignment, name);
}

void* dynamic_shared() { return machine().dynamic(); }

void copy_async(void* shared, const void* global, int bytes, int src_bytes) {
  machine().copy(shared, global, bytes, src_bytes);
}
void commit_copies() { machine().commit(); }
void wait_copies(int pending) { machine().wait(pending); }

void fail(const std::string& message) { machine().fail(message); }

std::int64_t grid_stride_block_cap() { return settings().max_grid_stride_blocks; }

}  // namespace mg::emu
