// Storage: one ref-counted block of device memory. Tensors hold it through a shared_ptr, so views
// (reshape, slices along dim 0, detach) share it and the block goes back to its allocator when the
// last view is gone.
#pragma once

#include <cstddef>

#include "core/allocator.h"

namespace mg {

class Storage {
 public:
  Storage(std::size_t nbytes, Device device)
      : allocator_(&allocator_for(device)), nbytes_(nbytes), data_(allocator_->allocate(nbytes)) {}
  ~Storage() { allocator_->deallocate(data_, nbytes_); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return allocator_->device(); }

 private:
  Allocator* allocator_;
  std::size_t nbytes_;
  void* data_;
};

}  // namespace mg
