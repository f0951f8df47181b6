// Ops that move data without arithmetic: reshape, permute/transpose, cat/stack, slice, clone.
// Their backward moves the gradient back the same way. They accept every dtype (i32 included).
#include <algorithm>
#include <numeric>

#include "autograd/autocast.h"
#include "autograd/check.h"
#include "autograd/ops.h"
#include "core/factory.h"
#include "kernels/copy.h"

namespace mg {

namespace {

// A new tensor sharing x's storage, `offset_bytes` further in, with another (contiguous) shape.
Tensor view_of(const Tensor& x, const Shape& shape, std::size_t offset_bytes) {
  (void)dtype_bytes(x.dtype(), numel(shape));  // a view of a packed dtype (E2M1) ends on a whole byte
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = x.dtype();
  impl->storage = x.impl().storage;
  impl->offset = x.impl().offset + offset_bytes;
  impl->id = next_tensor_id();
  return Tensor(std::move(impl));
}

Shape infer_shape(const Tensor& x, Shape shape) {
  constexpr Op op = Op::Reshape;
  auto unknown = std::find(shape.begin(), shape.end(), -1);
  std::int64_t known = 1;
  for (auto it = shape.begin(); it != shape.end(); ++it) {
    if (it == unknown) continue;
    MG_CHECK(*it >= 0, "{}: invalid size {} in shape {} (only one -1 is allowed)", op, *it, shape);
    MG_CHECK(!__builtin_mul_overflow(known, *it, &known), "{}: shape {} has too many elements", op, shape);
  }
  if (unknown != shape.end()) {
    MG_CHECK(known > 0 && x.numel() % known == 0, "{}: cannot infer the -1 in {} for {} elements (shape {})", op, shape,
             x.numel(), x.shape());
    *unknown = x.numel() / known;
  }
  MG_CHECK(numel(shape) == x.numel(), "{}: shape {} has {} elements but the tensor {} has {}", op, shape, numel(shape),
           x.shape(), x.numel());
  return shape;
}

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  const OpSpan span(Op::Reshape);
  MG_CHECK(x.defined(), "{}: the tensor is undefined", Op::Reshape);
  Tensor out = view_of(x, infer_shape(x, shape), 0);
  record(Op::Reshape, {x}, out,
         [x_shape = x.shape()](const Tensor& g, const auto&) { return Grads{reshape(g, x_shape)}; });
  return out;
}

Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims) {
  constexpr Op op = Op::Permute;
  const OpSpan span(op);
  MG_CHECK(x.defined(), "{}: the tensor is undefined", op);
  MG_CHECK(dims.size() == x.shape().size(), "{}: {} dims given for a tensor with shape {}", op, dims.size(), x.shape());
  std::vector<int> perm(dims.size());
  std::vector<bool> seen(dims.size(), false);
  Shape shape(dims.size());
  for (std::size_t d = 0; d < dims.size(); ++d) {
    perm[d] = normalize_dim(dims[d], dims.size(), qualified_name(op));
    MG_CHECK(!seen[static_cast<std::size_t>(perm[d])], "{}: dims {} repeat a dim", op, dims);
    seen[static_cast<std::size_t>(perm[d])] = true;
    shape[d] = x.shape()[static_cast<std::size_t>(perm[d])];
  }
  Tensor out = Tensor::empty(shape, check::like(x));
  kernels::permute(x, perm, out);
  record(op, {x}, out, [perm](const Tensor& g, const auto&) {
    std::vector<std::int64_t> inverse(perm.size());
    for (std::size_t d = 0; d < perm.size(); ++d)
      inverse[static_cast<std::size_t>(perm[d])] = static_cast<std::int64_t>(d);
    return Grads{permute(g, inverse)};
  });
  return out;
}

Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1) {
  MG_CHECK(x.defined(), "{}: the tensor is undefined", Op::Transpose);
  std::vector<std::int64_t> dims(x.shape().size());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[static_cast<std::size_t>(normalize_dim(dim0, dims.size(), qualified_name(Op::Transpose)))],
            dims[static_cast<std::size_t>(normalize_dim(dim1, dims.size(), qualified_name(Op::Transpose)))]);
  return permute(x, dims);
}

Tensor cat(const std::vector<Tensor>& tensors_in, std::int64_t dim) {
  constexpr Op op = Op::Cat;
  const OpSpan span(op);
  const bool autocast = autocast_enabled();
  std::vector<Tensor> cast_tensors;  // a copy of the list only under autocast
  if (autocast) {
    cast_tensors = tensors_in;
    autocast_inputs(op, cast_tensors);
  }
  const std::vector<Tensor>& tensors = autocast ? cast_tensors : tensors_in;
  MG_CHECK(!tensors.empty(), "{}: needs at least one tensor", op);
  check::same_device(op, tensors);
  const Tensor& first = tensors[0];
  const int d = normalize_dim(dim, first.shape().size(), qualified_name(op));
  Shape shape = first.shape();
  shape[static_cast<std::size_t>(d)] = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    MG_CHECK(t.dtype() == first.dtype(), "{}: tensor {} is {} but tensor 0 is {}; cast them to one dtype", op, i,
             t.dtype(), first.dtype());
    bool fits = t.shape().size() == first.shape().size();
    for (std::size_t k = 0; fits && k < shape.size(); ++k)
      fits = k == static_cast<std::size_t>(d) || t.shape()[k] == first.shape()[k];
    MG_CHECK(fits, "{}: tensor {} has shape {} but tensor 0 has {}; they may differ only in dim {}", op, i, t.shape(),
             first.shape(), d);
    shape[static_cast<std::size_t>(d)] += t.shape()[static_cast<std::size_t>(d)];
  }
  Tensor out = Tensor::empty(shape, check::like(first));
  std::vector<std::int64_t> starts;  // where each input begins along dim d
  std::int64_t start = 0;
  for (const Tensor& t : tensors) {
    kernels::copy_along_dim(t, 0, out, start, d, t.size(d));
    starts.push_back(start);
    start += t.size(d);
  }
  starts.push_back(start);
  record(op, tensors, out, [starts, d](const Tensor& g, const auto& needs) {
    Grads grads(needs.size());
    for (std::size_t i = 0; i < needs.size(); ++i)
      if (needs[i]) grads[i] = slice(g, d, starts[i], starts[i + 1]);
    return grads;
  });
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors_in, std::int64_t dim) {
  constexpr Op op = Op::Stack;
  const OpSpan span(op);
  MG_CHECK(!tensors_in.empty(), "{}: needs at least one tensor", op);
  const bool autocast = autocast_enabled();
  std::vector<Tensor> cast_tensors;
  if (autocast) {
    cast_tensors = tensors_in;
    autocast_inputs(op, cast_tensors);
  }
  const std::vector<Tensor>& tensors = autocast ? cast_tensors : tensors_in;
  // Every check first (here, not in cat, so errors name stack): nothing is recorded if one fails.
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    MG_CHECK(tensors[i].defined(), "{}: tensor {} is undefined", op, i);
    MG_CHECK(tensors[i].shape() == tensors[0].shape(),
             "{}: tensor {} has shape {} but tensor 0 has {}; stacked tensors must have one shape", op, i,
             tensors[i].shape(), tensors[0].shape());
    MG_CHECK(tensors[i].dtype() == tensors[0].dtype(), "{}: tensor {} is {} but tensor 0 is {}; cast them to one dtype",
             op, i, tensors[i].dtype(), tensors[0].dtype());
  }
  check::same_device(op, tensors);
  const int d = normalize_dim(dim, tensors[0].shape().size() + 1, qualified_name(op));
  std::vector<Tensor> expanded;
  for (const Tensor& t : tensors) {
    Shape shape = t.shape();
    shape.insert(shape.begin() + d, 1);
    expanded.push_back(reshape(t, shape));
  }
  return cat(expanded, d);
}

Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t begin, std::int64_t end) {
  constexpr Op op = Op::Slice;
  const OpSpan span(op);
  MG_CHECK(x.defined(), "{}: the tensor is undefined", op);
  MG_CHECK(x.dim() > 0, "{}: a scalar has no dims to slice", op);
  const int d = normalize_dim(dim, x.shape().size(), qualified_name(op));
  // Python's rules: negative bounds count from the end, then both are clamped to [0, size].
  const std::int64_t size = x.size(d);
  auto clamp_bound = [size](std::int64_t i) { return std::clamp(i < 0 ? i + size : i, std::int64_t{0}, size); };
  begin = clamp_bound(begin);
  end = std::max(begin, clamp_bound(end));
  Shape shape = x.shape();
  shape[static_cast<std::size_t>(d)] = end - begin;

  Tensor out;
  if (d == 0) {  // rows [begin, end) are contiguous: a view
    out = view_of(x, shape, dtype_bytes(x.dtype(), begin * product(x.shape(), 1, x.shape().size())));
  } else {
    out = Tensor::empty(shape, check::like(x));
    kernels::copy_along_dim(x, begin, out, 0, d, end - begin);
  }
  record(op, {x}, out, [x_shape = x.shape(), d, begin](const Tensor& g, const auto&) {
    Tensor dx = zeros(x_shape, check::like(g));
    kernels::copy_along_dim(g, 0, dx, begin, d, g.size(d));
    return Grads{dx};
  });
  return out;
}

Tensor clone(const Tensor& x) {
  const OpSpan span(Op::Clone);
  MG_CHECK(x.defined(), "{}: the tensor is undefined", Op::Clone);
  Tensor out = Tensor::empty(x.shape(), check::like(x));
  kernels::cast(x, out);  // same dtype: a plain copy
  record(Op::Clone, {x}, out, [](const Tensor& g, const auto&) { return Grads{g}; });
  return out;
}

}  // namespace mg
