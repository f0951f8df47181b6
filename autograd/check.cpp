#include "autograd/check.h"

namespace mg::check {

void floating(const char* op, const Tensor& t) {
  MG_CHECK(t.defined(), "{}: an input tensor is undefined", op);
  MG_CHECK(is_floating(t.dtype()), "{}: needs a floating-point tensor, got {} with shape {}; cast it with "
           "mg::cast(x, DType::F32)", op, t.dtype(), t.shape());
}

void same_device(const char* op, const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) MG_CHECK(t.defined(), "{}: an input tensor is undefined", op);
  for (std::size_t i = 1; i < tensors.size(); ++i)
    MG_CHECK(tensors[i].device() == tensors[0].device(),
             "{}: inputs are on different devices ({} and {}); move them to one device first", op,
             tensors[0].device(), tensors[i].device());
}

void same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  MG_CHECK(a.dtype() == b.dtype(),
           "{}: inputs have different dtypes ({} with shape {} and {} with shape {}); mixgrad never casts "
           "implicitly: cast one to the other's dtype with mg::cast, or run the op under amp::Autocast",
           op, a.dtype(), a.shape(), b.dtype(), b.shape());
}

void not_empty(const char* op, const Tensor& t) {
  MG_CHECK(t.numel() > 0, "{}: the tensor is empty (shape {}); the result is undefined on no elements", op,
           t.shape());
}

}  // namespace mg::check
