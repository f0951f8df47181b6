// FP8 scaling recipes, the FP8 region and mg::fp8_linear (autograd/fp8.h). Tests: build/tests/test_fp8_scaling,
// build/tests/test_fp8_linear.
#include "autograd/fp8.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
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

fp8::Format format_for(Fp8Role role, const Fp8Options& options) {
  return role == Fp8Role::GradOutput ? options.backward_format : options.forward_format;
}

// Delayed scaling's bookkeeping for one role, after the tensor was quantised with the old scale: its amax
// enters the history (column 0, the older ones move right, the oldest drops), and the next scale comes
// from the history.
void record_amax(Fp8History& history, Fp8Role role, float amax, fp8::Format format, const Fp8Options& options) {
  const std::int64_t len = history.amax_history.size(1), r = static_cast<std::int64_t>(role);
  float* row = history.amax_history.data<float>() + r * len;
  std::copy_backward(row, row + len - 1, row + len);
  row[0] = amax;
  float source = row[0];  // most recent; or the max, NaN if any entry is (then the scale stays, as in TE)
  if (options.amax_algorithm == AmaxAlgorithm::Max)
    for (std::int64_t i = 1; i < len; ++i)
      if (std::isnan(row[i]) || row[i] > source) source = std::isnan(source) ? source : row[i];
  float& scale = history.scale.data<float>()[r];
  scale = fp8_scale_for(source, format, options, scale);
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
                                 forward_format == fp8::Format::E4M3 ? "E4M3" : "E5M2",
                                 backward_format == fp8::Format::E4M3 ? "E4M3" : "E5M2");
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

float fp8_scale_for(float amax, fp8::Format format, const Fp8Options& options, float previous) {
  const float max = fp8::format_info(format).max;
  const bool usable = std::isfinite(amax) && amax > 0.0f;
  if (options.scaling == Fp8Scaling::Mx) {
    if (!usable) return 1.0f;
    int exponent = 0;
    if (options.mx_rule == MxScaleRule::Floor) {
      std::frexp(amax, &exponent);  // amax = f * 2^exponent, f in [0.5, 1): floor(log2 amax) = exponent - 1
      exponent = exponent - 1 - fp8::format_info(format).emax;
    } else {
      const double ratio = static_cast<double>(amax) / max;  // exact in f64
      const double f = std::frexp(ratio, &exponent);  // ceil(log2 ratio): exponent, or exponent - 1 at a power of 2
      if (f == 0.5) --exponent;
    }
    exponent = std::clamp(exponent, -127, 127);  // E8M0's range
    return std::ldexp(1.0f, -exponent);
  }
  if (!usable) return options.scaling == Fp8Scaling::Block ? 1.0f : previous;
  double scale = static_cast<double>(max) / amax;
  if (options.scaling != Fp8Scaling::Block) scale = std::ldexp(scale, -options.margin);
  scale = std::min(scale, static_cast<double>(FLT_MAX));
  if (options.power_of_two) {
    int exponent = 0;
    std::frexp(scale, &exponent);
    scale = std::ldexp(1.0, std::clamp(exponent - 1, -126, 127));
  }
  return static_cast<float>(scale);
}

kernels::Fp8Tensor fp8_quantize_operand(const Tensor& x, Fp8Role role, bool reduce_rows, const Fp8Options& options,
                                        Fp8History* history) {
  const kernels::Fp8Blocks blocks = blocks_for(role, reduce_rows, options.scaling);
  const fp8::Format format = format_for(role, options);
  // The scales are chosen on the host: a GPU's amax is read back (a host wait a quantisation), and its
  // scales go back to it with the codes' quantisation.
  const Tensor amax = kernels::fp8_block_amax(x, blocks).to(Device::cpu());
  if (options.scaling == Fp8Scaling::Delayed) {
    check_history(history);
    // The history of a Linear moved to a GPU is there (its buffers): the bookkeeping runs on a host
    // copy, written back after.
    const bool on_host = history->scale.device().is_cpu();
    Fp8History host = on_host ? *history
                              : Fp8History{history->amax_history.to(Device::cpu()), history->scale.to(Device::cpu())};
    const Tensor scale = full({1, 1}, host.scale.data<float>()[static_cast<int>(role)]).to(x.device());
    kernels::Fp8Tensor q = kernels::fp8_quantize(x, scale, blocks, format);
    record_amax(host, role, amax.data<float>()[0], format, options);
    if (!on_host) {
      NoGradGuard no_grad;
      history->amax_history.copy_(host.amax_history);
      history->scale.copy_(host.scale);
    }
    return q;
  }
  Tensor scale = Tensor::empty(amax.shape(), {.dtype = DType::F32});
  for (std::int64_t i = 0; i < amax.numel(); ++i)
    scale.data<float>()[i] = fp8_scale_for(amax.data<float>()[i], format, options);
  return kernels::fp8_quantize(x, scale.to(x.device()), blocks, format);
}

const Fp8Options* detail::exchange_fp8_region(const Fp8Options* options) {
  return std::exchange(current_region, options);
}

const Fp8Options* fp8_autocast_options() { return current_region; }

// Forward: y = x W^T + b, one FP8 GEMM with the bias in its epilogue, rounded once into bf16.
// On a GPU (sm_89 or later) every tensor is on x's device, the history on the CPU or there too: each
// quantisation reads its amax back to choose the scales on the host (fp8_quantize_operand: a host wait).
// Backward, with x viewed as [rows, in] and dy as [rows, out]:
//   dx = dy W        dy quantised along its columns (out), W along its rows (out)
//   dW = dy^T x      dy and x quantised along their rows (the batch)
//   db = dy summed over the rows, in f32
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
  Tensor y;
  kernels::Fp8Tensor xq, wq;
  Tensor x2;
  {
    NoGradGuard no_grad;  // the reshapes are views, not steps of the tape: record() below adds the one node
    x2 = reshape(x, {rows, in});
    xq = fp8_quantize_operand(x2, Fp8Role::Input, false, options, history);
    wq = fp8_quantize_operand(weight, Fp8Role::Weight, false, options, history);
    y = Tensor::empty({rows, out}, {.dtype = DType::BF16, .device = x.device()});
    kernels::fp8_gemm(xq, wq, y, {.m = rows, .n = out, .k = in, .transpose_b = true}, options.accumulator,
                      {.bias = bias});
    Shape y_shape = x.shape();
    y_shape.back() = out;
    y = reshape(y, y_shape);
  }
  // Per-tensor scales: the forward's codes serve the backward (1 byte an element saved, as the memory
  // report counts them). Block and MX: the backward quantises again along its own reduction, from the
  // values saved here.
  std::optional<SavedFp8> saved_xq, saved_wq;
  std::optional<Saved> saved_x, saved_w;
  if (per_tensor) {
    saved_xq.emplace(xq);
    saved_wq.emplace(wq);
  } else {
    saved_x.emplace(x2);
    saved_w.emplace(weight);
  }
  const DType x_dtype = x.dtype(), w_dtype = weight.dtype(), b_dtype = bias.defined() ? bias.dtype() : DType::F32;
  const Shape x_shape = x.shape();
  record(kOp, inputs, y,
         [saved_xq, saved_wq, saved_x, saved_w, options, history, rows, in, out, x_dtype, w_dtype, b_dtype, x_shape,
          per_tensor](const Tensor& g, const auto& needs) {
           const Tensor dy = reshape(g, {rows, out});
           Grads grads(needs.size());
           const kernels::Fp8Tensor dy_cols = fp8_quantize_operand(dy, Fp8Role::GradOutput, false, options, history);
           const kernels::Fp8Tensor dy_rows = per_tensor ? dy_cols
                                                         : fp8_quantize_operand(dy, Fp8Role::GradOutput, true, options,
                                                                                history);
           if (needs[0]) {
             const kernels::Fp8Tensor w_rows = per_tensor ? saved_wq->get()
                                                          : fp8_quantize_operand(saved_w->get(), Fp8Role::Weight, true,
                                                                                 options, nullptr);
             Tensor dx = Tensor::empty({rows, in}, {.dtype = x_dtype, .device = g.device()});
             kernels::fp8_gemm(dy_cols, w_rows, dx, {.m = rows, .n = in, .k = out}, options.accumulator);
             grads[0] = reshape(dx, x_shape);
           }
           if (needs[1]) {
             const kernels::Fp8Tensor x_rows = per_tensor ? saved_xq->get()
                                                          : fp8_quantize_operand(saved_x->get(), Fp8Role::Input, true,
                                                                                 options, nullptr);
             Tensor dw = Tensor::empty({out, in}, {.dtype = w_dtype, .device = g.device()});
             kernels::fp8_gemm(dy_rows, x_rows, dw, {.m = out, .n = in, .k = rows, .transpose_a = true},
                               options.accumulator);
             grads[1] = dw;
           }
           if (needs.size() == 3 && needs[2]) grads[2] = sum_to(dy.to(DType::F32), {out}).to(b_dtype);
           return grads;
         });
  return y;
}

}  // namespace mg
