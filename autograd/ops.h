// The differentiable op API. Each op computes its output and, when an input requires grad and
// grad mode is on, records its backward on the tape (autograd/tape.h).
//
// Dtype rules, for every op below:
//   - inputs of a multi-input op must share one dtype and one device; nothing is cast implicitly
//     (mg::Autocast is the place where casts are inserted, and then they are recorded ops too);
//   - elementwise math runs in f32 (f64 for f64) and is rounded once to the output dtype on store;
//   - reductions, softmax and losses accumulate in f32 (f64 for f64);
//   - matmul multiplies f16/bf16 exactly and accumulates in f32, like Tensor Cores;
//   - gradients have the dtype of the tensor they belong to.
// Bad input (shapes that do not fit, mixed dtypes or devices, labels out of range, empty tensors
// where a result would be undefined) throws mg::Error naming the op before anything is computed.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/tape.h"
#include "core/generator.h"
#include "core/tensor.h"

namespace mg {

// ---- elementwise, two tensors with NumPy broadcasting (autograd/binary.cpp)
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& base, const Tensor& exponent);  // the base's gradient needs base > 0 where exponent varies
// mask ? a : b, elementwise with broadcasting; the mask is i32 or floating (any dtype but f64 unless
// the values are f64), non-zero selects a. The mask gets no gradient and autocast never casts it.
Tensor where(const Tensor& mask, const Tensor& a, const Tensor& b);

// ---- elementwise, one tensor (autograd/unary.cpp)
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor abs(const Tensor& x);    // gradient sign(x), 0 at 0
Tensor clamp(const Tensor& x, double min, double max);  // gradient passes where min <= x <= max
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);   // gradient 0 at 0
Tensor gelu(const Tensor& x);   // exact (erf) form

// ---- scalar arithmetic (autograd/unary.cpp); the scalar is rounded like any value in f32 math
Tensor add(const Tensor& x, double scalar);
Tensor sub(const Tensor& x, double scalar);
Tensor rsub(double scalar, const Tensor& x);  // scalar - x
Tensor mul(const Tensor& x, double scalar);
Tensor div(const Tensor& x, double scalar);
Tensor rdiv(double scalar, const Tensor& x);  // scalar / x
Tensor pow(const Tensor& x, double exponent);

// ---- matrix products (autograd/matmul.cpp)
struct MatmulOptions {
  bool transpose_a = false;  // use a^T: a is stored [k, m] (or [batch, k, m])
  bool transpose_b = false;  // use b^T: b is stored [n, k] (or [batch, n, k]); nn::Linear's weight
};
// [m, k] x [k, n] -> [m, n];  [batch, m, k] x [batch, k, n] -> [batch, m, n];
// [batch, m, k] x [k, n] -> [batch, m, n] (a shared right operand, e.g. a weight applied per step).
// Transposes are layout flags of the GEMM, never copies; backward uses the same flags.
Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions options = {});
// x W^T + b, PyTorch's layout: x [rows, in] or [batch, rows, in], weight [out, in], bias [out] or
// undefined. One op for autocast (lower precision, bias included), so a layer's output, and what the
// next op saves, stay f16 under mixed_float16 instead of being promoted to f32 by an f32 bias.
// One GEMM (transpose_b) that adds the bias to the f32 sums before the one rounding, with its own
// backward: dx = dy W, dW = dy^T x, db = dy summed over the rows in f32.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// ---- convolution and pooling over [batch, channels, height, width] (autograd/conv.cpp, pool.cpp)
// Square strides and padding; out size = (in + 2 padding - kernel) / stride + 1 on each side.
struct Conv2dOptions {
  std::int64_t stride = 1;
  std::int64_t padding = 0;  // zeros on every side
};
// x [N, C, H, W], weight [O, C, KH, KW], bias [O] or undefined -> [N, O, OH, OW]. One GEMM over the
// image patches (im2col), so it is on the lower-precision list like matmul.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Conv2dOptions options = {});
struct Pool2dOptions {
  std::int64_t kernel = 2;
  std::int64_t stride = 0;   // 0: the kernel size (non-overlapping windows)
  std::int64_t padding = 0;  // at most kernel / 2; never wins a max, counts as 0 in an average
};
Tensor max_pool2d(const Tensor& x, Pool2dOptions options = {});  // the gradient goes to the first maximum
Tensor avg_pool2d(const Tensor& x, Pool2dOptions options = {});  // divides by kernel^2, padding included

// ---- normalization and dropout (autograd/norm.cpp, autograd/dropout.cpp)
// Statistics in f32 (f64 for f64) whatever the input dtype; the result has the input's dtype (f32
// under autocast, whose policy lists both ops as f32).
// Normalizes over the last dim: (x - mean) / sqrt(var + eps) * weight + bias, weight and bias [last]
// or undefined; var is the biased (population) variance.
Tensor layer_norm(const Tensor& x, const Tensor& weight = {}, const Tensor& bias = {}, double eps = 1e-5);
struct BatchNormOptions {
  bool training = true;   // batch statistics (and running-statistics updates) or the running ones
  double momentum = 0.1;  // running = (1 - momentum) running + momentum batch (PyTorch's convention)
  double eps = 1e-5;
};
// x [N, C] or [N, C, ...]: per-channel statistics over every dim but 1. running_mean/var [C] (or
// both undefined) are updated in place in training mode, without gradient, with the unbiased variance.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, BatchNormOptions options = {});
// Zeroes each element with probability p and scales the rest by 1 / (1 - p) (training only; in
// evaluation returns x). The mask is drawn from `generator` (default: mg::default_generator()).
Tensor dropout(const Tensor& x, double p, bool training, Generator& generator);
Tensor dropout(const Tensor& x, double p, bool training);

// ---- shapes (autograd/shape_ops.cpp, autograd/broadcast.cpp)
Tensor reshape(const Tensor& x, const Shape& shape);  // one size may be -1; a view (shares data)
Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1);  // a copy
Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims);   // a copy: out dim d = x dim dims[d]
Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim);
Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim);       // a new dim of size tensors.size()
// Elements [begin, end) along dim; begin/end may be negative (from the end). A view along dim 0.
Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t begin, std::int64_t end);
Tensor clone(const Tensor& x);
Tensor broadcast_to(const Tensor& x, const Shape& shape);  // repeats size-1 and missing leading dims
Tensor sum_to(const Tensor& x, const Shape& shape);        // the reverse: sums the repeated dims away

// ---- reductions (autograd/reduce.cpp); dims may be negative
Tensor sum(const Tensor& x);  // of everything: a scalar (shape {})
Tensor sum(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);  // the gradient goes to the first maximum
Tensor max(const Tensor& x, std::int64_t dim, bool keepdim = false);
// Position of the first maximum (i32; not differentiable). argmax(x) indexes the flattened tensor.
Tensor argmax(const Tensor& x);
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);

// ---- softmax and losses (autograd/softmax.cpp, autograd/loss.cpp)
Tensor softmax(const Tensor& x, std::int64_t dim);
Tensor log_softmax(const Tensor& x, std::int64_t dim);

enum class Reduction { Mean, Sum, None };
struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;  // Mean divides by the rows whose label is not ignored
  std::int64_t ignore_index = -100;       // rows with this label contribute nothing
};
// logits [rows, classes] (any floating dtype) and labels i32 [rows] in [0, classes). The loss has
// the logits' dtype: a scalar, or [rows] for Reduction::None. All math in f32 (f64 for f64). Ignored
// rows get a zero gradient; a mean over zero counted rows is NaN, as in PyTorch.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, CrossEntropyOptions options = {});
// mean (or sum) of (prediction - target)^2; shapes must match exactly.
Tensor mse_loss(const Tensor& prediction, const Tensor& target, Reduction reduction = Reduction::Mean);
// Binary cross entropy on probabilities p in [0, 1] with targets t of the same shape and dtype:
// -(t log p + (1 - t) log(1 - p)), each log clamped at -100 as in PyTorch; math in f32 (f64 for f64),
// the result in p's dtype. dp = (p - t) / max(p (1 - p), 1e-12); targets get no gradient.
// Banned under mg::Autocast, like in PyTorch: the logits form below is the safe one.
Tensor binary_cross_entropy(const Tensor& probabilities, const Tensor& targets,
                            Reduction reduction = Reduction::Mean);
// The same loss from logits x (p = sigmoid(x)), in the stable form max(x, 0) - x t + log(1 + exp(-|x|)):
// no log of a rounded probability. dx = sigmoid(x) - t and dt = -x (times 1/n for the mean).
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets,
                                        Reduction reduction = Reduction::Mean);

// ---- casts and lookups (autograd/cast.cpp, autograd/embedding.cpp)
// x in another dtype, rounded to nearest even. Backward casts the gradient back to x's dtype, so an
// f32 parameter used through an f16 cast receives an f32 gradient. Returns x itself if the dtype matches.
Tensor cast(const Tensor& x, DType dtype);
// x on another device (x itself when it is there already): CPU <-> CUDA, or between GPUs; values
// are copied byte for byte. Backward copies the gradient back to x's device. A CUDA device must
// exist (mg::cuda_device_count()); f64 stays on the CPU.
Tensor to_device(const Tensor& x, Device device);
// Converts a leaf's data to `dtype` in place (rounded to nearest even), so that every handle to it
// (a module's member, an optimizer's list) sees the new dtype; drops its .grad. Not recorded, and a
// graph that saved the old data refuses to run backward. nn::Module::to and amp::Recipe use it.
void cast_storage_(const Tensor& leaf, DType dtype);
// Moves a leaf's data to `device` in place, the same way (every handle sees it; .grad dropped).
// nn::Module::to(Device) uses it.
void move_storage_(const Tensor& leaf, Device device);
// Rows of weight [num_embeddings, dim] picked by i32 indices of any shape: [..., dim].
// The weight's gradient sums the rows of every occurrence (in f32 for f16/bf16 weights).
Tensor embedding(const Tensor& weight, const Tensor& indices);

// ---- recurrences (autograd/lstm.cpp)
// The LSTM recurrence over a whole sequence as one op, as cuDNN fuses it: for t = 0 .. T-1
//   gates = gates_x[t] + h W_hh^T + b_hh;   i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of its
//   four H-wide blocks (PyTorch's order);   c = f c + i g;   h = o tanh(c)
// gates_x [T, B, 4H] is x W_ih^T + b_ih for every step (one GEMM before the loop); weight_hh [4H, H]
// shares its dtype X; bias_hh [4H] is X or f32; h0, c0 [B, H] share the state dtype S, which is X
// or f32 (f32 state with f16/bf16 GEMMs: what nn::LSTM does under autocast). Returns [T, B, 2H]
// in S: h_t and c_t side by side. Gates and state are computed in f32 (f64 for f64); under
// autocast the recurrent GEMM runs in the region's dtype with f32 accumulation. Backward walks
// the steps in reverse and computes dW_hh as one GEMM over all steps.
Tensor lstm_recurrence(const Tensor& gates_x, const Tensor& weight_hh, const Tensor& bias_hh, const Tensor& h0,
                       const Tensor& c0);

// ---- operators
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& x, double s) { return add(x, s); }
inline Tensor operator-(const Tensor& x, double s) { return sub(x, s); }
inline Tensor operator*(const Tensor& x, double s) { return mul(x, s); }
inline Tensor operator/(const Tensor& x, double s) { return div(x, s); }
inline Tensor operator+(double s, const Tensor& x) { return add(x, s); }
inline Tensor operator-(double s, const Tensor& x) { return rsub(s, x); }
inline Tensor operator*(double s, const Tensor& x) { return mul(x, s); }
inline Tensor operator/(double s, const Tensor& x) { return rdiv(s, x); }

}  // namespace mg
