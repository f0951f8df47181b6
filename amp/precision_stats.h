// Precision statistics of one tensor: how its values would fare in each low-precision format.
//
// For a tensor (an activation, a gradient, a weight, an update) precision_stats counts, of its values:
//   - exactly zero, or inf/NaN already;
//   - per format (f16, bf16, E4M3, E5M2): non-zero but zero once rounded to the format (flushed),
//     non-zero and below the format's smallest normal once rounded (subnormal: fewer mantissa bits),
//     finite but past the format's largest value once rounded (overflow: inf in f16 and bf16, NaN in E4M3,
//     inf in E5M2, as the formats' own rules say);
//   - amax, the largest finite |x|, and the log2|x| histogram of amp::GradientStats (amp/diagnostics.h,
//     which this reuses for the zero, non-finite and f16 counts).
// The 16-bit formats judge the values as given: a gradient is judged as stored, multiplied by the
// loss scale. The FP8 formats never hold a tensor unscaled: each value is first multiplied by a
// per-tensor scale, the current scaling of autograd/fp8.h: scale = format max / amax / 2^margin,
// rounded down to a power of two when asked (Fp8Judging, taken from the FP8 recipes' options). With
// that scale amax lands on the format's max, so FP8's overflow share is 0 unless the margin is negative.
//
//   amp::PrecisionStats s = amp::precision_stats(activation);
//   s.share(DType::F16, amp::Outcome::Flushed);   // the fraction f16 turns into zero
//
// lost_updates compares a weight (or the f32 master the optimizer updates) before and after an
// optimizer step: of the elements whose gradient was non-zero (the step meant to move them), how
// many kept their stored value. That is amp::lost_update_fraction's count (the optimizer's own) for
// SGD without momentum and weight decay; with momentum or moments an element with a zero gradient
// this step still moves, and is left out here.
#pragma once

#include <array>
#include <cstdint>

#include "amp/diagnostics.h"
#include "core/tensor.h"

namespace mg::amp {

// The formats a tensor is judged in: the low-precision rows of MG_DTYPES (core/dtype.h), whose facts
// (smallest normal, largest finite) the judging reads.
inline constexpr int kFormats = 4;
inline constexpr std::array<DType, kFormats> kAllFormats{DType::F16, DType::BF16, DType::E4M3, DType::E5M2};
// A format's place in kAllFormats (the first index of PrecisionStats::counts); an mg::Error for a dtype
// that is not one of them.
std::size_t format_index(DType format);

enum class Outcome { Flushed, Subnormal, Overflow };

// How the FP8 shares are judged: the per-tensor scale's margin and rounding (autograd/fp8.h's options).
struct Fp8Judging {
  int margin = 0;  // the scale is divided by 2^margin
  bool power_of_two = false;  // the scale is rounded down to a power of two
};

struct PrecisionStats {
  GradientStats values;  // count, zero, nonfinite, the f16 counts and the log2|x| histogram
  double amax = 0;  // the largest finite |x| (0 for a tensor of zeros)
  // Per format (kAllFormats' order), per outcome: how many values.
  std::array<std::array<std::int64_t, 3>, kFormats> counts{};
  // The FP8 formats' per-tensor scales the values were multiplied by (E4M3, E5M2); after merge(),
  // the smallest of those merged (1 where amax was 0).
  std::array<double, 2> fp8_scale{1.0, 1.0};

  std::int64_t count(DType format, Outcome outcome) const {
    return counts[format_index(format)][static_cast<std::size_t>(outcome)];
  }
  double share(DType format, Outcome outcome) const { return values.fraction(count(format, outcome)); }
  double zero_share() const { return values.fraction(values.zero); }
  // Adds another tensor's counts (a layer's weight and bias together); amax is the larger.
  void merge(const PrecisionStats& other);
};

// The statistics of a floating tensor on any device (read to the host: a host wait on a GPU).
PrecisionStats precision_stats(const Tensor& tensor, const Fp8Judging& fp8 = {});

// Elements an optimizer step meant to change, and of those, how many kept their stored value.
struct LostUpdates {
  std::int64_t meant = 0;
  std::int64_t lost = 0;
  double fraction() const { return meant ? static_cast<double>(lost) / static_cast<double>(meant) : 0.0; }
  void merge(const LostUpdates& other) {
    meant += other.meant;
    lost += other.lost;
  }
};

// `before` and `after`: the stored values (as read back with to_vector<double>) of one tensor the
// optimizer updates; `gradient`: the gradient the step read, same size (inf/NaN and zeros: not meant).
LostUpdates lost_updates(const std::vector<double>& before, const std::vector<double>& after,
                         const std::vector<double>& gradient);

}  // namespace mg::amp
