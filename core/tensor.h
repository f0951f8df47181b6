// Tensor: a dtype-tagged, contiguous, row-major block of numbers on one device, plus the autograd
// state (requires_grad, grad) the tape needs.
//
// A Tensor is a cheap handle (a shared_ptr to TensorImpl): copying it shares the data, like
// torch::Tensor. Data is always contiguous; transposes are GEMM layout flags or copies, never
// strided views. Views that stay contiguous (reshape, a slice along dim 0, detach) share storage.
//
// The methods under "ops" are differentiable: they are recorded on the tape like any mg:: op and
// are defined next to their backward in autograd/ (autograd/tensor_methods.cpp lists them).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/convert.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/scalar_types.h"
#include "core/shape.h"
#include "core/storage.h"

namespace mg {

// How to make a tensor: mg::zeros({2, 3}, {.dtype = DType::F16, .requires_grad = true}).
struct TensorOptions {
  DType dtype = DType::F32;
  Device device = Device::cpu();
  bool requires_grad = false;
};

struct TensorImpl {
  Shape shape;
  DType dtype = DType::F32;
  std::shared_ptr<Storage> storage;
  std::size_t offset = 0;  // bytes from the start of storage: views share storage at an offset
  std::uint64_t id = 0;  // unique for the life of the process; the tape refers to tensors by id

  // Autograd state. A leaf is a tensor the user made (a parameter, an input); a tensor produced by a
  // recorded op is not a leaf. backward() accumulates into `grad` of leaves that require grad.
  bool requires_grad = false;
  bool is_leaf = true;
  std::shared_ptr<TensorImpl> grad;
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor: defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialised memory of the given shape (from the device's caching allocator).
  static Tensor empty(const Shape& shape, TensorOptions options = {});

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  std::int64_t dim() const { return static_cast<std::int64_t>(impl().shape.size()); }
  std::int64_t size(std::int64_t dim) const;  // negative dims count from the end
  std::int64_t numel() const { return mg::numel(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  std::size_t nbytes() const { return dtype_bytes(dtype(), numel()); }

  // Raw element data. data<T>() checks that T is this tensor's element type.
  void* data_ptr() const { return static_cast<char*>(impl().storage->data()) + impl().offset; }
  template <class T>
  T* data() const;

  // The single value of a one-element tensor, as double (an error for any other numel). On a GPU this
  // waits for the queued work that produces it.
  double item() const;
  // The same value as T, PyTorch's spelling: loss.item<float>(), count.item<int>(). An integral T
  // truncates toward zero, as PyTorch does; a value it cannot hold (NaN, inf, out of range) is an error.
  template <class T>
  requires std::is_arithmetic_v<T> T item()
  const {
    const double value = item();
    if constexpr (std::is_integral_v<T>) {
      const double whole = std::trunc(value);  // NaN fails both comparisons
      MG_CHECK(whole >= static_cast<double>(std::numeric_limits<T>::min()) &&
                   whole < std::ldexp(1.0, std::numeric_limits<T>::digits),
               "Tensor::item: {} does not fit the integer type asked for; read it as double", value);
    }
    return static_cast<T>(value);
  }
  // All values converted to T (float, double or int32_t): a copy on the host (waits for a GPU).
  template <class T>
  std::vector<T> to_vector() const;
  // The raw bytes, copied to the host.
  std::vector<unsigned char> host_bytes(const char* context) const;

  // ---- autograd state
  bool requires_grad() const { return impl().requires_grad; }
  // Only floating-point leaves may require grad. Returns *this for chaining.
  Tensor& set_requires_grad(bool requires_grad);
  Tensor& requires_grad_(bool requires_grad = true) { return set_requires_grad(requires_grad); }  // PyTorch's name
  bool is_leaf() const { return impl().is_leaf; }
  // The accumulated gradient: same shape, dtype and device; undefined until a backward reaches it.
  Tensor grad() const { return Tensor(impl().grad); }
  void set_grad(const Tensor& grad);
  void zero_grad() { impl().grad.reset(); }  // drops the gradient (the next backward starts fresh)
  std::uint64_t id() const { return impl().id; }

  // A new leaf that shares this tensor's data and does not require grad.
  Tensor detach() const;
  bool shares_storage_with(const Tensor& other) const { return impl().storage == other.impl().storage; }

  // mg::backward(*this) (autograd/tape.h), PyTorch's loss.backward(): seeds a one-element tensor's
  // gradient with 1, adds into .grad of the leaves it reaches, then clears this thread's tape.
  void backward() const;

  // ---- ops (differentiable; defined in autograd/)
  Tensor to(DType dtype) const;  // mg::cast; returns *this when the dtype matches
  Tensor to(Device device) const;  // mg::to_device; returns *this when already there
  Tensor reshape(const Shape& shape) const;  // mg::reshape; one size may be -1; a view
  Tensor clone() const;  // a copy with its own storage; gradient passes through
  Tensor slice(std::int64_t begin, std::int64_t end) const;  // rows [begin, end) of dim 0; a view
  // Copies src's values into this tensor in place (same shape; dtype converted). Not recorded: on a
  // tensor that requires grad it must run under NoGradGuard, as an optimizer update does.
  Tensor& copy_(const Tensor& src);

  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// A fresh id for a new TensorImpl (thread-safe).
std::uint64_t next_tensor_id();

// ---- implementation of the templates ------------------------------------------------------------

template <class T>
T* Tensor::data() const {
  MG_CHECK(dtype() == dtype_of<T>(), "Tensor::data: the tensor holds {}, not {}", dtype(), dtype_of<T>());
  return static_cast<T*>(data_ptr());
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  std::vector<T> values(static_cast<std::size_t>(numel()));
  if (device().is_cpu()) {
    convert(data_ptr(), dtype(), values.data(), dtype_of<T>(), numel());
  } else {
    const std::vector<unsigned char> bytes = host_bytes("Tensor::to_vector");  // waits for the GPU
    convert(bytes.data(), dtype(), values.data(), dtype_of<T>(), numel());
  }
  return values;
}

}  // namespace mg
