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
// (sign dropped) reach the first non-finite pattern. A max over integers, which the compiler vectorises.
template <class Bits>
bool largest_magnitude_reaches(const Tensor& t, Bits magnitude_mask, Bits infinity) {
  const auto* bits = static_cast<const Bits*>(t.data_ptr());
  const std::int64_t count = t.numel();  // read once: the loop then vectorises
  Bits largest = 0;
  for (std::int64_t i = 0; i < count; ++i) largest = std::max<Bits>(largest, bits[i] & magnitude_mask);
  return largest >= infinity;
}

// The bit patterns come from the dtype's row (core/dtype.h): every floating dtype, FP8 codes included.
bool cpu_nonfinite(const Tensor& t) {
  const std::uint64_t mask = magnitude_mask(t.dtype()), from = nonfinite_from(t.dtype());
  if (from == 0) return false;  // an integer: always finite
  switch (dtype_info(t.dtype()).bits) {
    case 8:
      return largest_magnitude_reaches<std::uint8_t>(t, static_cast<std::uint8_t>(mask),
                                                     static_cast<std::uint8_t>(from));
    case 16:
      return largest_magnitude_reaches<std::uint16_t>(t, static_cast<std::uint16_t>(mask),
                                                      static_cast<std::uint16_t>(from));
    case 32:
      return largest_magnitude_reaches<std::uint32_t>(t, static_cast<std::uint32_t>(mask),
                                                      static_cast<std::uint32_t>(from));
    case 64:
      return largest_magnitude_reaches<std::uint64_t>(t, mask, from);
  }
  throw Error(fmt::format("NonfiniteTrace: no bit test for {}-bit {} tensors", dtype_info(t.dtype()).bits, t.dtype()));
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
