// FP8 scaling recipes, the FP8 region and mg::fp8_linear (autograd/fp8.h). Tests: build/tests/test_fp8_scaling,
// build/tests/test_fp8_linear.
#include "autograd/fp8.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "autograd/fp4.h"
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
    case Fp8Scaling::Nvfp4:
    case Fp8Scaling::Mxfp4:  // autograd/fp4.cpp's, never asked for here
      break;
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

namespace {

// The FP4 recipes' line: "NVFP4 (E4M3 scales per 16 and one f32 per tensor, 16x16 weight blocks, ...)".
std::string describe_fp4(const Fp8Options& o) {
  static constexpr const char* kHadamard[] = {"random Hadamard", "deterministic Hadamard", "no Hadamard"};
  std::string text = o.scaling == Fp8Scaling::Nvfp4
                         ? fmt::format("NVFP4 (E4M3 scales per 16 and one f32 per tensor, {} weight blocks",
                                       o.weight_blocks_2d ? "16x16" : "1x16")
                         : std::string("MXFP4 (E8M0 scales per 32");
  text += fmt::format(", {} on dW, {} gradients", kHadamard[static_cast<int>(o.hadamard)],
                      o.stochastic_gradients ? "stochastically rounded" : "nearest-rounded");
  return text + fmt::format(", the last {} Linear layer(s) in bf16, seed {})", o.bf16_last_layers, o.seed);
}

}  // namespace

std::string Fp8Options::describe() const {
  if (is_fp4(scaling)) return describe_fp4(*this);
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
  if (bf16_last_layers > 0) text += fmt::format(", the last {} Linear layer(s) in bf16", bf16_last_layers);
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
  MG_CHECK(!is_fp4(options.scaling),
           "mg::fp8_quantize_copies: the options' scaling is FP4's; FP4 operands are mg::fp4_quantize_operand's "
           "(autograd/fp4.h)");
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

namespace {

// An operand of one of a Linear's GEMMs in the recipe's format: FP8 codes and scales, or FP4's
// (autograd/fp4.h). Every GEMM reads both operands K-major.
struct Operand {
  kernels::Fp8Tensor fp8 = {};
  kernels::Fp4Tensor fp4 = {};
};

// The copy of x that a GEMM reducing it along its rows (reduce_rows: x^T's codes) or columns reads.
Operand quantize(const Tensor& x, Fp8Role role, bool reduce_rows, const Fp8Options& options, Fp8History* history,
                 const Fp4Stream& stream) {
  if (is_fp4(options.scaling)) return {.fp4 = fp4_quantize_operand(x, role, reduce_rows, options, stream)};
  const kernels::Fp8Quantized q = fp8_quantize_copies(x, role, reduce_rows, options, history,
                                                      reduce_rows ? kernels::Fp8Copies::ColumnWise
                                                                  : kernels::Fp8Copies::RowWise);
  return {.fp8 = reduce_rows ? q.columnwise : q.rowwise};
}

// c [m, n] = a [m, k] . b [n, k]^T (+ bias), rounded once into `out`.
Tensor gemm(const Operand& a, const Operand& b, std::int64_t m, std::int64_t n, DType out, const Fp8Options& options,
            const Tensor& bias = {}) {
  if (is_fp4(options.scaling)) return fp4_matmul(a.fp4, b.fp4, out, bias);
  Tensor c = Tensor::empty({m, n}, {.dtype = out, .device = a.fp8.codes.device()});
  kernels::fp8_gemm(a.fp8, b.fp8, c, {.m = m, .n = n, .k = a.fp8.codes.size(1), .transpose_b = true},
                    options.accumulator, {.bias = bias});
  return c;
}

// This forward's stochastic-rounding stream: the layer's step, advanced once a forward that will have a
// backward (state->step lives where the layer's buffers do; a GPU's is read back, a few bytes).
Fp4Stream fp4_stream(const Fp8Options& options, Fp4State* state, bool recording) {
  Fp4Stream stream{.seed = options.seed};
  if (state == nullptr) return stream;
  stream.layer = state->layer;
  if (!state->step.defined() || !recording) return stream;
  NoGradGuard no_grad;
  Tensor host = state->step.to(Device::cpu()).to(DType::I32);
  auto* count = host.data<std::int32_t>();
  stream.step = static_cast<std::uint32_t>(count[0]);
  count[0] = static_cast<std::int32_t>(stream.step + 1u);
  state->step.copy_(host);
  return stream;
}

}  // namespace

// Forward: y = x W^T + b, one low-precision GEMM with the bias in its epilogue, rounded once into bf16.
// On a GPU (sm_89 or later for FP8) every tensor is on x's device, the history on the CPU or there too;
// the scales are made on the device (fp8_quantize_copies, kernels::fp4_quantize), so a step waits for the
// host only when the history is on another device. Backward, with x viewed as [rows, in] and dy as
// [rows, out]:
//   dx = dy W        dy quantised along its columns (out), W along its rows (out): W^T's codes
//   dW = dy^T x      dy and x quantised along their rows (the batch): dy^T's and x^T's codes
//   db = dy summed over the rows, in f32
// Every GEMM reads both operands K-major (transpose_b, never transpose_a; kernels/fp8.h says why): an
// operand reduced along its rows is a column-wise copy, written by the quantisation itself.
Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Fp8Options& options,
                  Fp8History* history, Fp4State* fp4) {
  const OpSpan span(kOp);
  MG_CHECK(x.defined() && weight.defined(), "{}: the input or the weight is undefined", kOp);
  MG_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
           "{}: needs x [..., in] and weight [out, in]; got {} and {}", kOp, x.shape(), weight.shape());
  MG_CHECK(!bias.defined() || bias.shape() == Shape{weight.size(0)}, "{}: the bias must be [out] = [{}], got {}", kOp,
           weight.size(0), bias.shape());
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  bool recording = false;
  for (const Tensor& t : inputs) {
    MG_CHECK(t.dtype() == DType::F32 || is_low_precision(t.dtype()),
             "{}: x, weight and bias must be f32, f16 or bf16 (FP8 codes are made inside), got {}", kOp, t.dtype());
    MG_CHECK(t.device() == x.device(), "{}: x, weight and bias must be on one device; x is on {}, got a tensor on {}",
             kOp, x.device(), t.device());
    recording = recording || (grad_enabled() && t.requires_grad());
  }
  if (options.scaling == Fp8Scaling::Delayed) check_history(history);
  const Fp4Stream stream = is_fp4(options.scaling) ? fp4_stream(options, fp4, recording) : Fp4Stream{};

  const std::int64_t out = weight.size(0), in = weight.size(1), rows = x.numel() / std::max<std::int64_t>(in, 1);
  const bool per_tensor = options.scaling == Fp8Scaling::Current || options.scaling == Fp8Scaling::Delayed;
  // Per-tensor scales: one quantisation of x and W serves both passes, the forward reading the
  // row-wise codes and the backward the column-wise ones (the only ones saved: 1 byte an element, as
  // the memory report counts them). Blocks (FP8's and FP4's): the backward quantises again along its
  // own reduction, from the values saved here.
  Tensor y, x2;
  Operand xq, wq;
  kernels::Fp8Tensor xt, wt;  // per tensor: x^T's and W^T's codes, the backward's
  {
    NoGradGuard no_grad;  // the reshapes are views, not steps of the tape: record() below adds the one node
    x2 = reshape(x, {rows, in});
    if (per_tensor) {
      const kernels::Fp8Quantized xb = fp8_quantize_copies(x2, Fp8Role::Input, false, options, history,
                                                           kernels::Fp8Copies::Both);
      const kernels::Fp8Quantized wb = fp8_quantize_copies(weight, Fp8Role::Weight, false, options, history,
                                                           kernels::Fp8Copies::Both);
      xq.fp8 = xb.rowwise;
      wq.fp8 = wb.rowwise;
      xt = xb.columnwise;
      wt = wb.columnwise;
    } else {
      xq = quantize(x2, Fp8Role::Input, false, options, history, stream);
      wq = quantize(weight, Fp8Role::Weight, false, options, history, stream);
    }
    Shape y_shape = x.shape();
    y_shape.back() = out;
    y = reshape(gemm(xq, wq, rows, out, DType::BF16, options, bias), y_shape);
  }
  std::optional<SavedFp8> saved_xt, saved_wt;
  std::optional<Saved> saved_x, saved_w;
  if (per_tensor) {
    saved_xt.emplace(xt);
    saved_wt.emplace(wt);
  } else {
    saved_x.emplace(x2);
    saved_w.emplace(weight);
  }
  const DType x_dtype = x.dtype(), w_dtype = weight.dtype(), b_dtype = bias.defined() ? bias.dtype() : DType::F32;
  const Shape x_shape = x.shape();
  record(kOp, inputs, y,
         [saved_xt, saved_wt, saved_x, saved_w, options, history, stream, rows, in, out, x_dtype, w_dtype, b_dtype,
          x_shape, per_tensor](const Tensor& g, const auto& needs) {
           const Tensor dy = reshape(g, {rows, out});
           Grads grads(needs.size());
           // dy [rows, out] for dx and dy^T [out, rows] for dW: one quantisation with per-tensor scales
           // (and the history's one entry), two with blocks, each made only when its gradient is wanted.
           Operand dyq, dy_t;
           if (per_tensor) {
             const kernels::Fp8Quantized both = fp8_quantize_copies(dy, Fp8Role::GradOutput, false, options, history,
                                                                    kernels::Fp8Copies::Both);
             dyq.fp8 = both.rowwise;
             dy_t.fp8 = both.columnwise;
           } else {
             if (needs[0]) dyq = quantize(dy, Fp8Role::GradOutput, false, options, history, stream);
             if (needs[1]) dy_t = quantize(dy, Fp8Role::GradOutput, true, options, history, stream);
           }
           if (needs[0]) {  // dx [rows, in] = dy [rows, out] . (W^T [in, out])^T
             const Operand w_t = per_tensor ? Operand{.fp8 = saved_wt->get()}
                                            : quantize(saved_w->get(), Fp8Role::Weight, true, options, nullptr, stream);
             grads[0] = reshape(gemm(dyq, w_t, rows, in, x_dtype, options), x_shape);
           }
           if (needs[1]) {  // dW [out, in] = dy^T [out, rows] . (x^T [in, rows])^T
             const Operand x_t = per_tensor ? Operand{.fp8 = saved_xt->get()}
                                            : quantize(saved_x->get(), Fp8Role::Input, true, options, nullptr, stream);
             grads[1] = gemm(dy_t, x_t, out, in, w_dtype, options);
           }
           if (needs.size() == 3 && needs[2]) grads[2] = sum_to(dy.to(DType::F32), {out}).to(b_dtype);
           return grads;
         });
  return y;
}

}  // namespace mg
