#include "amp/cast_policy.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <shared_mutex>

namespace mg::amp {

namespace {

using enum CastPolicy;

// The built-in table: the whole policy on one screen; layers only use the names.
std::map<std::string, PolicyEntry, std::less<>> builtin_table() {
  return {
      // lower precision: the matrix products
      {"matmul", {LowerPrecision, "a GEMM: f16 products are exact in f32 and accumulate in f32 (Linear, bmm, LSTM and attention GEMMs)"}},
      {"linear", {LowerPrecision, "matmul plus bias: the bias is cast too, so the output stays low precision"}},
      {"lstm_recurrence", {LowerPrecision, "the recurrent GEMM h W_hh^T of every step; gates and state are f32 inside"}},
      {"conv2d", {LowerPrecision, "a GEMM over image patches, like matmul (nn::Conv2d)"}},
      // f32: range, long sums, cancellation
      {"exp", {Float32, "exp(x) overflows f16 for x > 11.1"}},
      {"log", {Float32, "log near 0 needs the small inputs f16 flushes to zero"}},
      {"pow", {Float32, "powers leave f16's range quickly"}},
      {"rdiv", {Float32, "s / x (a reciprocal) overflows f16 for |x| < s / 65504"}},
      {"softmax", {Float32, "a sum of exponentials over a row"}},
      {"log_softmax", {Float32, "a sum of exponentials over a row"}},
      {"cross_entropy", {Float32, "a log-sum-exp and a mean over the batch"}},
      {"binary_cross_entropy_with_logits", {Float32, "logs and a mean over the batch"}},
      {"mse_loss", {Float32, "squares overflow f16 above 256 and the mean sums many terms"}},
      {"sum", {Float32, "a long sum: f16 loses everything below 2^-11 of the running total"}},
      {"mean", {Float32, "a long sum, then a division"}},
      {"norm", {Float32, "a sum of squares, which overflows f16 above 256"}},
      {"layer_norm", {Float32, "mean and variance of a row: a sum of squares with cancellation"}},
      {"batch_norm", {Float32, "batch statistics: sums of squares over the batch"}},
      // promote: combining tensors of both kinds
      {"add", {Promote, "f32 + f16 (a residual connection) must not round the f32 side"}},
      {"sub", {Promote, "as add"}},
      {"mul", {Promote, "as add"}},
      {"div", {Promote, "as add"}},
      {"where", {Promote, "the two branches must share one dtype"}},
      {"cat", {Promote, "the pieces must share one dtype"}},
      {"stack", {Promote, "the pieces must share one dtype"}},
      // banned: unsafe in f16, with a safe form
      {"binary_cross_entropy", {Banned, "log of probabilities near 0 or 1 is lost in f16; use mg::binary_cross_entropy_with_logits on the logits instead (stable, and computed in f32)"}},
  };
}

std::shared_mutex table_mutex;
std::map<std::string, PolicyEntry, std::less<>> table = builtin_table();

}  // namespace

std::string_view policy_name(CastPolicy policy) {
  switch (policy) {
    case LowerPrecision: return "lower_precision";
    case Float32: return "float32";
    case Promote: return "promote";
    case Banned: return "banned";
    case InputDtype: return "input_dtype";
  }
  return "unknown";
}

PolicyEntry policy(std::string_view op) {
  std::shared_lock lock(table_mutex);
  auto found = table.find(op);
  if (found == table.end()) return {InputDtype, "not listed: runs in its inputs' dtype"};
  return found->second;
}

CastPolicy policy_of(std::string_view op) {
  std::shared_lock lock(table_mutex);
  auto found = table.find(op);
  return found == table.end() ? InputDtype : found->second.policy;
}

void set_policy(const std::string& op, CastPolicy policy, std::string reason) {
  std::unique_lock lock(table_mutex);
  table[op] = {policy, std::move(reason)};
}

void reset_policies() {
  std::unique_lock lock(table_mutex);
  table = builtin_table();
}

std::vector<std::pair<std::string, PolicyEntry>> policy_table() {
  std::shared_lock lock(table_mutex);
  return {table.begin(), table.end()};
}

}  // namespace mg::amp
