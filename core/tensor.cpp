#include "core/tensor.h"

#include <atomic>

#include "core/device_ops.h"

namespace mg {

std::uint64_t next_tensor_id() {
  static std::atomic<std::uint64_t> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

TensorImpl& Tensor::impl() const {
  MG_CHECK(impl_ != nullptr, "Tensor: this tensor is undefined (default-constructed or an empty grad)");
  return *impl_;
}

Tensor Tensor::empty(const Shape& shape, TensorOptions options) {
  check_shape(shape, "Tensor::empty");
  MG_CHECK(options.device.is_cpu() || options.dtype != DType::F64,
           "Tensor::empty: f64 lives on the CPU only (asked for {}); it is the reference precision", options.device);
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = options.dtype;
  impl->storage = std::make_shared<Storage>(dtype_bytes(options.dtype, mg::numel(shape)), options.device);
  impl->id = next_tensor_id();
  Tensor tensor(std::move(impl));
  if (options.requires_grad) tensor.set_requires_grad(true);
  return tensor;
}

std::int64_t Tensor::size(std::int64_t dim) const {
  return shape()[static_cast<std::size_t>(normalize_dim(dim, shape().size(), "Tensor::size"))];
}

double Tensor::item() const {
  MG_CHECK(numel() == 1, "Tensor::item: needs exactly one element, the tensor has shape {} ({} elements)", shape(),
           numel());
  if (device().is_cpu()) return load_as_double(data_ptr(), dtype(), 0);
  return load_as_double(host_bytes("Tensor::item").data(), dtype(), 0);
}

std::vector<unsigned char> Tensor::host_bytes(const char* context) const {
  std::vector<unsigned char> bytes(nbytes());
  copy_bytes(data_ptr(), device(), bytes.data(), Device::cpu(), bytes.size(), context);
  return bytes;
}

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  MG_CHECK(!requires_grad || is_floating(dtype()),
           "Tensor::set_requires_grad: a {} tensor cannot require grad; only floating-point tensors are "
           "differentiable",
           dtype());
  MG_CHECK(is_leaf(), "Tensor::set_requires_grad: only leaves (tensors you created) can be changed; this "
                      "one was produced by an op; use detach() to make a new leaf");
  impl().requires_grad = requires_grad;
  return *this;
}

void Tensor::set_grad(const Tensor& grad) {
  if (!grad.defined()) {
    impl().grad.reset();
    return;
  }
  MG_CHECK(grad.shape() == shape() && grad.dtype() == dtype() && grad.device() == device(),
           "Tensor::set_grad: the gradient ({} {} on {}) must match the tensor ({} {} on {})", grad.shape(),
           grad.dtype(), grad.device(), shape(), dtype(), device());
  impl().grad = grad.impl_ptr();
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape();
  impl->dtype = dtype();
  impl->storage = this->impl().storage;
  impl->offset = this->impl().offset;
  impl->id = next_tensor_id();
  return Tensor(std::move(impl));
}

}  // namespace mg
