// The CUDA emulator's shared memory as device code reaches it: __shared__ variables (MG_SHARED), the
// launch's dynamic shared memory (MG_DYNAMIC_SHARED), cp.async (copy, commit, wait) and the address
// check of the instructions that read shared memory only (ldmatrix). Each call is checked first (made outside a kernel; a copy outside the block's shared memory, misaligned, or
// reading outside device memory in use), then handed to the block's SharedMemory (shared_memory.h)
// or the thread's AsyncCopies (async_copies.h). A part of the scheduler (machine.h).
#include <cstdint>

#include "core/error.h"
#include "emulator/machine.h"
#include "emulator/memory.h"

namespace mg::emu {

namespace scheduler {

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

void Machine::check_shared(const void* address, std::size_t bytes, const char* what) const {
  if (!running()) throw Error(fmt::format("CUDA emulator: {} outside a kernel", what));
  if (!shared_memory_.contains(address, bytes))
    fail(fmt::format("{} at {}: {} bytes there are not shared memory of the block", what, address, bytes));
  if (reinterpret_cast<std::uintptr_t>(address) % bytes != 0)
    fail(fmt::format("{} at {}: not aligned to its {} bytes", what, address, bytes));
}

void Machine::commit() {
  if (!running()) throw Error("CUDA emulator: cp.async.commit_group outside a kernel");
  me().copies.commit();
}

void Machine::wait(int pending) {
  if (!running()) throw Error("CUDA emulator: cp.async.wait_group outside a kernel");
  me().copies.wait(static_cast<std::size_t>(pending));
}

}  // namespace scheduler

// ---- the public functions ------------------------------------------------------------------------------

void* shared_variable(const void* key, std::size_t bytes, std::size_t alignment, const char* name) {
  return scheduler::machine().shared(key, bytes, alignment, name);
}

void* dynamic_shared() { return scheduler::machine().dynamic(); }

void copy_async(void* shared, const void* global, int bytes, int src_bytes) {
  scheduler::machine().copy(shared, global, bytes, src_bytes);
}
void check_shared(const void* address, std::size_t bytes, const char* what) {
  scheduler::machine().check_shared(address, bytes, what);
}
void commit_copies() { scheduler::machine().commit(); }
void wait_copies(int pending) { scheduler::machine().wait(pending); }

}  // namespace mg::emu
