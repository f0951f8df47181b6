// The Tensor methods that are ops (declared in core/tensor.h). Each is one call to the op, so the
// method form and the function form record the same node on the tape.
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "kernels/copy.h"

namespace mg {

Tensor Tensor::to(DType dtype) const { return cast(*this, dtype); }
Tensor Tensor::to(Device device) const { return to_device(*this, device); }
Tensor Tensor::reshape(const Shape& shape) const { return mg::reshape(*this, shape); }
Tensor Tensor::clone() const { return mg::clone(*this); }
Tensor Tensor::slice(std::int64_t begin, std::int64_t end) const { return mg::slice(*this, 0, begin, end); }
void Tensor::backward() const { mg::backward(*this); }

Tensor& Tensor::copy_(const Tensor& src) {
  MG_CHECK(src.defined(), "Tensor::copy_: the source is undefined");
  MG_CHECK(!(requires_grad() && grad_enabled()),
           "Tensor::copy_: this tensor requires grad and an in-place write would not be recorded; do it under "
           "NoGradGuard (as an optimizer step does)");
  MG_CHECK(src.shape() == shape(), "Tensor::copy_: the source's shape {} must match this tensor's {}", src.shape(),
           shape());
  // A source on another device is moved first; one that shares memory with this tensor is copied
  // first, so overlapping views stay correct.
  Tensor source = src.device() != device()   ? mg::to_device(src.detach(), device())
                  : shares_storage_with(src) ? mg::clone(src.detach())
                                             : src;
  kernels::cast(source, *this);
  impl().storage->bump_version();  // a tensor saved for backward now holds other values
  return *this;
}

}  // namespace mg
