// cast: the op that changes a tensor's dtype. Its backward is a cast back (tinygrad's rule), which is
// how an f32 parameter used in f16 under autocast receives an f32 gradient.
#include "autograd/check.h"
#include "autograd/ops.h"
#include "kernels/copy.h"

namespace mg {

Tensor cast(const Tensor& x, DType dtype) {
  MG_CHECK(x.defined(), "{}: the tensor is undefined", Op::Cast);
  if (x.dtype() == dtype) return x;  // no op, no span
  const OpSpan span(Op::Cast);
  MG_CHECK(dtype != DType::F64 || x.device().is_cpu(), "{}: f64 lives on the CPU only; the tensor is on {}", Op::Cast,
           x.device());
  Tensor out = Tensor::empty(x.shape(), {.dtype = dtype, .device = x.device()});
  kernels::cast(x, out);
  // Only a floating result can carry a gradient (a cast to i32 ends the graph).
  if (is_floating(dtype)) {
    record(Op::Cast, {x}, out, [source = x.dtype()](const Tensor& g, const auto&) { return Grads{cast(g, source)}; });
  }
  return out;
}

Tensor to_device(const Tensor& x, Device device) {
  constexpr Op op = Op::ToDevice;
  MG_CHECK(x.defined(), "{}: the tensor is undefined", op);
  if (x.device() == device) return x;
  const OpSpan span(op);
  MG_CHECK(x.dtype() != DType::F64,
           "{}: f64 lives on the CPU only (the reference precision); cast the {} tensor "
           "to f32 first to move it to {}",
           op, x.shape(), device);
  check_device_available(device, fmt::format("{}: cannot move {} {} to {}", op, x.shape(), x.dtype(), device));
  Tensor out = Tensor::empty(x.shape(), {.dtype = x.dtype(), .device = device});
  kernels::copy_between_devices(x, out);
  // Indices uploaded from host data stay checkable on the host (core/storage.h, check::index_values);
  // i64 ones (PyTorch's) kept as i32 values, saturated: what the index ops read them as.
  if ((x.dtype() == DType::I32 || x.dtype() == DType::I64) && x.device().is_cpu())
    out.impl().storage->keep_host_values(x.to_vector<std::int32_t>());
  if (is_floating(x.dtype())) {
    record(op, {x}, out, [source = x.device()](const Tensor& g, const auto&) { return Grads{to_device(g, source)}; });
  }
  return out;
}

namespace {

// Points the leaf at `replacement`'s storage. A new storage, not a write into the old one: a graph
// that saved the old values sees its storage gone and refuses to run backward (Saved checks storage
// identity), and caches keyed on it miss.
void adopt_storage(const Tensor& leaf, const Tensor& replacement) {
  TensorImpl& impl = leaf.impl();
  impl.storage = replacement.impl().storage;
  impl.offset = replacement.impl().offset;
  impl.dtype = replacement.dtype();
  impl.grad.reset();
}

}  // namespace

void cast_storage_(const Tensor& leaf, DType dtype) {
  MG_CHECK(leaf.defined() && leaf.is_leaf() && is_floating(leaf.dtype()) && is_floating(dtype),
           "mg::cast_storage_: needs a floating leaf and a floating dtype (got {} to {})",
           leaf.defined() ? fmt::format("{} {}", leaf.shape(), leaf.dtype()) : "undefined", dtype);
  if (leaf.dtype() == dtype) return;
  NoGradGuard no_grad;
  adopt_storage(leaf, cast(leaf.detach(), dtype));
}

void move_storage_(const Tensor& leaf, Device device) {
  MG_CHECK(leaf.defined() && leaf.is_leaf(), "mg::move_storage_: needs a leaf (got {})",
           leaf.defined() ? "a tensor produced by an op" : "an undefined tensor");
  if (leaf.device() == device) return;
  NoGradGuard no_grad;
  adopt_storage(leaf, to_device(leaf.detach(), device));
}

}  // namespace mg
