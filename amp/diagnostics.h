// Numerics diagnostics: what the paper measured to motivate mixed precision, built in.
//
// - gradient_stats(g): for one gradient, the fraction exactly zero, the fraction that becomes zero
//   only when rounded to f16 (|g| <= 2^-25), the fraction that lands in f16's subnormal range, and a
//   histogram of log2|g| in integer bins from -40 to +16 plus a zero bin: the format of the paper's
//   Figures 2b and 3. For parameter gradients, call it on p.grad(); for activation gradients,
//   record a backward pass with a GradientRecorder (a tape observer).
// - OverflowDetector: while alive, finds the first op whose forward output or backward gradient is
//   inf or NaN, and names it with its shapes, dtypes and scope (nn modules set scopes).
// - nonfinite_gradients: which parameters have inf/NaN gradients (amp::ScaleMonitor keeps this
//   list for each skipped step).
// - lost_update_fraction: of the elements an optimizer step meant to change, the fraction whose
//   stored value did not change: the updates an f16 weight loses without f32 master weights.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "autograd/tape.h"
#include "core/tensor.h"
#include "optim/optimizer.h"

namespace mg::amp {

struct GradientStats {
  static constexpr int kMinExponent = -40;  // bin 0 holds log2|g| < -39 (everything down to the smallest f64)
  static constexpr int kMaxExponent = 16;  // the last bin holds log2|g| >= 16
  static constexpr int kBins = kMaxExponent - kMinExponent + 1;

  std::int64_t count = 0;  // elements seen
  std::int64_t zero = 0;  // exactly zero already (the zero bin)
  std::int64_t f16_flushed = 0;  // non-zero, but zero once rounded to f16
  std::int64_t f16_subnormal = 0;  // non-zero and subnormal once rounded to f16: [2^-24, 2^-14)
  std::int64_t f16_overflow = 0;  // finite, but inf once rounded to f16 (|g| >= 65520)
  std::int64_t nonfinite = 0;  // inf or NaN already (not in the histogram)
  // histogram[k]: non-zero finite values with floor(log2|g|) == kMinExponent + k (ends clamped).
  std::array<std::int64_t, kBins> histogram{};

  double fraction(std::int64_t part) const {
    return count ? static_cast<double>(part) / static_cast<double>(count) : 0.0;
  }
  void merge(const GradientStats& other);
};

GradientStats gradient_stats(const Tensor& gradient);

// Indices of the parameters whose .grad holds an inf or NaN.
std::vector<std::size_t> nonfinite_gradients(const std::vector<Tensor>& parameters);

// Of the elements the optimizer's last step meant to change, the fraction that kept its value.
double lost_update_fraction(const optim::Optimizer& optimizer);

// The first inf/NaN of a forward or backward pass.
struct OverflowEvent {
  bool backward = false;  // found in a gradient (else in a forward output)
  std::string op;  // the recorded op name, e.g. "matmul"
  std::string scope;  // the NameScope it ran in ("" when none)
  std::vector<Shape> input_shapes;
  std::vector<DType> input_dtypes;
  bool inputs_finite = true;  // false: the op only passed on an inf/NaN it was given
  Shape shape;  // the non-finite tensor: the output, or the gradient of input `input`
  DType dtype = DType::F32;
  std::size_t input = 0;  // backward only: which input's gradient
  std::string describe() const;
};

// Watches every op of this thread while alive. first() is the first event, kept until reset().
// With throw_on_overflow, the first event also throws mg::Error (its describe()) from the op.
class OverflowDetector : public OpObserver {
 public:
  explicit OverflowDetector(bool throw_on_overflow = false);
  ~OverflowDetector() override;
  const std::optional<OverflowEvent>& first() const { return first_; }
  void reset() { first_.reset(); }

  void forward(const char* op, const std::string& scope, const std::vector<Tensor>& inputs,
               const Tensor& output) override;
  void backward(const char* op, const std::string& scope, const Tensor& grad_output, const Grads& grads) override;

 private:
  void found(OverflowEvent event);
  bool throw_on_overflow_;
  std::optional<OverflowEvent> first_;
};

// Records gradient_stats of every activation gradient (the gradient of each recorded op's output)
// during the backward passes run while it is alive, in the order backward visits them.
class GradientRecorder : public OpObserver {
 public:
  struct Entry {
    std::string op, scope;
    Shape shape;
    DType dtype;
    GradientStats stats;
  };
  GradientRecorder();
  ~GradientRecorder() override;
  const std::vector<Entry>& entries() const { return entries_; }
  GradientStats total() const;  // all entries merged

  void forward(const char*, const std::string&, const std::vector<Tensor>&, const Tensor&) override {}
  void backward(const char* op, const std::string& scope, const Tensor& grad_output, const Grads& grads) override;

 private:
  std::vector<Entry> entries_;
};

}  // namespace mg::amp
