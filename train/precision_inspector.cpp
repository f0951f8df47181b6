#include "train/precision_inspector.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "autograd/ops.h"
#include "core/factory.h"

namespace mg::train {

namespace {

constexpr std::size_t kNonfiniteKept = 100;

// "3.weight" -> "3"; a model's own parameter ("weight") belongs to the layer "" (the model).
std::string layer_of(const std::string& parameter_name) {
  const std::size_t dot = parameter_name.rfind('.');
  return dot == std::string::npos ? std::string() : parameter_name.substr(0, dot);
}

// A scope and every scope around it: "a.b.c", "a.b", "a".
std::vector<std::string> scope_and_parents(const std::string& scope) {
  std::vector<std::string> scopes;
  for (std::string s = scope; !s.empty();) {
    scopes.push_back(s);
    const std::size_t dot = s.rfind('.');
    s = dot == std::string::npos ? std::string() : s.substr(0, dot);
  }
  return scopes;
}

// The tensors on the CPU, read from a GPU in one transfer: flattened, cast to f32 (exact for f16 and
// bf16; f64 lives on the CPU only), joined, copied and cut apart again. CPU tensors are returned as
// they are. An inspected step reads everything it judges this way, instead of one wait per tensor.
std::vector<Tensor> to_host(const std::vector<Tensor>& tensors) {
  if (tensors.empty() || tensors.front().device().is_cpu()) return tensors;
  NoGradGuard no_grad;
  std::vector<Tensor> flat;
  for (const Tensor& t : tensors) flat.push_back(cast(t, DType::F32).reshape({t.numel()}));
  const Tensor joined = cat(flat, 0).to(Device::cpu());  // the one wait
  std::vector<Tensor> host;
  std::int64_t offset = 0;
  for (const Tensor& t : tensors) {
    host.push_back(joined.slice(offset, offset + t.numel()).reshape(t.shape()));
    offset += t.numel();
  }
  return host;
}

std::string csv_header() {
  std::string header = "step,layer,kind,dtype,values,amax,zero,nonfinite";
  for (DType f : amp::kAllFormats)
    for (const char* outcome : {"flushed", "subnormal", "overflow"})
      header += fmt::format(",{}_{}", dtype_name(f), outcome);
  return header + ",e4m3_scale,e5m2_scale,lost";
}

std::string csv_row(const LayerRecord& r) {
  const amp::PrecisionStats& s = r.stats;
  std::string row = fmt::format("{},\"{}\",{},{},{},{:.6g},{:.6g},{:.6g}", r.step, r.layer, kind_name(r.kind), r.dtype,
                                s.values.count, s.amax, s.zero_share(), s.values.fraction(s.values.nonfinite));
  for (DType f : amp::kAllFormats)
    for (amp::Outcome o : {amp::Outcome::Flushed, amp::Outcome::Subnormal, amp::Outcome::Overflow})
      row += fmt::format(",{:.6g}", s.share(f, o));
  row += fmt::format(",{:.6g},{:.6g},", s.fp8_scale[0], s.fp8_scale[1]);
  if (r.lost) row += fmt::format("{:.6g}", r.lost->fraction());
  return row;
}

}  // namespace

const char* kind_name(TensorKind kind) {
  switch (kind) {
    case TensorKind::Activation:
      return "activation";
    case TensorKind::ActivationGrad:
      return "activation_grad";
    case TensorKind::Weight:
      return "weight";
    case TensorKind::WeightGrad:
      return "weight_grad";
    case TensorKind::Update:
      return "update";
  }
  return "?";
}

PrecisionInspector::PrecisionInspector(Trainer& trainer, InspectorOptions options)
    : trainer_(trainer), options_(std::move(options)) {
  MG_CHECK(options_.every >= 1,
           "train::PrecisionInspector: every must be >= 1 (1 inspects every step; 100 every 100th), got {}",
           options_.every);
  if (const auto& fp8 = trainer.recipe().fp8) fp8_ = {.margin = fp8->margin, .power_of_two = fp8->power_of_two};
  const auto named = trainer.model().named_parameters();
  const std::vector<Tensor>& parameters = trainer.optimizer().parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    std::string layer = "(model)";
    for (const auto& [name, p] : named)
      if (&p.impl() == &parameters[i].impl()) layer = layer_of(name).empty() ? "(model)" : layer_of(name);
    parameter_layers_.push_back(layer);
  }
  if (!options_.csv_path.empty()) {
    csv_.open(options_.csv_path);
    MG_CHECK(csv_.is_open(),
             "train::PrecisionInspector: cannot write the inspection CSV {}: give a path in a directory that exists "
             "and is writable",
             options_.csv_path);
    csv_ << csv_header() << '\n';
  }
  if (options_.trace_nonfinite) trace_.emplace();
}

PrecisionInspector::~PrecisionInspector() { stop_observing(); }

void PrecisionInspector::stop_observing() {
  if (observing_) remove_observer(this);
  observing_ = false;
}

void PrecisionInspector::add(const std::string& layer, TensorKind kind, DType dtype, const amp::PrecisionStats& stats,
                             std::optional<amp::LostUpdates> lost) {
  records_.push_back(
      {.step = step_number(), .layer = layer, .kind = kind, .dtype = dtype, .stats = stats, .lost = lost});
  if (kind == TensorKind::Update) records_.back().step = pending_step_;
  if (csv_.is_open()) csv_ << csv_row(records_.back()) << '\n';
}

void PrecisionInspector::before_forward() {
  stop_observing();  // a step that threw leaves nothing registered
  record_updates();
  ++seen_;
  inspecting_ = (seen_ - 1) % options_.every == 0;
  if (trace_) trace_->begin_step(seen_);
  layer_order_.clear();
  layer_outputs_.clear();
  held_.clear();
  gradient_seen_.clear();
  if (inspecting_) {
    add_observer(this);
    observing_ = true;
  }
}

void PrecisionInspector::forward(const char*, const std::string& scope, const std::vector<Tensor>&,
                                 const Tensor& output) {
  if (scope.empty() || !output.defined() || !is_floating(output.dtype())) return;
  if (!layer_outputs_.contains(scope)) layer_order_.push_back(scope);  // a layer: a scope with ops of its own
  for (const std::string& s : scope_and_parents(scope)) layer_outputs_[s] = output;
}

void PrecisionInspector::after_forward(const Tensor&) {
  if (!inspecting_) return;
  // Judged after backward, with everything else this step reads (one transfer on a GPU).
  for (const std::string& layer : layer_order_)
    held_.push_back({layer, TensorKind::Activation, layer_outputs_.at(layer)});
  layer_outputs_.clear();
}

void PrecisionInspector::backward(const char*, const std::string& scope, const Tensor& grad_output, const Grads&) {
  if (scope.empty() || !grad_output.defined()) return;
  for (const std::string& s : scope_and_parents(scope)) {
    if (gradient_seen_[s]) continue;
    gradient_seen_[s] = true;
    // Backward meets a layer's ops last to first: its first gradient here is its output's.
    if (std::find(layer_order_.begin(), layer_order_.end(), s) != layer_order_.end())
      held_.push_back({s, TensorKind::ActivationGrad, grad_output});
  }
}

void PrecisionInspector::after_backward(const optim::Optimizer& optimizer) {
  stop_observing();
  if (trace_) trace_->end_step();
  if (!inspecting_) return;
  // Everything this step judges, read at once: the held activations and their gradients, then per
  // parameter its value, its gradient (or none) and what the optimizer updates (for the snapshot).
  const std::vector<Tensor>& parameters = optimizer.parameters();
  std::vector<Tensor> tensors;
  for (const Held& h : held_) tensors.push_back(h.tensor);
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const Tensor& p = parameters[i];
    tensors.push_back(p);
    tensors.push_back(p.grad().defined() ? p.grad() : p);  // a stand-in, skipped below
    tensors.push_back(optimizer.master(i).defined() ? optimizer.master(i) : p);
  }
  const std::vector<Tensor> host = to_host(tensors);
  std::size_t next = 0;
  for (const Held& h : held_) {
    add(h.layer, h.kind, h.tensor.dtype(), amp::precision_stats(host[next++], fp8_));
  }
  held_.clear();
  std::map<std::string, std::pair<amp::PrecisionStats, DType>> weights, grads;
  std::vector<std::string> order;
  pending_.clear();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const Tensor& p = parameters[i];
    const Tensor &value = host[next], &gradient = host[next + 1], &target = host[next + 2];
    next += 3;
    const std::string& layer = parameter_layers_[i];
    if (!weights.contains(layer)) {
      order.push_back(layer);
      weights[layer] = {amp::PrecisionStats{}, p.dtype()};
    }
    weights[layer].first.merge(amp::precision_stats(value, fp8_));
    if (p.grad().defined()) {
      if (!grads.contains(layer)) grads[layer] = {amp::PrecisionStats{}, p.grad().dtype()};
      grads[layer].first.merge(amp::precision_stats(gradient, fp8_));
    }
    pending_.push_back({target.to_vector<double>(),
                        p.grad().defined() ? gradient.to_vector<double>() : std::vector<double>(p.numel(), 0.0)});
  }
  for (const std::string& layer : order) add(layer, TensorKind::Weight, weights[layer].second, weights[layer].first);
  for (const std::string& layer : order)
    if (grads.contains(layer)) add(layer, TensorKind::WeightGrad, grads[layer].second, grads[layer].first);
  pending_step_ = step_number();
  pending_count_ = optimizer.step_count();  // a host wait on a GPU: inspected steps only
}

void PrecisionInspector::record_updates() {
  if (pending_.empty()) return;
  const optim::Optimizer& optimizer = trainer_.optimizer();
  std::vector<Snapshot> before = std::move(pending_);
  pending_.clear();
  if (optimizer.step_count() == pending_count_) return;  // skipped: nothing was updated
  struct LayerUpdate {
    amp::PrecisionStats stats;
    amp::LostUpdates lost;
    DType dtype = DType::F32;  // of what the optimizer updates
  };
  std::map<std::string, LayerUpdate> layers;
  std::vector<std::string> order;
  std::vector<Tensor> targets;
  for (std::size_t i = 0; i < before.size(); ++i)
    targets.push_back(optimizer.master(i).defined() ? optimizer.master(i) : optimizer.parameters()[i]);
  const std::vector<Tensor> host = to_host(targets);
  for (std::size_t i = 0; i < before.size(); ++i) {
    const Tensor& p = optimizer.parameters()[i];
    const Tensor& target = targets[i];
    const std::vector<double> after = host[i].to_vector<double>();
    std::vector<double> change(after.size());
    for (std::size_t k = 0; k < after.size(); ++k) change[k] = after[k] - before[i].target[k];
    const std::string& layer = parameter_layers_[i];
    if (!layers.contains(layer)) {
      order.push_back(layer);
      layers[layer].dtype = target.dtype();
    }
    LayerUpdate& update = layers[layer];
    update.stats.merge(amp::precision_stats(from_vector(change, p.shape(), {.dtype = DType::F64}), fp8_));
    update.lost.merge(amp::lost_updates(before[i].target, after, before[i].gradient));
  }
  for (const std::string& layer : order)
    add(layer, TensorKind::Update, layers[layer].dtype, layers[layer].stats, layers[layer].lost);
}

void PrecisionInspector::steps_read(const std::vector<StepNumbers>& read) {
  if (!trace_ || read.empty()) return;
  for (const StepNumbers& n : read) {
    if (!n.skipped && std::isfinite(n.loss)) continue;
    std::optional<amp::NonfiniteOp> op = trace_->first(n.step);
    if (!op) continue;
    op->step = n.step + options_.first_step - 1;
    if (!first_nonfinite_) first_nonfinite_ = op;
    if (nonfinite_.size() < kNonfiniteKept) nonfinite_.push_back(*op);
  }
  trace_->drop_through(read.back().step);
}

void PrecisionInspector::finish() {
  record_updates();
  if (!csv_.is_open()) return;
  csv_.flush();
  MG_CHECK(csv_.good(), "train::PrecisionInspector: writing the inspection CSV {} failed (is the disk full?)",
           options_.csv_path);
}

}  // namespace mg::train
