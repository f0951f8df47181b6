// The CUDA emulator's model of sm_90's asynchronous machinery (emulator.h says what it models): the
// shared-memory window, mbarriers and the threads sleeping on them, TMA loads and stores, the async
// proxy's view of shared memory and fence.proxy.async, and a warp's wgmma groups. Each call is
// checked first (outside a kernel, outside shared memory, misaligned, an mbarrier never initialised,
// a tensor map the driver did not make), as the hardware would fault or the PTX ISA forbids. A part
// of the scheduler (machine.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "emulator/machine.h"
#include "emulator/memory.h"
#include "emulator/tensor_map.h"

namespace mg::emu {

namespace scheduler {

namespace {

constexpr unsigned char kPoisonByte = 0xFF;  // as the shared-memory arena's
constexpr unsigned kMaxArrivals = (1u << 20) - 1;  // an mbarrier's arrival count

}  // namespace

void Machine::start_hopper_block() {
  mbarriers_.clear();
  async_view_.clear();  // made at its first use (async_view_of): most blocks never use it
  for (Warp& w : warps_) w.wgmma.clear();
  for (auto& t : threads_) t->bulk.clear();
}

// ---- the shared-memory window ---------------------------------------------------------------------

std::uint32_t Machine::shared_address(const void* pointer) const {
  if (!running()) throw Error("CUDA emulator: __cvta_generic_to_shared outside a kernel");
  const auto* p = static_cast<const unsigned char*>(pointer);
  const auto* dynamic = static_cast<const unsigned char*>(shared_memory_.dynamic());
  if (p >= dynamic && p <= dynamic + shared_memory_.dynamic_bytes()) return static_cast<std::uint32_t>(p - dynamic);
  const unsigned char* arena = shared_memory_.arena();
  if (p >= arena && p <= arena + SharedMemory::kStaticLimit)
    return kStaticWindow + static_cast<std::uint32_t>(p - arena);
  fail(fmt::format("__cvta_generic_to_shared of {}, which is not shared memory of the block", pointer));
}

// ---- mbarriers ------------------------------------------------------------------------------------------

Mbarrier& Machine::barrier_at(const void* pointer, const char* what) {
  const std::uint32_t address = shared_address(pointer);
  for (Mbarrier& b : mbarriers_)
    if (b.address == address) return b;
  fail(fmt::format("{} on shared address {:#x}, where no mbarrier.init has set up an mbarrier in this block", what,
                   address));
}

void Machine::mbarrier_init(void* barrier, unsigned count) {
  const std::uint32_t address = shared_address(barrier);
  check_shared(barrier, 8, "mbarrier.init");
  if (count < 1 || count > kMaxArrivals)
    fail(fmt::format("mbarrier.init with an arrival count of {} (1 to {})", count, kMaxArrivals));
  for (Mbarrier& b : mbarriers_)
    if (b.address == address) {
      if (!b.in_flight.empty() || b.pending != b.expected || b.tx != 0)
        fail(fmt::format("mbarrier.init on the mbarrier at {:#x} while a phase of it is under way", address));
      b = Mbarrier{address, count, count, 0, 0, {}, 0};
      return;
    }
  mbarriers_.push_back(Mbarrier{address, count, count, 0, 0, {}, 0});
}

// Every arrival of the phase in, and every byte it expects landed or in flight.
bool Machine::ready(const Mbarrier& b) const { return b.pending == 0 && b.tx - b.in_flight_bytes == 0; }

// A ready phase completes at once when nothing is in flight, or when a thread waits for it;
// otherwise (":wait") its copies stay in flight until a thread's wait observes it.
void Machine::complete_if_due(Mbarrier& b) {
  if (!ready(b)) return;
  bool waited_for = b.in_flight.empty();
  for (int i = 0; i < thread_count() && !waited_for; ++i) {
    const Thread& t = *threads_[static_cast<std::size_t>(i)];
    waited_for = t.state == State::AtMbarrier && t.waiting_barrier == b.address && t.waiting_parity == b.phase;
  }
  if (waited_for) complete(b);
}

void Machine::complete(Mbarrier& b) {
  for (auto& land : b.in_flight) land();
  b.tx -= b.in_flight_bytes;
  b.in_flight.clear();
  b.in_flight_bytes = 0;
  const unsigned completed = b.phase;
  b.phase ^= 1;
  b.pending = b.expected;
  for (int i = 0; i < thread_count(); ++i) {
    Thread& t = *threads_[static_cast<std::size_t>(i)];
    if (t.state == State::AtMbarrier && t.waiting_barrier == b.address && t.waiting_parity == completed) {
      t.state = State::Runnable;
      runnable_.insert(i);
    }
  }
}

void Machine::mbarrier_arrive(void* barrier, unsigned tx_bytes) {
  Mbarrier& b = barrier_at(barrier, tx_bytes ? "mbarrier.arrive.expect_tx" : "mbarrier.arrive");
  if (ready(b)) complete(b);  // the phase before this arrival's is over: its copies land first
  if (b.pending == 0)
    fail(fmt::format("an arrival on the mbarrier at {:#x} beyond its count of {} in one phase (the phase waits for "
                     "{} more bytes)",
                     b.address, b.expected, b.tx - b.in_flight_bytes));
  b.tx += tx_bytes;
  --b.pending;
  complete_if_due(b);
}

void Machine::mbarrier_wait(void* barrier, unsigned parity, std::source_location where) {
  Mbarrier& b = barrier_at(barrier, "mbarrier.try_wait.parity");
  if ((parity & 1) != b.phase) return;  // that parity's phase is the one before: complete
  if (ready(b)) {
    complete(b);
    return;
  }
  Thread& t = me();
  t.state = State::AtMbarrier;
  t.waiting_barrier = b.address;
  t.waiting_parity = parity & 1;
  t.where = where;
  runnable_.erase(t.linear);
  yield();  // complete() makes it runnable again
}

std::string Machine::describe_mbarrier_wait(const Thread& t) const {
  for (const Mbarrier& b : mbarriers_)
    if (b.address == t.waiting_barrier)
      return fmt::format("mbarrier.try_wait.parity {} on the mbarrier at {:#x} (phase {}: {} of {} arrivals and {} "
                         "bytes still to come)",
                         t.waiting_parity, b.address, b.phase, b.pending, b.expected, b.tx - b.in_flight_bytes);
  return "an mbarrier";
}

// ---- TMA and the async proxy ----------------------------------------------------------------------------

// The async proxy's view as the block starts: poison, as the arena (what no fence has published).
std::vector<unsigned char>& Machine::async_view_of() {
  if (async_view_.size() != shared_memory_.dynamic_bytes())
    async_view_.assign(shared_memory_.dynamic_bytes(), kPoisonByte);
  return async_view_;
}

void Machine::write_both_views(std::uint32_t address, const unsigned char* bytes, std::size_t count) {
  std::memcpy(static_cast<unsigned char*>(shared_memory_.dynamic()) + address, bytes, count);
  std::memcpy(async_view_of().data() + address, bytes, count);
}

const unsigned char* Machine::async_view(std::uint32_t address, std::size_t bytes, const char* what) {
  if (!running()) throw Error(fmt::format("CUDA emulator: {} outside a kernel", what));
  if (address + bytes > shared_memory_.dynamic_bytes() || address + bytes < address)
    fail(fmt::format("{} reads {} bytes at shared address {:#x}, outside the block's {} bytes of dynamic shared memory "
                     "(the emulator's async proxy sees dynamic shared memory only)",
                     what, bytes, address, shared_memory_.dynamic_bytes()));
  return async_view_of().data() + address;
}

void Machine::tma_load(void* shared, const void* tensor_map, const int* coordinates, void* barrier) {
  if (!running()) throw Error("CUDA emulator: cp.async.bulk.tensor outside a kernel");
  const TensorMap& map = tensor_map_in(tensor_map, "cp.async.bulk.tensor");
  const std::uint32_t base = shared_address(shared);
  const std::size_t bytes = map.box_bytes();
  if (base % 128 != 0) fail(fmt::format("cp.async.bulk.tensor to shared address {:#x}: not 128-byte aligned", base));
  (void)async_view(base, bytes, "cp.async.bulk.tensor's destination");
  Mbarrier& b = barrier_at(barrier, "cp.async.bulk.tensor's mbarrier::complete_tx");
  if (ready(b)) complete(b);
  // The box, read now element by element (a kernel's operands do not change while it runs); it lands
  // in 16-byte chunks, each where the swizzle puts it.
  std::vector<unsigned char> box(bytes);
  for (std::size_t at = 0; at < bytes; at += map.element_bytes) {
    const unsigned char* source = map.global_address(coordinates, at);
    if (source != nullptr && !memory::is_device_range(source, map.element_bytes))
      fail(fmt::format("cp.async.bulk.tensor reads {} at {}, outside every device allocation in use (the tensor map's "
                       "sizes and strides do not fit its tensor)",
                       map.element_bytes, static_cast<const void*>(source)));
    if (source == nullptr)
      std::memset(&box[at], 0, map.element_bytes);
    else
      std::memcpy(&box[at], source, map.element_bytes);
  }
  auto land = [this, map, base, box = std::move(box)] {
    for (std::size_t at = 0; at < box.size(); at += 16) write_both_views(map.shared_address(base, at), &box[at], 16);
  };
  if (schedule_.landing == Landing::AtIssue) {
    land();
    b.tx -= static_cast<std::int64_t>(bytes);
  } else {
    const unsigned char poison[16] = {kPoisonByte, kPoisonByte, kPoisonByte, kPoisonByte, kPoisonByte, kPoisonByte,
                                      kPoisonByte, kPoisonByte, kPoisonByte, kPoisonByte, kPoisonByte, kPoisonByte,
                                      kPoisonByte, kPoisonByte, kPoisonByte, kPoisonByte};
    for (std::size_t at = 0; at < bytes; at += 16) write_both_views(map.shared_address(base, at), poison, 16);
    b.in_flight.push_back(std::move(land));
    b.in_flight_bytes += static_cast<std::int64_t>(bytes);
  }
  complete_if_due(b);
}

void Machine::tma_store(const void* tensor_map, const int* coordinates, const void* shared) {
  if (!running()) throw Error("CUDA emulator: cp.async.bulk.tensor outside a kernel");
  const TensorMap& map = tensor_map_in(tensor_map, "cp.async.bulk.tensor (a store)");
  const std::uint32_t base = shared_address(shared);
  if (base % 128 != 0) fail(fmt::format("cp.async.bulk.tensor from shared address {:#x}: not 128-byte aligned", base));
  (void)async_view(base, map.box_bytes(), "cp.async.bulk.tensor's source");
  std::vector<int> at_coordinates(coordinates, coordinates + map.rank);
  // Reads shared memory through the async proxy when it runs: at issue, or at the bulk wait.
  me().bulk.issue(
      [this, map, base, at_coordinates] {
        for (std::size_t at = 0; at < map.box_bytes(); at += map.element_bytes) {
          const unsigned char* target = map.global_address(at_coordinates.data(), at);
          if (target == nullptr) continue;  // clipped to the tensor
          if (!memory::is_device_range(target, map.element_bytes))
            fail(fmt::format("cp.async.bulk.tensor writes {} bytes at {}, outside every device allocation in use",
                             map.element_bytes, static_cast<const void*>(target)));
          const std::uint32_t chunk = map.shared_address(base, at - at % 16);
          std::memcpy(const_cast<unsigned char*>(target), async_view_of().data() + chunk + at % 16, map.element_bytes);
        }
      },
      schedule_.landing);
}

void Machine::bulk_commit() {
  if (!running()) throw Error("CUDA emulator: cp.async.bulk.commit_group outside a kernel");
  me().bulk.commit();
}

void Machine::bulk_wait(int pending) {
  if (!running()) throw Error("CUDA emulator: cp.async.bulk.wait_group outside a kernel");
  me().bulk.wait(static_cast<std::size_t>(pending));
}

// Every ordinary store so far becomes visible to the async proxy (all threads' at once: a weaker
// check than the hardware's, which orders only the fencing thread's own stores).
void Machine::fence_proxy_async() {
  if (!running()) throw Error("CUDA emulator: fence.proxy.async outside a kernel");
  std::vector<unsigned char>& view = async_view_of();
  if (!view.empty()) std::memcpy(view.data(), shared_memory_.dynamic(), view.size());
}

// ---- wgmma groups -----------------------------------------------------------------------------------------

void Machine::wgmma_issue(std::function<void()> operation) {
  warps_[static_cast<std::size_t>(me().linear / kWarpSize)].wgmma.issue(std::move(operation), schedule_.landing);
}
void Machine::wgmma_commit() { warps_[static_cast<std::size_t>(me().linear / kWarpSize)].wgmma.commit(); }
void Machine::wgmma_wait(int pending) {
  warps_[static_cast<std::size_t>(me().linear / kWarpSize)].wgmma.wait(static_cast<std::size_t>(pending));
}

}  // namespace scheduler

// ---- the public functions ------------------------------------------------------------------------------

std::uint32_t shared_address(const void* pointer) { return scheduler::machine().shared_address(pointer); }
void mbarrier_init(void* barrier, unsigned count) { scheduler::machine().mbarrier_init(barrier, count); }
void mbarrier_arrive(void* barrier, unsigned tx_bytes) { scheduler::machine().mbarrier_arrive(barrier, tx_bytes); }
void mbarrier_wait(void* barrier, unsigned parity, std::source_location where) {
  scheduler::machine().mbarrier_wait(barrier, parity, where);
}
void tma_load(void* shared, const void* tensor_map, const int* coordinates, void* barrier) {
  scheduler::machine().tma_load(shared, tensor_map, coordinates, barrier);
}
void tma_store(const void* tensor_map, const int* coordinates, const void* shared) {
  scheduler::machine().tma_store(tensor_map, coordinates, shared);
}
void bulk_commit() { scheduler::machine().bulk_commit(); }
void bulk_wait(int pending) { scheduler::machine().bulk_wait(pending); }
void fence_proxy_async() { scheduler::machine().fence_proxy_async(); }
const unsigned char* async_view(std::uint32_t address, std::size_t bytes, const char* what) {
  return scheduler::machine().async_view(address, bytes, what);
}
void wgmma_issue(std::function<void()> operation) { scheduler::machine().wgmma_issue(std::move(operation)); }
void wgmma_commit() { scheduler::machine().wgmma_commit(); }
void wgmma_wait(int pending) { scheduler::machine().wgmma_wait(pending); }

}  // namespace mg::emu
