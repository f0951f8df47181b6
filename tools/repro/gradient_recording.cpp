#include "tools/repro/gradient_recording.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "autograd/ops.h"

namespace mg::tools::repro {

namespace {

// Casts only move a gradient between dtypes (their output's gradient is the next op's input
// gradient again), and moves between devices likewise: counting them would count values twice.
bool is_activation(const amp::GradientRecorder::Entry& entry) {
  return entry.op != op_name(Op::Cast) && entry.op != op_name(Op::ToDevice) && entry.stats.count > 1;
}

// zero / count, and (zero + would-flush-in-f16) / count, over the stats given.
std::pair<double, double> zero_fractions(const amp::GradientStats& stats) {
  return {stats.fraction(stats.zero), stats.fraction(stats.zero + stats.f16_flushed)};
}

// Merges `stats` into slot i of a histogram list, naming the slot on first sight; every step of a
// run has the same graph, so slot i must be the same tensor each time.
void merge_into(std::vector<std::string>& names, std::vector<amp::GradientStats>& all, std::size_t i,
                const std::string& name, const amp::GradientStats& stats) {
  if (i == all.size()) {
    names.push_back(name);
    all.emplace_back();
  }
  MG_CHECK(i < all.size() && names[i] == name,
           "repro::run: gradient {} was '{}' at an earlier step and is '{}' now; "
           "histograms merge steps of one unchanging graph",
           i, i < names.size() ? names[i] : "", name);
  all[i].merge(stats);
}

// Rows of a gradient [rows, ...] that are zero in every element.
std::int64_t zero_rows(const Tensor& grad) {
  const Tensor values = grad.to(Device::cpu()).to(DType::F32);
  const std::int64_t rows = values.size(0), width = values.numel() / std::max<std::int64_t>(1, rows);
  const float* v = values.data<float>();
  std::int64_t zero = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    zero += std::all_of(v + r * width, v + (r + 1) * width, [](float x) { return x == 0.0f; }) ? 1 : 0;
  return zero;
}

}  // namespace

GradientRecording::GradientRecording(const RunConfig& c, const std::vector<Tensor>& weights, RunResult& result,
                                     StepLog& entry)
    : c_(c),
      weights_(weights),
      names_(result.weight_names),
      activation_names_(result.activation_names),
      histograms_(result.histograms),
      entry_(entry) {}

void GradientRecording::before_backward() {
  if (c_.record_activation_gradients || c_.record_histograms) recorder_.emplace();  // watches this backward only
}

void GradientRecording::after_backward(const optim::Optimizer&) {
  if (recorder_) record_activations();
  if (c_.record_weight_gradients || c_.record_histograms) record_weights();
}

void GradientRecording::record_activations() {
  amp::GradientStats activations;
  std::size_t slot = 0;
  for (const auto& e : recorder_->entries()) {
    if (!is_activation(e)) continue;
    if (slot == 0)
      entry_.logit_zero_in_f16_fraction = zero_fractions(e.stats).second;  // backward meets the logits first
    activations.merge(e.stats);
    const std::string name = fmt::format("{} {}", e.op, e.shape);
    if (slot == activation_names_.size()) activation_names_.push_back(name);
    MG_CHECK(activation_names_[slot] == name,
             "repro::run: activation gradient {} was '{}' at an earlier step and "
             "is '{}' now; a run's steps must have one unchanging graph",
             slot, activation_names_[slot], name);
    entry_.activation_zero_in_f16_by_entry.push_back(zero_fractions(e.stats).second);
    if (c_.record_histograms) merge_into(histograms_.activation_names, histograms_.activations, slot, name, e.stats);
    ++slot;
  }
  if (c_.record_activation_gradients)
    std::tie(entry_.activation_zero_fraction, entry_.activation_zero_in_f16_fraction) = zero_fractions(activations);
  recorder_.reset();
}

void GradientRecording::record_weights() {
  for (std::size_t w = 0; w < weights_.size(); ++w) {
    const Tensor grad = weights_[w].grad();
    const amp::GradientStats stats = grad.defined() ? amp::gradient_stats(grad) : amp::GradientStats{};
    if (c_.record_histograms) merge_into(histograms_.weight_names, histograms_.weights, w, names_[w], stats);
    if (!c_.record_weight_gradients) continue;
    const auto [zero, zero_in_f16] = grad.defined() ? zero_fractions(stats) : std::pair{1.0, 1.0};
    entry_.weight_grad_zero_fraction.push_back(zero);
    entry_.weight_grad_zero_in_f16_fraction.push_back(zero_in_f16);
    entry_.weight_grad_zero_rows.push_back(grad.defined() ? zero_rows(grad) : weights_[w].size(0));
  }
}

}  // namespace mg::tools::repro
