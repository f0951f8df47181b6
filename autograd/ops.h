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
#include <initializer_list>
#include <optional>
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
// The larger (smaller) of a and b, elementwise with broadcasting: NaN where either is NaN, and a on
// ties. Backward as PyTorch's: the input that was picked gets g, and on a tie each gets g / 2 (where
// either is NaN, both get g). Gradients in the inputs' dtype, summed over broadcast dims in f32.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// mask ? a : b, elementwise with broadcasting; the mask is i32 or floating (any dtype but f64 unless
// the values are f64), non-zero selects a. The mask gets no gradient and autocast never casts it.
Tensor where(const Tensor& mask, const Tensor& a, const Tensor& b);

// ---- elementwise, one tensor (autograd/unary.cpp)
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor abs(const Tensor& x);  // gradient sign(x), 0 at 0
Tensor clamp(const Tensor& x, double min, double max);  // gradient passes where min <= x <= max
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);  // gradient 0 at 0
Tensor gelu(const Tensor& x);  // exact (erf) form
Tensor silu(const Tensor& x);  // x * sigmoid(x) ("swish"), computed in f32 and rounded once
// x where x > 0, negative_slope * x elsewhere; the gradient is negative_slope at 0, as PyTorch's.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);

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
// PyTorch's torch.matmul:
//   [m, k] x [k, n] -> [m, n];  [batch, m, k] x [batch, k, n] -> [batch, m, n];
//   [..., m, k] x [k, n] -> [..., m, n] (a shared right operand: one GEMM over all rows, no copies);
//   [k] x [k] -> [] (a dot product), [m, k] x [k] -> [m], [k] x [k, n] -> [n]: a 1-D left operand is
//   a row [1, k] and a 1-D right one a column [k, 1], and that dim is dropped from the result;
//   otherwise the dims before the last two are batch dims, broadcast as NumPy does: [1, m, k] x
//   [b, k, n] -> [b, m, n], [b, h, m, k] x [b, h, k, n] -> [b, h, m, n]. An operand repeated along a
//   broadcast batch dim is copied that many times (broadcast_to), and its gradient summed back in f32.
// Transposes are layout flags of the GEMM for the last two dims, never copies; backward uses the
// same flags; a 1-D operand takes no transpose flag.
Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions options = {});
// x W^T + b, PyTorch's layout: x [..., in] (any number of leading dims, each row multiplied alike;
// a 1-D x [in] gives [out]), weight [out, in], bias [out] or undefined; y is x's shape with the
// last dim out. One op for autocast (lower precision, bias included), so a layer's output, and what the
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
  std::int64_t stride = 0;  // 0: the kernel size (non-overlapping windows)
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
  bool training = true;  // batch statistics (and running-statistics updates) or the running ones
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
Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims);  // a copy: out dim d = x dim dims[d]
Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim);
Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim);  // a new dim of size tensors.size()
// Elements [begin, end) along dim; begin/end may be negative (from the end). A view along dim 0.
Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t begin, std::int64_t end);
Tensor clone(const Tensor& x);
Tensor broadcast_to(const Tensor& x, const Shape& shape);  // repeats size-1 and missing leading dims
Tensor sum_to(const Tensor& x, const Shape& shape);  // the reverse: sums the repeated dims away

// ---- reductions (autograd/reduce.cpp); dims may be negative
Tensor sum(const Tensor& x);  // of everything: a scalar (shape {})
Tensor sum(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, std::int64_t dim, bool keepdim = false);
// max over everything: its gradient is shared evenly by every element equal to the max (by every NaN
// when the max is NaN), g / count rounded once, as PyTorch's x.max(). Along a dim it goes to the
// first maximum of each line (NaN counting as the largest), as PyTorch's x.max(dim).
Tensor max(const Tensor& x);
Tensor max(const Tensor& x, std::int64_t dim, bool keepdim = false);
// Position of the first maximum (i32; not differentiable). argmax(x) indexes the flattened tensor.
Tensor argmax(const Tensor& x);
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);
// torch.max(x, dim): the values of max(x, dim, keepdim), with the same gradient (to the first
// maximum of each line, NaN counting as the largest), and their positions along dim (i32, those of
// argmax). auto [values, indices] = max_with_indices(x, 1);
struct ValuesIndices {
  Tensor values;
  Tensor indices;
};
ValuesIndices max_with_indices(const Tensor& x, std::int64_t dim, bool keepdim = false);

// ---- reductions built from the ones above (autograd/reduce_dims.cpp); only std has a backward of its own
// The mirror images of max and argmax: min(x) = -max(-x), so ties and NaN behave as they do there.
Tensor min(const Tensor& x);
Tensor min(const Tensor& x, std::int64_t dim, bool keepdim = false);
ValuesIndices min_with_indices(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x);
Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim = false);
// Over several dims: `dims` in any order, each at most once, negative allowed; an empty list means
// every dim (PyTorch's dim=[]). One accumulation in f32 (f64 for f64) and one rounding, as along one
// dim: the reduced dims are brought together (a reshape where they are adjacent, else a permute, a
// copy) and reduced as one. A braced list always picks these (sum(x, {}) is sum over every dim, never
// sum(x, 0)): the initializer_list forms forward here.
Tensor sum(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
inline Tensor sum(const Tensor& x, std::initializer_list<std::int64_t> dims, bool keepdim = false) {
  return sum(x, std::vector<std::int64_t>(dims), keepdim);
}
inline Tensor mean(const Tensor& x, std::initializer_list<std::int64_t> dims, bool keepdim = false) {
  return mean(x, std::vector<std::int64_t>(dims), keepdim);
}
// log(sum(exp(x))) over dims (empty: every dim), shifted by the max so that nothing overflows: a
// line of -inf gives -inf, one holding +inf gives +inf, one holding NaN gives NaN. Math in f32 (f64
// for f64), the result rounded once into x's dtype; a reduction over no elements gives -inf. The
// gradient is softmax(x) along dims (NaN on a line that is all -inf or holds +inf, as PyTorch's).
Tensor logsumexp(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
struct VarianceOptions {
  // Divides the sum of squared deviations by max(0, N - correction), N the count of reduced elements:
  // 1 is the unbiased (sample) variance, 0 the population one. N - correction <= 0 gives inf (NaN
  // where every deviation is 0), as PyTorch does.
  double correction = 1.0;
  bool keepdim = false;
};
// The variance over dims (empty: every dim; at least one element). Math in f32 (f64 for f64) from
// the deviations from the mean (no sum-of-squares cancellation), rounded once into x's dtype; its
// gradient 2 (x - mean) / (N - correction) g comes through the ops it is made of.
Tensor var(const Tensor& x, const std::vector<std::int64_t>& dims = {}, VarianceOptions options = {});
// sqrt(var(x, dims, options)), rounded once. Backward (its own): g (x - mean) / ((N - correction) std),
// and 0 where std is 0 (a constant line), as PyTorch's, instead of 0 / 0. Call it mg::std: after
// `using namespace mg`, a bare std(...) is ambiguous with namespace std (as torch::std is).
Tensor std(const Tensor& x, const std::vector<std::int64_t>& dims = {}, VarianceOptions options = {});

// ---- softmax and losses (autograd/softmax.cpp, autograd/loss.cpp)
Tensor softmax(const Tensor& x, std::int64_t dim);
Tensor log_softmax(const Tensor& x, std::int64_t dim);

// ---- attention (autograd/attention.cpp)
struct AttentionOptions {
  bool causal = false;  // query t sees keys s <= t only (PyTorch's is_causal: the top-left triangle)
  double dropout = 0.0;  // in [0, 1): each weight dropped with this probability (pass 0 to evaluate)
  std::optional<double> scale = std::nullopt;  // multiplies q k^T; unset: 1 / sqrt(head_dim)
  bool fused = true;  // false: the unfused ops (matmul, mul, where, softmax, dropout, matmul), the reference
  Generator* generator = nullptr;  // dropout's; null: default_generator()
};
// softmax(scale q k^T) v, with q [..., q_len, head_dim], k [..., kv_len, head_dim], v [..., kv_len,
// value_dim] (the same leading dims: [batch * heads] or [batch, heads]), out [..., q_len, value_dim]
// in q's dtype. One op on the tape (PyTorch's F.scaled_dot_product_attention): on the CPU one fused
// kernel each way, FlashAttention-2's, that never makes the [q_len, kv_len] scores (their softmax is
// f32 inside, the output rounded once; it saves q, k, v, the output and a log-sum-exp per row);
// on a GPU, for now, the unfused ops. Dropout drops the weights mg::dropout would drop from the same
// generator position, so the fused and unfused ops agree with it too. Autocast: lower precision.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, AttentionOptions options = {});

enum class Reduction { Mean, Sum, None };
struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;  // Mean divides by the rows whose label is not ignored
  std::int64_t ignore_index = -100;  // rows with this label contribute nothing
  // In [0, 1]: the target is (1 - label_smoothing) on the label plus label_smoothing / classes on
  // every class, so a row's loss is (1 - s) (-log p[label]) + s mean over classes of (-log p).
  double label_smoothing = 0.0;
};
// logits [rows, classes] (any floating dtype) and labels i32 [rows] in [0, classes). The loss has
// the logits' dtype: a scalar, or [rows] for Reduction::None. All math in f32 (f64 for f64). Ignored
// rows get a zero gradient; a mean over zero counted rows is NaN, as in PyTorch. With label
// smoothing the loss is built from recorded f32 ops around the fused one (no backward of its own):
// dlogits = softmax - (1 - s) onehot - s / classes, times the row's weight.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, CrossEntropyOptions options = {});
// mean (or sum) of (prediction - target)^2; shapes must match exactly.
Tensor mse_loss(const Tensor& prediction, const Tensor& target, Reduction reduction = Reduction::Mean);
// Binary cross entropy on probabilities p in [0, 1] with targets t of the same shape and dtype:
// -(t log p + (1 - t) log(1 - p)), each log clamped at -100 as in PyTorch; math in f32 (f64 for f64),
// the result in p's dtype. dp = (p - t) / max(p (1 - p), 1e-12); targets get no gradient.
// Banned under mg::Autocast, like in PyTorch: the logits form below is the safe one.
Tensor binary_cross_entropy(const Tensor& probabilities, const Tensor& targets, Reduction reduction = Reduction::Mean);
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
// The weight's gradient sums the rows of every occurrence (in f32 for f16/bf16 weights), in the
// weight's dtype. The row padding_idx (negative: from the end, as PyTorch's), if given, is looked up
// like any other but gets no gradient: its gradient row is 0.
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<std::int64_t> padding_idx = std::nullopt);

// ---- the Hadamard transform (autograd/hadamard.cpp)
// Each run of `block` consecutive elements v along the last dimension becomes v M, with
//   M = diag(s) H / sqrt(block),  H the Sylvester Hadamard matrix (entries +-1, H H = block I),
// s the signs: all +1 (deterministic), or +-1 drawn from `seed` (random; Philox, the same on every
// device). M is orthogonal (M M^T = I): norms are kept, and the inverse transform is M^T (inverse =
// true); with all signs +1, M is symmetric and the transform is its own inverse. FP4 training applies
// it to both operands of the weight-gradient GEMM, whose product it leaves unchanged ((A M)(B M)^T =
// A B^T) while spreading an outlier over its block (autograd/fp4.cpp). block: a power of two, 1 to 256,
// dividing x's last dimension (pad first: mg::cat with zeros). Computed in f32 (autocast off) and
// returned in x's dtype; differentiable (its backward is the inverse transform).
struct HadamardOptions {
  std::int64_t block = 16;
  bool random_signs = false;
  std::uint64_t seed = 0;
  bool inverse = false;
};
Tensor hadamard(const Tensor& x, const HadamardOptions& options = {});
// M itself (or M^T for inverse), f32 [block, block] on the CPU.
Tensor hadamard_matrix(const HadamardOptions& options = {});

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
