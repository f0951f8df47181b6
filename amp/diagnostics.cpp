#include "amp/diagnostics.h"

#include <algorithm>
#include <cmath>

#include "core/format.h"

namespace mg::amp {

namespace {

constexpr double kF16MinNormal = dtype_info(DType::F16).min_normal;  // 2^-14

bool all_finite(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype())) return true;
  for (double v : t.to_vector<double>())
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

void GradientStats::merge(const GradientStats& other) {
  count += other.count;
  zero += other.zero;
  f16_flushed += other.f16_flushed;
  f16_subnormal += other.f16_subnormal;
  f16_overflow += other.f16_overflow;
  nonfinite += other.nonfinite;
  for (int k = 0; k < kBins; ++k) histogram[k] += other.histogram[k];
}

GradientStats gradient_stats(const Tensor& gradient) {
  MG_CHECK(gradient.defined() && is_floating(gradient.dtype()),
           "amp::gradient_stats: needs a floating tensor (a .grad that backward has filled)");
  GradientStats stats;
  for (double v : gradient.to_vector<double>()) {
    ++stats.count;
    if (!std::isfinite(v)) {
      ++stats.nonfinite;
      continue;
    }
    if (v == 0.0) {
      ++stats.zero;
      continue;
    }
    int exponent = 0;
    std::frexp(v, &exponent);  // |v| = m * 2^exponent with m in [0.5, 1): floor(log2|v|) = exponent - 1
    const int bin = std::clamp(exponent - 1, GradientStats::kMinExponent, GradientStats::kMaxExponent);
    ++stats.histogram[static_cast<std::size_t>(bin - GradientStats::kMinExponent)];
    const double in_f16 = std::fabs(static_cast<double>(scalar_cast<half>(v)));
    if (in_f16 == 0.0)
      ++stats.f16_flushed;
    else if (in_f16 < kF16MinNormal)
      ++stats.f16_subnormal;
    else if (std::isinf(in_f16))
      ++stats.f16_overflow;
  }
  return stats;
}

std::vector<std::size_t> nonfinite_gradients(const std::vector<Tensor>& parameters) {
  std::vector<std::size_t> indices;
  for (std::size_t i = 0; i < parameters.size(); ++i)
    if (!all_finite(parameters[i].grad())) indices.push_back(i);
  return indices;
}

double lost_update_fraction(const optim::Optimizer& optimizer) {
  const kernels::UpdateCount count = optimizer.last_update();
  return count.nonzero ? static_cast<double>(count.lost) / static_cast<double>(count.nonzero) : 0.0;
}

std::string OverflowEvent::describe() const {
  std::string inputs;
  for (std::size_t i = 0; i < input_shapes.size(); ++i)
    inputs += fmt::format("{}{} {}", i ? ", " : "", input_shapes[i], input_dtypes[i]);
  const std::string where = scope.empty() ? "" : fmt::format(" in '{}'", scope);
  const std::string what = backward ? fmt::format("the gradient of input {} ({} {}) in backward", input, shape, dtype)
                                    : fmt::format("its output ({} {})", shape, dtype);
  return fmt::format("first inf/NaN: {} of op {}{} ({}: {}){}", what, op, where,
                     backward ? "gradient of its output" : "inputs", inputs,
                     inputs_finite ? "" : "; its inputs already held inf/NaN, so it came from the data or earlier");
}

OverflowDetector::OverflowDetector(bool throw_on_overflow) : throw_on_overflow_(throw_on_overflow) {
  add_observer(this);
}
OverflowDetector::~OverflowDetector() { remove_observer(this); }

void OverflowDetector::found(OverflowEvent event) {
  first_ = std::move(event);
  if (throw_on_overflow_) throw Error("amp::OverflowDetector: " + first_->describe());
}

void OverflowDetector::forward(const char* op, const std::string& scope, const std::vector<Tensor>& inputs,
                               const Tensor& output) {
  if (first_ || all_finite(output)) return;
  OverflowEvent event;
  event.op = op;
  event.scope = scope;
  event.shape = output.shape();
  event.dtype = output.dtype();
  for (const Tensor& input : inputs) {
    event.input_shapes.push_back(input.shape());
    event.input_dtypes.push_back(input.dtype());
    event.inputs_finite = event.inputs_finite && all_finite(input);
  }
  found(std::move(event));
}

void OverflowDetector::backward(const char* op, const std::string& scope, const Tensor& grad_output,
                                const Grads& grads) {
  if (first_) return;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (all_finite(grads[i])) continue;
    OverflowEvent event;
    event.backward = true;
    event.op = op;
    event.scope = scope;
    event.input_shapes = {grad_output.shape()};
    event.input_dtypes = {grad_output.dtype()};
    event.inputs_finite = all_finite(grad_output);
    event.shape = grads[i].shape();
    event.dtype = grads[i].dtype();
    event.input = i;
    found(std::move(event));
    return;
  }
}

GradientRecorder::GradientRecorder() { add_observer(this); }
GradientRecorder::~GradientRecorder() { remove_observer(this); }

void GradientRecorder::backward(const char* op, const std::string& scope, const Tensor& grad_output, const Grads&) {
  entries_.push_back({op, scope, grad_output.shape(), grad_output.dtype(), gradient_stats(grad_output)});
}

GradientStats GradientRecorder::total() const {
  GradientStats total;
  for (const Entry& entry : entries_) total.merge(entry.stats);
  return total;
}

}  // namespace mg::amp
