#include "amp/nonfinite_trace.h"

#include <algorithm>
#include <cmath>

#include "autograd/ops.h"
#include "core/factory.h"
#include "core/format.h"
#include "kernels/amp.h"

namespace mg::amp {

namespace {

// Whether a CPU tensor holds an inf or NaN, from the bits (no copy): its largest magnitude's bits
// (sign dropped) reach those of inf. A max over integers, which the compiler vectorises.
template <class Bits>
bool largest_magnitude_reaches(const Tensor& t, Bits magnitude_mask, Bits infinity) {
  const auto* bits = static_cast<const Bits*>(t.data_ptr());
  const std::int64_t count = t.numel();  // read once: the loop then vectorises
  Bits largest = 0;
  for (std::int64_t i = 0; i < count; ++i) largest = std::max<Bits>(largest, bits[i] & magnitude_mask);
  return largest >= infinity;
}

bool cpu_nonfinite(const Tensor& t) {
  switch (t.dtype()) {
    case DType::F16:
      return largest_magnitude_reaches<std::uint16_t>(t, 0x7FFFu, 0x7C00u);
    case DType::BF16:
      return largest_magnitude_reaches<std::uint16_t>(t, 0x7FFFu, 0x7F80u);
    case DType::F32:
      return largest_magnitude_reaches<std::uint32_t>(t, 0x7FFFFFFFu, 0x7F800000u);
    case DType::F64:
      return largest_magnitude_reaches<std::uint64_t>(t, 0x7FFFFFFFFFFFFFFFu, 0x7FF0000000000000u);
    case DType::E4M3:  // no inf; NaN is S.1111.111
      return largest_magnitude_reaches<std::uint8_t>(t, 0x7Fu, 0x7Fu);
    case DType::E5M2:  // inf S.11111.00, NaN above it
      return largest_magnitude_reaches<std::uint8_t>(t, 0x7Fu, 0x7Cu);
    case DType::I32:  // an integer is always finite
      return false;
  }
  return false;
}

}  // namespace

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
  if (tensor.device().is_cpu()) {
    open_->sites.push_back({backward, op, scope, false, cpu_nonfinite(tensor)});
    return;
  }
  // The GradScaler's own check (kernels/amp.h): flag = 1 if a value of the tensor is inf or NaN. A
  // kernel called directly, not an mg:: op, so that no observer sees it (a --graph picture would
  // otherwise draw it beside the step's own ops).
  if (!one_.defined() || one_.device() != tensor.device()) one_ = ones({1}, {.device = tensor.device()});
  Tensor flag = zeros({1}, {.device = tensor.device()});
  kernels::find_non_finite({tensor}, one_, flag);
  open_->sites.push_back({backward, op, scope, true, false});
  open_->flags.push_back(std::move(flag));
}

void NonfiniteTrace::forward(const char* op, const std::string& scope, const std::vector<Tensor>&,
                             const Tensor& output) {
  flag(false, op, scope, output);
}

void NonfiniteTrace::backward(const char* op, const std::string& scope, const Tensor&, const Grads& grads) {
  for (const Tensor& grad : grads) flag(true, op, scope, grad);
}

std::optional<NonfiniteOp> NonfiniteTrace::first(std::int64_t step) const {
  for (const Step& s : closed_) {
    if (s.number != step) continue;
    // The device flags, in one transfer, only when the step has some.
    const std::vector<double> flags = s.flags.empty() ? std::vector<double>() : s.flags.front().to_vector<double>();
    std::size_t next = 0;
    for (const Site& site : s.sites)
      if (site.on_device ? flags[next++] != 0.0 : site.nonfinite)
        return NonfiniteOp{.step = step, .backward = site.backward, .op = site.op, .scope = site.scope};
    return std::nullopt;
  }
  return std::nullopt;
}

void NonfiniteTrace::drop_through(std::int64_t step) {
  std::erase_if(closed_, [&](const Step& s) { return s.number <= step; });
}

}  // namespace mg::amp
