// FP8 scaling recipes, the FP8 region and mg::fp8_linear (autograd/fp8.h). Tests: build/tests/test_fp8_scaling,
// build/tests/test_fp8_linear.
#include "autograd/fp8.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/factory.h"

namespace mg {

namespace {

constexpr const char* kOp = "mg::fp8_linear";

// Which blocks share a scale, for an operand whose GEMM reduces along its rows or its columns.
kernels::Fp8Blocks blocks_for(Fp8Role role, bool reduce_rows, Fp8Scaling scaling) {
  switch (scaling) {
    case Fp8Scaling::Current:
    case Fp8Scaling::Delayed:
      return {0, 0};
    case Fp8Scaling::Block:  // DeepSeek-V3: 128 x 128 weights, 1 x 128 (or 128 x 1) activations and gradients
      if (role == Fp8Role::Weight) return {128, 128};
      return reduce_rows ? kernels::Fp8Blocks{128, 1} : kernels::Fp8Blocks{1, 128};
    case Fp8Scaling::Mx:  // OCP MX: 32 consecutive elements along the reduction
      return reduce_rows ? kernels::Fp8Blocks{32, 1} : kernels::Fp8Blocks{1, 32};
  }
  return {0, 0};
}

DType format_for(Fp8Role role, const Fp8Options& options) {
  return role == Fp8Role::GradOutput ? options.backward_format : options.forward_format;
}

// The rule a recipe's scales follow (kernels/fp8_scale.h), for tensors of `format`.
kernels::Fp8ScaleRule scale_rule(DType format, const Fp8Options& options) {
  using Kind = kernels::Fp8ScaleRule::Kind;
  const Kind kind = options.scaling == Fp8Scaling::Mx      ? Kind::Mx
                    : options.scaling == Fp8Scaling::Block ? Kind::Block
                                                           : Kind::PerTensor;
  return {.kind = kind,
          .format = format,
          .margin = options.margin,
          .power_of_two = options.power_of_two,
          .mx_floor = options.mx_rule == MxScaleRule::Floor};
}

void check_history(const Fp8History* history) {
  MG_CHECK(history != nullptr,
           "{}: delayed scaling keeps an amax history per layer; pass the layer's Fp8History (nn::Linear::enable_fp8 "
           "makes it, and amp::Recipe::prepare calls that for every Linear)",
           kOp);
  MG_CHECK(history->amax_history.defined() && history->amax_history.dtype() == DType::F32 &&
               history->amax_history.dim() == 2 && history->amax_history.size(0) == kFp8Roles &&
               history->amax_history.size(1) >= 1 && history->scale.defined() && history->scale.dtype() == DType::F32 &&
               history->scale.shape() == Shape{kFp8Roles} && history->amax_history.device() == history->scale.device(),
           "{}: the Fp8History must be f32 amax_history [3, len >= 1] and scale [3] on one device, got {} and {}", kOp,
           history->amax_history.defined()
               ? fmt::format("{} {}", history->amax_history.dtype(), history->amax_history.shape())
               : std::string("undefined"),
           history->scale.defined() ? fmt::format("{} {}", history->scale.dtype(), history->scale.shape())
                                    : std::string("undefined"));
}

thread_local const Fp8Options* current_region = nullptr;

// An Fp8Tensor held for backward: Saved, so that its bytes count as saved activations (amp/memory_report.h)
// and a change to them before backward is caught.
struct SavedFp8 {
  Saved codes, scale_inv;
  kernels::Fp8Blocks blocks;
  explicit SavedFp8(const kernels::Fp8Tensor& q) : codes(q.codes), scale_inv(q.scale_inv), blocks(q.blocks) {}
  kernels::Fp8Tensor get() const { return {codes.get(), scale_inv.get(), blocks}; }
};

}  // namespace

std::string Fp8Options::describe() const {
  static constexpr const char* kNames[] = {"current", "delayed", "block", "mx"};
  std::string text = fmt::format("{} ({} forward, {} backward", kNames[static_cast<int>(scaling)],
                                 forward_format == DType::E4M3 ? "E4M3" : "E5M2",
                                 backward_format == DType::E4M3 ? "E4M3" : "E5M2");
  if (scaling == Fp8Scaling::Delayed)
    text += fmt::format(", history {}, {}", amax_history_len,
                        amax_algorithm == AmaxAlgorithm::Max ? "max" : "most recent");
  if (scaling == Fp8Scaling::Mx) text += mx_rule == MxScaleRule::Floor ? ", spec's floor" : ", exponent rounded up";
  if (margin != 0) text += fmt::format(", margin {}", margin);
  if (power_of_two) text += ", power-of-two scales";
  if (accumulator.limited)
    text += fmt::format(", {}-bit accumulator promoted every {}", accumulator.mantissa_bits, accumulator.promote_every);
  return text + ")";
}

Fp8History Fp8History::fresh(int history_len) {
  MG_CHECK(history_len >= 1, "mg::Fp8History: the amax history needs at least one step, got {}", history_len);
  return {.amax_history = zeros({kFp8Roles, history_len}), .scale = ones({kFp8Roles})};
}

float fp8_scale_for(float amax, DType format, const Fp8Options& options, float previous) {
  return kernels::fp8_scale(amax, scale_rule(format, options), previous);
}

kernels::Fp8Quantized fp8_quantize_copies(const Tensor& x, Fp8Role role, bool reduce_rows, const Fp8Options& options,
                                          Fp8History* history, kernels::Fp8Copies copies) {
  const kernels::Fp8Blocks blocks = blocks_for(role, reduce_rows, options.scaling);
  const kernels::Fp8ScaleRule rule = scale_rule(format_for(role, options), options);
  // The scales are made where x is (kernels::fp8_quantize_fitted): a GPU's amax never goes to the host.
  if (options.scaling != Fp8Scaling::Delayed) return kernels::fp8_quantize_fitted(x, blocks, rule, copies);
  check_history(history);
  const int r = static_cast<int>(role);
  const bool most_recent = options.amax_algorithm == AmaxAlgorithm::MostRecent;
  if (history->scale.device() == x.device())
    return kernels::fp8_quantize_delayed(x, history->amax_history, history->scale, r, rule, most_recent, copies);
  // A history on another device than x (a CPU history, x on a GPU): the bookkeeping runs on a copy on
  // x's device, written back after (the copy back waits for the GPU).
  Tensor amax_history = history->amax_history.to(x.device()), scale = history->scale.to(x.device());
  kernels::Fp8Quantized q = kernels::fp8_quantize_delayed(x, amax_history, scale, r, rule, most_recent, copies);
  NoGradGuard no_grad;
  history->amax_history.copy_(amax_history);
  history->scale.copy_(scale);
  return q;
}

kernels::Fp8Tensor fp8_quantize_operand(const Tensor& x, Fp8Role role, bool reduce_rows, const Fp8Options& options,
                                        Fp8History* history) {
  return fp8_quantize_copies(x, role, reduce_rows, options, history, kernels::Fp8Copies::RowWise).rowwise;
}

const Fp8Options* detail::exchange_fp8_region(const Fp8Options* options) {
  return std::exchange(current_region, options);
}

const Fp8Options* fp8_autocast_options() { return current_region; }

// Forward: y = x W^T + b, one FP8 GEMM with the bias in its epilogue, rounded once into bf16.
// On a GPU (sm_89 or later) every tensor is on x's device, the history on the CPU or there too; the
// scales are made on the device (fp8_quantize_copies), so a step waits for the host only when the
// history is on another device. Backward, with x viewed as [rows, in] and dy as [rows, out]:
//   dx = dy W        dy quantised along its columns (out), W along its rows (out): W^T's codes
//   dW = dy^T x      dy and x quantised along their rows (the batch): dy^T's and x^T's codes
//   db = dy summed over the rows, in f32
// Every GEMM reads both operands K-major (transpose_b, never transpose_a; kernels/fp8.h says why): an
// operand reduced along its rows is a column-wise copy, written by the quantisation itself.
Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Fp8Options& options,
                  Fp8History* history) {
  MG_CHECK(x.defined() && weight.defined(), "{}: the input or the weight is undefined", kOp);
  MG_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
           "{}: needs x [..., in] and weight [out, in]; got {} and {}", kOp, x.shape(), weight.shape());
  MG_CHECK(!bias.defined() || bias.shape() == Shape{weight.size(0)}, "{}: the bias must be [out] = [{}], got {}", kOp,
           weight.size(0), bias.shape());
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  for (const Tensor& t : inputs) {
    MG_CHECK(t.dtype() == DType::F32 || is_low_precision(t.dtype()),
             "{}: x, weight and bias must be f32, f16 or bf16 (FP8 codes are made inside), got {}", kOp, t.dtype());
    MG_CHECK(t.device() == x.device(), "{}: x, weight and bias must be on one device; x is on {}, got a tensor on {}",
             kOp, x.device(), t.device());
  }
  if (options.scaling == Fp8Scaling::Delayed) check_history(history);

  const std::int64_t out = weight.size(0), in = weight.size(1), rows = x.numel() / std::max<std::int64_t>(in, 1);
  const bool per_tensor = options.scaling == Fp8Scaling::Current || options.scaling == Fp8Scaling::Delayed;
  // Per-tensor scales: one quantisation of x and W serves both passes, the forward reading the
  // row-wise codes and the backward the column-wise ones (the only ones saved: 1 byte an element, as
  // the memory report counts them). Block and MX: the backward quantises again along its own
  // reduction, from the values saved here.
  const kernels::Fp8Copies forward_copies = per_tensor ? kernels::Fp8Copies::Both : kernels::Fp8Copies::RowWise;
  Tensor y;
  kernels::Fp8Quantized xq, wq;
  Tensor x2;
  {
    NoGradGuard no_grad;  // the reshapes are views, not steps of the tape: record() below adds the one node
    x2 = reshape(x, {rows, in});
    xq = fp8_quantize_copies(x2, Fp8Role::Input, false, options, history, forward_copies);
    wq = fp8_quantize_copies(weight, Fp8Role::Weight, false, options, history, forward_copies);
    y = Tensor::empty({rows, out}, {.dtype = DType::BF16, .device = x.device()});
    kernels::fp8_gemm(xq.rowwise, wq.rowwise, y, {.m = rows, .n = out, .k = in, .transpose_b = true},
                      options.accumulator, {.bias = bias});
    Shape y_shape = x.shape();
    y_shape.back() = out;
    y = reshape(y, y_shape);
  }
  std::optional<SavedFp8> saved_xt, saved_wt;  // per tensor: x^T's and W^T's codes
  std::optional<Saved> saved_x, saved_w;
  if (per_tensor) {
    saved_xt.emplace(xq.columnwise);
    saved_wt.emplace(wq.columnwise);
  } else {
    saved_x.emplace(x2);
    saved_w.emplace(weight);
  }
  const DType x_dtype = x.dtype(), w_dtype = weight.dtype(), b_dtype = bias.defined() ? bias.dtype() : DType::F32;
  const Shape x_shape = x.shape();
  record(kOp, inputs, y,
         [saved_xt, saved_wt, saved_x, saved_w, options, history, rows, in, out, x_dtype, w_dtype, b_dtype, x_shape,
          per_tensor](const Tensor& g, const auto& needs) {
           using kernels::Fp8Copies;
           const Tensor dy = reshape(g, {rows, out});
           Grads grads(needs.size());
           // dy [rows, out] and, for dW, dy^T [out, rows]: one quantisation with per-tensor scales, two
           // (along out, then along the rows) with blocks.
           const kernels::Fp8Quantized dyq = fp8_quantize_copies(dy, Fp8Role::GradOutput, false, options, history,
                                                                 per_tensor ? Fp8Copies::Both : Fp8Copies::RowWise);
           const kernels::Fp8Tensor dy_t = per_tensor ? dyq.columnwise
                                                      : fp8_quantize_copies(dy, Fp8Role::GradOutput, true, options,
                                                                            history, Fp8Copies::ColumnWise)
                                                            .columnwise;
           if (needs[0]) {  // dx [rows, in] = dy [rows, out] . (W^T [in, out])^T
             const kernels::Fp8Tensor w_t = per_tensor ? saved_wt->get()
                                                       : fp8_quantize_copies(saved_w->get(), Fp8Role::Weight, true,
                                                                             options, nullptr, Fp8Copies::ColumnWise)
                                                             .columnwise;
             Tensor dx = Tensor::empty({rows, in}, {.dtype = x_dtype, .device = g.device()});
             kernels::fp8_gemm(dyq.rowwise, w_t, dx, {.m = rows, .n = in, .k = out, .transpose_b = true},
                               options.accumulator);
             grads[0] = reshape(dx, x_shape);
           }
           if (needs[1]) {  // dW [out, in] = dy^T [out, rows] . (x^T [in, rows])^T
             const kernels::Fp8Tensor x_t = per_tensor ? saved_xt->get()
                                                       : fp8_quantize_copies(saved_x->get(), Fp8Role::Input, true,
                                                                             options, nullptr, Fp8Copies::ColumnWise)
                                                             .columnwise;
             Tensor dw = Tensor::empty({out, in}, {.dtype = w_dtype, .device = g.device()});
             kernels::fp8_gemm(dy_t, x_t, dw, {.m = out, .n = in, .k = rows, .transpose_b = true}, options.accumulator);
             grads[1] = dw;
           }
           if (needs.size() == 3 && needs[2]) grads[2] = sum_to(dy.to(DType::F32), {out}).to(b_dtype);
           return grads;
         });
  return y;
}

}  // namespace mg
