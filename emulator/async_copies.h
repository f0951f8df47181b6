// cp.async of one emulated thread: the copies it has issued and not yet landed, in commit groups.
// Internal to the emulator (shared_memory_calls.cpp checks the addresses, then hands them here).
//
// A copy lands at issue, or (Landing::AtWait) only when cp.async.wait_group covers its group: then
// a wait that is one group too weak leaves the step's data unwritten (NaN), which the race check
// and the values catch. Copies never waited for land when the thread returns.
#pragma once

#include <cstddef>
#include <vector>

#include "emulator/emulator.h"

namespace mg::emu {

class AsyncCopies {
 public:
  void clear();
  // A copy of `bytes` to `shared` of which the first `src_bytes` come from `global`, the rest zeros.
  void issue(void* shared, const void* global, int bytes, int src_bytes, Landing landing);
  // cp.async.commit_group: the copies issued since the last commit form a group.
  void commit();
  // cp.async.wait_group: lands the oldest groups until at most `keep_pending` remain.
  void wait(std::size_t keep_pending);
  // At the thread's end: everything, committed or not.
  void land_all();

 private:
  struct Copy {
    void* shared;
    const void* global;
    int bytes, src_bytes;
    void land() const;
  };
  std::vector<Copy> pending_;  // issued and not landed, oldest first
  std::vector<std::size_t> group_ends_;  // the committed groups: where each ends in pending_
};

}  // namespace mg::emu
