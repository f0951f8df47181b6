// Storage: one ref-counted block of device memory. Tensors hold it through a shared_ptr, so views
// (reshape, slices along dim 0, detach) share it and the block goes back to its allocator when the
// last view is gone. It also carries the version counter of the data (see version()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/allocator.h"

namespace mg {

class Storage {
 public:
  Storage(std::size_t nbytes, Device device)
      : device_(device),
        allocator_(&allocator_for(device)),
        nbytes_(nbytes),
        data_(allocator_->allocate_on(device, nbytes)) {}
  ~Storage() { allocator_->deallocate_on(device_, data_, nbytes_); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // Counts in-place writes (Tensor::copy_, gradient accumulation). A tensor saved for backward
  // remembers the version it was saved at; backward refuses to use it if the data changed since.
  std::uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

  // An i32 block uploaded from the CPU (a batch's labels or token ids) keeps a copy of the values it
  // was uploaded with, so that the ops that check indices before any kernel runs (cross_entropy's
  // labels, embedding's ids) read them on the host instead of waiting for the device. host_values()
  // is null once an in-place write (a version bump) may have changed the block; only the index
  // checks read it.
  void keep_host_values(std::vector<std::int32_t> values) {
    host_values_ = std::make_shared<const std::vector<std::int32_t>>(std::move(values));
    host_values_version_ = version_;
  }
  const std::vector<std::int32_t>* host_values() const {
    return host_values_ && version_ == host_values_version_ ? host_values_.get() : nullptr;
  }

 private:
  Device device_;
  std::uint64_t version_ = 0;
  std::shared_ptr<const std::vector<std::int32_t>> host_values_;
  std::uint64_t host_values_version_ = 0;
  Allocator* allocator_;
  std::size_t nbytes_;
  void* data_;
};

}  // namespace mg
