#include "emulator/async_copies.h"

#include <cstring>

namespace mg::emu {

void AsyncCopies::Copy::land() const {
  std::memcpy(shared, global, static_cast<std::size_t>(src_bytes));
  std::memset(static_cast<char*>(shared) + src_bytes, 0, static_cast<std::size_t>(bytes - src_bytes));
}

void AsyncCopies::clear() {
  pending_.clear();
  group_ends_.clear();
}

void AsyncCopies::issue(void* shared, const void* global, int bytes, int src_bytes, Landing landing) {
  const Copy copy{shared, global, bytes, src_bytes};
  if (landing == Landing::AtIssue)
    copy.land();
  else
    pending_.push_back(copy);
}

void AsyncCopies::commit() { group_ends_.push_back(pending_.size()); }

void AsyncCopies::wait(std::size_t keep_pending) {
  if (group_ends_.size() <= keep_pending) return;
  const std::size_t groups = group_ends_.size() - keep_pending, end = group_ends_[groups - 1];
  for (std::size_t i = 0; i < end; ++i) pending_[i].land();
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(end));
  group_ends_.erase(group_ends_.begin(), group_ends_.begin() + static_cast<std::ptrdiff_t>(groups));
  for (std::size_t& group_end : group_ends_) group_end -= end;
}

void AsyncCopies::land_all() {
  commit();
  wait(0);
}

}  // namespace mg::emu
