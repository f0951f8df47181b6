// Preconditions shared by the ops. Each throws mg::Error naming the op, the offending values and
// what to do, before any output is allocated or any kernel runs.
#pragma once

#include <string_view>
#include <vector>

#include "autograd/cast_policy.h"
#include "core/tensor.h"
#include "kernels/window.h"

namespace mg::check {

// The tensor is defined and has elements of a floating dtype.
void floating(Op op, const Tensor& t);
// Every tensor is defined and all share the first one's device.
void same_device(Op op, const std::vector<Tensor>& tensors);
// a and b share a dtype; the message suggests mg::cast or mg::Autocast.
void same_dtype(Op op, const Tensor& a, const Tensor& b);
// The tensor has at least one element (for ops whose result is undefined on nothing).
void not_empty(Op op, const Tensor& t);
// The values of an i32 tensor of indices, for checking them on the host before any kernel runs. For
// indices uploaded from the CPU (a batch's labels and token ids) they come from the copy kept at the
// upload (core/storage.h): no wait for the device. Otherwise they are read back (a wait on a GPU).
// i64 indices (PyTorch's) read the same way, saturated to the i32 range.
std::vector<std::int32_t> index_values(const Tensor& indices);

// Indices as the i32 tensor the index kernels read: i32 as it is; i64, PyTorch's integer type (labels
// and token ids loaded from its files), converted on its device, with the host copy kept at the
// upload following it, so the checks above still do not wait. An i64 past the i32 range saturates,
// and the op's range check then names it. Any other dtype is an error naming the op and `what`.
Tensor indices_as_i32(Op op, const Tensor& indices, std::string_view what);

// The geometry of a square-strided window over x [batch, channels, height, width] (conv and pooling):
// x is 4-D, kernel >= 1, stride >= 1, padding >= 0, and the kernel fits in the padded input.
kernels::Window2d window2d(Op op, const Tensor& x, std::int64_t kernel_h, std::int64_t kernel_w, std::int64_t stride,
                           std::int64_t padding);

// Output options for a result like `t`: same dtype and device.
inline TensorOptions like(const Tensor& t) { return {.dtype = t.dtype(), .device = t.device()}; }

}  // namespace mg::check
