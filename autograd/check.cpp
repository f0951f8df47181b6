#include "autograd/check.h"

#include "kernels/copy.h"

namespace mg::check {

void floating(Op op, const Tensor& t) {
  MG_CHECK(t.defined(), "{}: an input tensor is undefined", op);
  MG_CHECK(is_floating(t.dtype()),
           "{}: needs a floating-point tensor, got {} with shape {}; cast it with "
           "mg::cast(x, DType::F32)",
           op, t.dtype(), t.shape());
}

void same_device(Op op, const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) MG_CHECK(t.defined(), "{}: an input tensor is undefined", op);
  for (std::size_t i = 1; i < tensors.size(); ++i)
    MG_CHECK(tensors[i].device() == tensors[0].device(),
             "{}: inputs are on different devices ({} and {}); move them to one device first", op, tensors[0].device(),
             tensors[i].device());
}

void same_dtype(Op op, const Tensor& a, const Tensor& b) {
  MG_CHECK(a.dtype() == b.dtype(),
           "{}: inputs have different dtypes ({} with shape {} and {} with shape {}); mixgrad never casts "
           "implicitly: cast one to the other's dtype with mg::cast, or run the op under mg::Autocast",
           op, a.dtype(), a.shape(), b.dtype(), b.shape());
}

void not_empty(Op op, const Tensor& t) {
  MG_CHECK(t.numel() > 0, "{}: the tensor is empty (shape {}); the result is undefined on no elements", op, t.shape());
}

std::vector<std::int32_t> index_values(const Tensor& indices) {
  const TensorImpl& impl = indices.impl();
  if (const std::vector<std::int32_t>* kept = impl.storage->host_values()) {
    const std::size_t first = impl.offset / dtype_size(indices.dtype());  // one kept value an element
    if (first + static_cast<std::size_t>(indices.numel()) <= kept->size())
      return {kept->begin() + static_cast<std::ptrdiff_t>(first),
              kept->begin() + static_cast<std::ptrdiff_t>(first + static_cast<std::size_t>(indices.numel()))};
  }
  return indices.to_vector<std::int32_t>();
}

Tensor indices_as_i32(Op op, const Tensor& indices, std::string_view what) {
  MG_CHECK(indices.defined(), "{}: the {} tensor is undefined", op, what);
  MG_CHECK(indices.dtype() == DType::I32 || indices.dtype() == DType::I64,
           "{}: {} must be i32 or i64, got {} with shape {}; convert with .to(DType::I32)", op, what, indices.dtype(),
           indices.shape());
  if (indices.dtype() == DType::I32) return indices;
  Tensor converted = Tensor::empty(indices.shape(), {.dtype = DType::I32, .device = indices.device()});
  kernels::cast(indices, converted);  // no graph: indices carry no gradient
  if (!indices.device().is_cpu() && indices.impl().storage->host_values())
    converted.impl().storage->keep_host_values(index_values(indices));
  return converted;
}

kernels::Window2d window2d(Op op, const Tensor& x, std::int64_t kernel_h, std::int64_t kernel_w, std::int64_t stride,
                           std::int64_t padding) {
  MG_CHECK(x.defined() && x.dim() == 4, "{}: the input must be [batch, channels, height, width], got {}", op,
           x.defined() ? x.shape() : Shape{});
  MG_CHECK(kernel_h >= 1 && kernel_w >= 1 && stride >= 1 && padding >= 0,
           "{}: needs kernel >= 1, stride >= 1 and padding >= 0; got kernel {}x{}, stride {}, padding {}", op, kernel_h,
           kernel_w, stride, padding);
  MG_CHECK(x.size(2) + 2 * padding >= kernel_h && x.size(3) + 2 * padding >= kernel_w,
           "{}: the {}x{} kernel does not fit in the input {} padded by {}; use a smaller kernel or more padding", op,
           kernel_h, kernel_w, x.shape(), padding);
  return {.batch = x.size(0),
          .channels = x.size(1),
          .height = x.size(2),
          .width = x.size(3),
          .kernel_h = kernel_h,
          .kernel_w = kernel_w,
          .stride_h = stride,
          .stride_w = stride,
          .pad_h = padding,
          .pad_w = padding};
}

}  // namespace mg::check
