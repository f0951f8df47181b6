// The CUDA emulator's scheduler: runs a grid block by block, the threads of a block as fibers in the
// schedule's order, under each schedule of the race check (race_check.h); a thread's return from
// the kernel, deadlocks, and the errors that name the kernel, block and thread. Where threads wait
// for each other is in barriers.cpp, their calls into shared memory and cp.async in
// shared_memory_calls.cpp; the Machine the three share is in machine.h, the model in emulator.h.
#include <algorithm>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "emulator/machine.h"
#include "emulator/race_check.h"
#include "emulator/runtime_state.h"

namespace mg::emu {

uint3 thread_index{};
uint3 block_index{};
dim3 block_dim{};
dim3 grid_dim{};

namespace scheduler {

std::string site_of(const std::source_location& where) {
  std::string_view file = where.file_name();
  const std::size_t slash = file.rfind("kernels/");
  if (slash != std::string_view::npos) file = file.substr(slash);
  return fmt::format("{}:{}", file, where.line());
}

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
  start_hopper_block();
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
  t.bulk.land_all();
  t.state = State::Exited;
  runnable_.erase(t.linear);
  ++exited_;
  Warp& w = warps_[static_cast<std::size_t>(t.linear / kWarpSize)];
  const unsigned lane_bit = 1u << (t.linear % kWarpSize);
  w.alive &= ~lane_bit;
  if (w.arrived != 0 && (w.mask & lane_bit))
    fail(fmt::format("it returned from the kernel while other lanes of its warp wait for it at {} ({}) with mask "
                     "{:#010x}",
                     w.kind->name, site_of(w.where), w.mask));
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
    if (th.state == State::AtBarrier || th.state == State::AtCollective || th.state == State::AtMbarrier) {
      const Warp& w = warps_[static_cast<std::size_t>(t / kWarpSize)];
      const std::string what = th.state == State::AtBarrier    ? std::string("__syncthreads")
                               : th.state == State::AtMbarrier ? describe_mbarrier_wait(th)
                                                               : std::string(w.kind->name);
      waiting += fmt::format("{}{} at {} ({})", listed ? "; " : "", describe_thread(th), what, site_of(th.where));
      ++listed;
    }
  }
  throw Error(fmt::format("CUDA emulator: {}, block ({}, {}, {}): deadlock: no thread can go on ({} at a barrier, {} "
                          "returned); waiting: {}",
                          where_launched(), block_index.x, block_index.y, block_index.z, at_barrier_, exited_,
                          waiting));
}

}  // namespace scheduler

// ---- the public functions ------------------------------------------------------------------------------

void run_grid(const KernelSite& site, dim3 grid, dim3 block, std::size_t dynamic_shared_bytes,
              void (*invoke)(void* closure), void* closure, const void* params, std::size_t params_bytes) {
  const cudaError_t refused = runtime::check_launch(site, grid, block, dynamic_shared_bytes);
  if (refused != cudaSuccess) return;  // cudaGetLastError reports it, as after a refused <<<...>>>
  scheduler::machine().run(site, grid, block, dynamic_shared_bytes, invoke, closure, params, params_bytes);
}

void fail(const std::string& message) { scheduler::machine().fail(message); }

std::int64_t grid_stride_block_cap() { return settings().max_grid_stride_blocks; }

}  // namespace mg::emu
