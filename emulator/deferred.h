// Work an emulated thread or warp has issued and that completes later, in commit groups it waits for:
// TMA stores (a thread's bulk groups) and wgmma operations (a warp's wgmma groups). Internal to the
// emulator, as async_copies.h is for cp.async, which it generalises.
//
// An operation runs at issue, or (Landing::AtWait) only at the wait that covers its group, so that
// a kernel reusing what the operation still reads (a staging buffer, an operand stage) before the
// wait, or reading what it writes before the wait, computes something else under the two landings,
// which the race check reports.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "emulator/emulator.h"

namespace mg::emu {

class Deferred {
 public:
  void clear();
  void issue(std::function<void()> operation, Landing landing);
  // Closes the group of the operations issued since the last commit.
  void commit();
  // Runs the oldest groups until at most `keep_pending` remain.
  void wait(std::size_t keep_pending);
  // Everything, committed or not.
  void land_all();

 private:
  std::vector<std::function<void()>> pending_;  // oldest first
  std::vector<std::size_t> group_ends_;
};

}  // namespace mg::emu
