#include "emulator/deferred.h"

#include <utility>

namespace mg::emu {

void Deferred::clear() {
  pending_.clear();
  group_ends_.clear();
}

void Deferred::issue(std::function<void()> operation, Landing landing) {
  if (landing == Landing::AtIssue)
    operation();
  else
    pending_.push_back(std::move(operation));
}

void Deferred::commit() { group_ends_.push_back(pending_.size()); }

void Deferred::wait(std::size_t keep_pending) {
  if (group_ends_.size() <= keep_pending) return;
  const std::size_t groups = group_ends_.size() - keep_pending, end = group_ends_[groups - 1];
  // Moved out first: an operation may not issue more, but the vector must not change under it.
  std::vector<std::function<void()>> due(std::make_move_iterator(pending_.begin()),
                                         std::make_move_iterator(pending_.begin() + static_cast<std::ptrdiff_t>(end)));
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(end));
  group_ends_.erase(group_ends_.begin(), group_ends_.begin() + static_cast<std::ptrdiff_t>(groups));
  for (std::size_t& group_end : group_ends_) group_end -= end;
  for (auto& operation : due) operation();
}

void Deferred::land_all() {
  commit();
  wait(0);
}

}  // namespace mg::emu
