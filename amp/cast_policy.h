// The ops of mixgrad and the cast lists of mixed-precision training, as data: one row per op, with
// the dtype it computes in under mg::Autocast (autograd/autocast.h) and why. This table is the only
// copy; the docs point here.
//
// Policies (Micikevicius et al. 2018, section 3.3 "arithmetic precision"; PyTorch's autocast lists):
//   LowerPrecision  f32 inputs are cast to the region's dtype (f16 or bf16): the GEMMs, whose
//                   products are exact in f32 and accumulate in f32, and where Tensor Cores pay off.
//   Float32         f16/bf16 inputs are cast to f32: ops whose results leave f16's range (exp), that
//                   sum many values (reductions, losses, norms), or that subtract nearly equal ones.
//   Promote         every input is cast to the widest input dtype: ops that combine an f32 tensor
//                   with an f16 one (a residual add), so nothing is rounded down silently.
//   Banned          refused with the reason: ops unsafe in f16 that have a safe form.
//   InputDtype      no cast; the op runs in its inputs' dtype.
// Tensors of dtype f64 or i32 are never cast, whatever the policy.
//
// An op is named by its Op, never by a string: the tape records it, autocast reads its row, and its
// errors print "mg::" and its name. Adding an op is one enumerator and one row here (a static_assert
// keeps the two in step). A user's own op has no row: it passes its policy to mg::autocast_inputs.
// This file is pure data: autograd/ reads it, and it includes nothing of mixgrad's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <fmt/format.h>

namespace mg {

enum class Op : std::uint8_t {
  // lower precision
  MatMul, Linear, LstmRecurrence, Conv2d,
  // f32
  Exp, Log, Pow, RDiv, Softmax, LogSoftmax, CrossEntropy, BinaryCrossEntropyWithLogits, MseLoss, Sum, Mean,
  LayerNorm, BatchNorm,
  LogSumExp, Var, Std,
  // promote
  Add, Sub, Mul, Div, Where, Cat, Stack,
  Maximum, Minimum,
  // banned
  BinaryCrossEntropy,
  // input dtype
  Neg, Sqrt, Abs, Clamp, Tanh, Sigmoid, Relu, Gelu, Silu, LeakyRelu, Max, Argmax, Min, Argmin, Embedding,
  MaxPool2d, AvgPool2d, Dropout, Cast, ToDevice, BroadcastTo, SumTo, Reshape, Permute, Transpose, Slice, Clone,
};

namespace amp {

enum class CastPolicy : std::uint8_t { LowerPrecision, Float32, Promote, Banned, InputDtype };

struct OpRow {
  Op op;
  const char* name;  // as the tape and the op observers name it; errors print "mg::" + name
  CastPolicy policy;
  std::string_view reason;
};

using enum CastPolicy;
inline constexpr std::array kOps{
    // lower precision: the matrix products
    OpRow{Op::MatMul, "matmul", LowerPrecision, "a GEMM: f16 products are exact in f32 and accumulate in f32 (Linear, bmm, LSTM and attention GEMMs)"},
    OpRow{Op::Linear, "linear", LowerPrecision, "x W^T + b, one GEMM with the bias in its epilogue: the bias is cast too, so the output stays low precision"},
    OpRow{Op::LstmRecurrence, "lstm_recurrence", LowerPrecision, "the recurrent GEMM h W_hh^T of every step; gates and state are f32 inside. Unlike PyTorch's LSTM (f16 out) it returns h and c in f32, the dtype of nn::LSTM's f32 state: a cell state carried over hundreds of steps stays f32 between steps, as cuDNN keeps it inside, and each f16 GEMM casts its own operand"},
    OpRow{Op::Conv2d, "conv2d", LowerPrecision, "a GEMM over image patches, like matmul (nn::Conv2d); the bias, and each pixel's window gradients, add up in f32 before the one rounding"},
    // f32: range, long sums, cancellation
    OpRow{Op::Exp, "exp", Float32, "exp(x) overflows f16 for x > 11.1"},
    OpRow{Op::Log, "log", Float32, "log near 0 needs the small inputs f16 flushes to zero"},
    OpRow{Op::Pow, "pow", Float32, "powers leave f16's range quickly"},
    OpRow{Op::RDiv, "rdiv", Float32, "s / x (a reciprocal) overflows f16 for |x| < s / 65504"},
    OpRow{Op::Softmax, "softmax", Float32, "a sum of exponentials over a row"},
    OpRow{Op::LogSoftmax, "log_softmax", Float32, "a sum of exponentials over a row"},
    OpRow{Op::CrossEntropy, "cross_entropy", Float32, "a log-sum-exp and a mean over the batch"},
    OpRow{Op::BinaryCrossEntropyWithLogits, "binary_cross_entropy_with_logits", Float32, "logs and a mean over the batch"},
    OpRow{Op::MseLoss, "mse_loss", Float32, "squares overflow f16 above 256 and the mean sums many terms"},
    OpRow{Op::Sum, "sum", Float32, "a long sum: f16 loses everything below 2^-11 of the running total"},
    OpRow{Op::Mean, "mean", Float32, "a long sum, then a division. Unlike PyTorch's autocast (mean is on none of its lists: f16 in, f32 sum inside, f16 out) it returns f32: a mean is mostly a loss or a statistic, and rounding it to f16 would cost 2^-11 of it before the f32 ops that use it"},
    OpRow{Op::LayerNorm, "layer_norm", Float32, "mean and variance of a row: a sum of squares with cancellation"},
    OpRow{Op::BatchNorm, "batch_norm", Float32, "batch statistics: sums of squares over the batch. Unlike PyTorch's autocast (batch_norm is on none of its lists: cuDNN takes and returns f16) it returns f32, as layer_norm does in both: it is made of f32 ops, not one fused kernel that could round its output, and the next GEMM casts it to f16 anyway"},
    OpRow{Op::LogSumExp, "logsumexp", Float32, "a sum of exponentials, as softmax's"},
    OpRow{Op::Var, "var", Float32, "a sum of squares after subtracting the mean: squares overflow f16 above 256, and cancellation"},
    OpRow{Op::Std, "std", Float32, "the square root of var, computed as var is"},
    // promote: combining tensors of both kinds
    OpRow{Op::Add, "add", Promote, "f32 + f16 (a residual connection) must not round the f32 side"},
    OpRow{Op::Sub, "sub", Promote, "as add"},
    OpRow{Op::Mul, "mul", Promote, "as add"},
    OpRow{Op::Div, "div", Promote, "as add"},
    OpRow{Op::Where, "where", Promote, "the two branches must share one dtype (the mask is never cast)"},
    OpRow{Op::Cat, "cat", Promote, "the pieces must share one dtype"},
    OpRow{Op::Stack, "stack", Promote, "the pieces must share one dtype"},
    OpRow{Op::Maximum, "maximum", Promote, "as add: picks a value of either input, so both must share one dtype"},
    OpRow{Op::Minimum, "minimum", Promote, "as maximum"},
    // banned: unsafe in f16, with a safe form
    OpRow{Op::BinaryCrossEntropy, "binary_cross_entropy", Banned, "log of probabilities near 0 or 1 is lost in f16; use mg::binary_cross_entropy_with_logits on the logits instead (stable, and computed in f32)"},
    // input dtype: safe in f16 (bounded, or exact), or moving data without arithmetic
    OpRow{Op::Neg, "neg", InputDtype, "exact in any dtype"},
    OpRow{Op::Sqrt, "sqrt", InputDtype, "its result has half its input's exponent: it cannot leave the range"},
    OpRow{Op::Abs, "abs", InputDtype, "exact in any dtype"},
    OpRow{Op::Clamp, "clamp", InputDtype, "selects values, computes none"},
    OpRow{Op::Tanh, "tanh", InputDtype, "bounded by 1, computed in f32 and rounded once"},
    OpRow{Op::Sigmoid, "sigmoid", InputDtype, "bounded by 1, computed in f32 and rounded once"},
    OpRow{Op::Relu, "relu", InputDtype, "selects values, computes none"},
    OpRow{Op::Gelu, "gelu", InputDtype, "close to x or to 0, computed in f32 and rounded once"},
    OpRow{Op::Silu, "silu", InputDtype, "close to x or to 0, computed in f32 and rounded once (as gelu)"},
    OpRow{Op::LeakyRelu, "leaky_relu", InputDtype, "x or a small multiple of it, computed in f32 and rounded once"},
    OpRow{Op::Max, "max", InputDtype, "selects a value, sums none"},
    OpRow{Op::Argmax, "argmax", InputDtype, "an index: no arithmetic on the values"},
    OpRow{Op::Min, "min", InputDtype, "selects a value, sums none"},
    OpRow{Op::Argmin, "argmin", InputDtype, "an index: no arithmetic on the values"},
    OpRow{Op::Embedding, "embedding", InputDtype, "a row lookup: the table's dtype is the output's"},
    OpRow{Op::MaxPool2d, "max_pool2d", InputDtype, "selects a value, sums none"},
    OpRow{Op::AvgPool2d, "avg_pool2d", InputDtype, "a mean of a few neighbours, accumulated in f32"},
    OpRow{Op::Dropout, "dropout", InputDtype, "zeroes or scales each value, computed in f32"},
    OpRow{Op::Cast, "cast", InputDtype, "it is the cast: autocast inserts it"},
    OpRow{Op::ToDevice, "to_device", InputDtype, "moves data, computes none"},
    OpRow{Op::BroadcastTo, "broadcast_to", InputDtype, "moves data, computes none"},
    OpRow{Op::SumTo, "sum_to", InputDtype, "broadcasting's backward: sums a few copies in f32"},
    OpRow{Op::Reshape, "reshape", InputDtype, "moves data, computes none"},
    OpRow{Op::Permute, "permute", InputDtype, "moves data, computes none"},
    OpRow{Op::Transpose, "transpose", InputDtype, "moves data, computes none (a permute)"},
    OpRow{Op::Slice, "slice", InputDtype, "moves data, computes none"},
    OpRow{Op::Clone, "clone", InputDtype, "moves data, computes none"},
};

// Row i describes the i-th enumerator, so a lookup is an index and no op can lack a row.
constexpr bool rows_in_enum_order() {
  for (std::size_t i = 0; i < kOps.size(); ++i) {
    if (static_cast<std::size_t>(kOps[i].op) != i) return false;
  }
  return true;
}
static_assert(rows_in_enum_order(), "amp::kOps: one row per mg::Op, in the enum's order");
static_assert(kOps.size() == static_cast<std::size_t>(Op::Clone) + 1, "amp::kOps: a row is missing");

constexpr const OpRow& row(Op op) { return kOps[static_cast<std::size_t>(op)]; }
constexpr CastPolicy policy_of(Op op) { return row(op).policy; }

std::string_view policy_name(CastPolicy policy);  // "lower_precision", "float32", ...

}  // namespace amp

// "matmul": the name the tape records and observers see.
constexpr const char* op_name(Op op) { return amp::row(op).name; }
// "mg::matmul": the function a user called, as every error names it.
const char* qualified_name(Op op);

}  // namespace mg

// fmt prints an Op as its function: fmt::format("{}: ...", Op::MatMul) is "mg::matmul: ...".
template <>
struct fmt::formatter<mg::Op> : fmt::formatter<std::string_view> {
  auto format(mg::Op op, format_context& context) const {
    return fmt::formatter<std::string_view>::format(mg::qualified_name(op), context);
  }
};
