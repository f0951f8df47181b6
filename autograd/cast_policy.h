// The ops of mixgrad and the cast lists of mixed-precision training, as data: one row per op, with
// the dtype it computes in under mg::Autocast (autograd/autocast.h) and why. These rows and those of
// the pointwise ops (MG_POINTWISE_OPS in kernels/pointwise.h, each beside its math) are the only
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
// errors print "mg::" and its name. The enum and the table are both made from the rows
// X(Op, name, policy, why), so adding an op is one row (a pointwise op's row sits in
// kernels/pointwise.h instead). A user's own op has no row: it passes its policy to
// mg::autocast_inputs. (Until issue 31 this table was amp/cast_policy.h, and its names lived in
// mg::amp; amp/cast_policy.h keeps those spellings as aliases.)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <fmt/format.h>

#include "kernels/pointwise.h"

// X(Op, name, policy, why): the ops that are not pointwise (kernels/pointwise.h has those).
#define MG_OPS(X) \
  /* lower precision: the matrix products */ \
  X(MatMul, matmul, LowerPrecision, \
    "a GEMM: f16 products are exact in f32 and accumulate in f32 (Linear, bmm, LSTM and attention GEMMs)") \
  X(Linear, linear, LowerPrecision, \
    "x W^T + b, one GEMM with the bias in its epilogue: the bias is cast too, so the output stays low precision") \
  X(LstmRecurrence, lstm_recurrence, LowerPrecision, \
    "the recurrent GEMM h W_hh^T of every step; gates and state are f32 inside. Unlike PyTorch's LSTM (f16 out) it returns h and c in f32, the dtype of nn::LSTM's f32 state: a cell state carried over hundreds of steps stays f32 between steps, as cuDNN keeps it inside, and each f16 GEMM casts its own operand") \
  X(ScaledDotProductAttention, scaled_dot_product_attention, LowerPrecision, \
    "two GEMMs, q k^T and P v; the fused kernel keeps the scores, their softmax and its sums in f32 inside and rounds the output once (the unfused path casts the scores to f32 for softmax, softmax's row)") \
  X(Conv2d, conv2d, LowerPrecision, \
    "a GEMM over image patches, like matmul (nn::Conv2d); the bias, and each pixel's window gradients, add up in f32 before the one rounding") \
  /* f32: range, long sums, cancellation */ \
  X(Pow, pow, Float32, "powers leave f16's range quickly") \
  X(RDiv, rdiv, Float32, "s / x (a reciprocal) overflows f16 for |x| < s / 65504") \
  X(Softmax, softmax, Float32, "a sum of exponentials over a row") \
  X(LogSoftmax, log_softmax, Float32, "a sum of exponentials over a row") \
  X(CrossEntropy, cross_entropy, Float32, "a log-sum-exp and a mean over the batch") \
  X(BinaryCrossEntropyWithLogits, binary_cross_entropy_with_logits, Float32, "logs and a mean over the batch") \
  X(MseLoss, mse_loss, Float32, "squares overflow f16 above 256 and the mean sums many terms") \
  X(Sum, sum, Float32, "a long sum: f16 loses everything below 2^-11 of the running total") \
  X(Mean, mean, Float32, \
    "a long sum, then a division. Unlike PyTorch's autocast (mean is on none of its lists: f16 in, f32 sum inside, f16 out) it returns f32: a mean is mostly a loss or a statistic, and rounding it to f16 would cost 2^-11 of it before the f32 ops that use it") \
  X(LayerNorm, layer_norm, Float32, "mean and variance of a row: a sum of squares with cancellation") \
  X(BatchNorm, batch_norm, Float32, \
    "batch statistics: sums of squares over the batch. Unlike PyTorch's autocast (batch_norm is on none of its lists: cuDNN takes and returns f16) it returns f32, as layer_norm does in both: it is made of f32 ops, not one fused kernel that could round its output, and the next GEMM casts it to f16 anyway") \
  X(LogSumExp, logsumexp, Float32, "a sum of exponentials, as softmax's") \
  X(Var, var, Float32, \
    "a sum of squares after subtracting the mean: squares overflow f16 above 256, and cancellation") \
  X(Std, std, Float32, "the square root of var, computed as var is") \
  /* promote: combining tensors of both kinds */ \
  X(Add, add, Promote, "f32 + f16 (a residual connection) must not round the f32 side") \
  X(Sub, sub, Promote, "as add") \
  X(Mul, mul, Promote, "as add") \
  X(Div, div, Promote, "as add") \
  X(Where, where, Promote, "the two branches must share one dtype (the mask is never cast)") \
  X(Cat, cat, Promote, "the pieces must share one dtype") \
  X(Stack, stack, Promote, "the pieces must share one dtype") \
  X(Maximum, maximum, Promote, "as add: picks a value of either input, so both must share one dtype") \
  X(Minimum, minimum, Promote, "as maximum") \
  /* banned: unsafe in f16, with a safe form */ \
  X(BinaryCrossEntropy, binary_cross_entropy, Banned, \
    "log of probabilities near 0 or 1 is lost in f16; use mg::binary_cross_entropy_with_logits on the logits instead (stable, and computed in f32)") \
  /* input dtype: safe in f16 (bounded, or exact), or moving data without arithmetic */ \
  X(Max, max, InputDtype, "selects a value, sums none") \
  X(Argmax, argmax, InputDtype, "an index: no arithmetic on the values") \
  X(Min, min, InputDtype, "selects a value, sums none") \
  X(Argmin, argmin, InputDtype, "an index: no arithmetic on the values") \
  X(Embedding, embedding, InputDtype, "a row lookup: the table's dtype is the output's") \
  X(MaxPool2d, max_pool2d, InputDtype, "selects a value, sums none") \
  X(AvgPool2d, avg_pool2d, InputDtype, "a mean of a few neighbours, accumulated in f32") \
  X(Dropout, dropout, InputDtype, "zeroes or scales each value, computed in f32") \
  X(Cast, cast, InputDtype, "it is the cast: autocast inserts it") \
  X(ToDevice, to_device, InputDtype, "moves data, computes none") \
  X(BroadcastTo, broadcast_to, InputDtype, "moves data, computes none") \
  X(SumTo, sum_to, InputDtype, "broadcasting's backward: sums a few copies in f32") \
  X(Reshape, reshape, InputDtype, "moves data, computes none") \
  X(Permute, permute, InputDtype, "moves data, computes none") \
  X(Transpose, transpose, InputDtype, "moves data, computes none (a permute)") \
  X(Slice, slice, InputDtype, "moves data, computes none") \
  X(Clone, clone, InputDtype, "moves data, computes none")

namespace mg {

#define MG_OP_ENUMERATOR(enumerator, name, policy, why) enumerator,
enum class Op : std::uint8_t {
  MG_OPS(MG_OP_ENUMERATOR) MG_POINTWISE_OPS(MG_OP_ENUMERATOR) MG_POINTWISE_OPS_WITH_PARAMETERS(MG_OP_ENUMERATOR)
};
#undef MG_OP_ENUMERATOR

enum class CastPolicy : std::uint8_t { LowerPrecision, Float32, Promote, Banned, InputDtype };

struct OpRow {
  Op op;
  const char* name;  // as the tape and the op observers name it; errors print "mg::" + name
  CastPolicy policy;
  std::string_view reason;
};

// Row i describes the i-th enumerator, so a lookup is an index and no op can lack a row.
#define MG_OP_ROW(enumerator, name, policy, why) OpRow{Op::enumerator, #name, CastPolicy::policy, why},
inline constexpr std::array kOps{MG_OPS(MG_OP_ROW) MG_POINTWISE_OPS(MG_OP_ROW)
                                     MG_POINTWISE_OPS_WITH_PARAMETERS(MG_OP_ROW)};
#undef MG_OP_ROW

constexpr const OpRow& op_row(Op op) { return kOps[static_cast<std::size_t>(op)]; }
constexpr CastPolicy cast_policy(Op op) { return op_row(op).policy; }

std::string_view policy_name(CastPolicy policy);  // "lower_precision", "float32", ...

// "matmul": the name the tape records and observers see.
constexpr const char* op_name(Op op) { return op_row(op).name; }
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
