// The CUDA emulator's barriers: __syncthreads, where a block's threads wait until all have arrived
// (then each learns whether any passed a non-zero predicate), and the warp collectives, where the
// lanes a mask names wait until all have arrived and the last one carries out the collective for
// all of them. Misuse is an error at once: a barrier some threads reach at another line or never
// reach, a mask naming lanes that returned or do not exist, lanes of a warp meeting at different
// collectives or with different masks. A part of the scheduler (machine.h).
#include <bit>
#include <cstring>

#include "core/error.h"
#include "emulator/machine.h"

namespace mg::emu {

namespace scheduler {

namespace {

bool same_site(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && (a.file_name() == b.file_name() || std::strcmp(a.file_name(), b.file_name()) == 0);
}

}  // namespace

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

}  // namespace scheduler

// ---- the public functions ------------------------------------------------------------------------------

int block_barrier(int predicate, std::source_location where) { return scheduler::machine().barrier(predicate, where); }

void warp_collective(unsigned mask, const Collective& kind, void* lane_data, std::source_location where) {
  scheduler::machine().collective(mask, kind, lane_data, where);
}

}  // namespace mg::emu
