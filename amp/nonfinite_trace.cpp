#include "amp/nonfinite_trace.h"

#include <cmath>

#include "autograd/ops.h"
#include "core/format.h"

namespace mg::amp {

std::string NonfiniteOp::describe() const {
  return fmt::format("step {}: the {} of op {}{}", step, backward ? "gradient (backward)" : "output (forward)", op,
                     scope.empty() ? std::string(" outside any layer") : fmt::format(" in layer '{}'", scope));
}

NonfiniteTrace::~NonfiniteTrace() {
  if (open_) remove_observer(this);
}

void NonfiniteTrace::begin_step(std::int64_t step) {
  end_step();
  open_.emplace();
  open_->number = step;
  add_observer(this);
}

void NonfiniteTrace::end_step() {
  if (!open_) return;
  remove_observer(this);
  Step step = std::move(*open_);
  open_.reset();
  if (step.flags.size() > 1) {
    NoGradGuard no_grad;
    step.flags = {cat(step.flags, 0)};
  }
  closed_.push_back(std::move(step));
}

void NonfiniteTrace::flag(bool backward, const char* op, const std::string& scope, const Tensor& tensor) {
  if (!open_ || !tensor.defined() || !is_floating(tensor.dtype()) || tensor.numel() == 0) return;
  flagging_ = true;
  try {
    NoGradGuard no_grad;
    // 0 * x is 0 for every finite x and NaN for inf and NaN: the sum is NaN iff one value is not finite.
    Tensor flag = cast(sum(mul(tensor, 0.0)), DType::F32).reshape({1});
    open_->sites.push_back({backward, op, scope});
    open_->flags.push_back(std::move(flag));
  } catch (...) {
    flagging_ = false;
    throw;
  }
  flagging_ = false;
}

void NonfiniteTrace::forward(const char* op, const std::string& scope, const std::vector<Tensor>&,
                             const Tensor& output) {
  if (!flagging_) flag(false, op, scope, output);
}

void NonfiniteTrace::backward(const char* op, const std::string& scope, const Tensor&, const Grads& grads) {
  if (flagging_) return;
  for (const Tensor& grad : grads) flag(true, op, scope, grad);
}

std::optional<NonfiniteOp> NonfiniteTrace::first(std::int64_t step) const {
  for (const Step& s : closed_) {
    if (s.number != step || s.flags.empty()) continue;
    const std::vector<double> flags = s.flags.front().to_vector<double>();  // the one transfer
    for (std::size_t i = 0; i < flags.size(); ++i)
      if (!std::isfinite(flags[i])) {
        const Site& site = s.sites[i];
        return NonfiniteOp{.step = step, .backward = site.backward, .op = site.op, .scope = site.scope};
      }
    return std::nullopt;
  }
  return std::nullopt;
}

void NonfiniteTrace::drop_through(std::int64_t step) {
  std::erase_if(closed_, [&](const Step& s) { return s.number <= step; });
}

}  // namespace mg::amp
