#include "core/dtype.h"

#include <array>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace mg {

namespace {

#define MG_DTYPE_ENUMERATOR(e, ...) DType::e,
constexpr std::array kAll{MG_DTYPES(MG_DTYPE_ENUMERATOR)};
#undef MG_DTYPE_ENUMERATOR

// The row of a dtype that exists; an unknown tag is a bug (or memory gone bad), named as such.
DTypeInfo row(DType dtype) {
  const DTypeInfo d = dtype_info(dtype);
  if (d.bits == 0) throw Error(fmt::format("mg::DType: unknown dtype tag {}", static_cast<int>(dtype)));
  return d;
}

// The minimum columns mean something for the floating dtypes only.
DTypeInfo floating_row(DType dtype, const char* what) {
  const DTypeInfo d = row(dtype);
  if (d.mantissa_bits < 0) throw Error(fmt::format("{}: {} is not a floating-point dtype", what, dtype));
  return d;
}

}  // namespace

std::size_t dtype_size(DType dtype) {
  const DTypeInfo d = row(dtype);
  if (d.bits % 8 != 0)
    throw Error(fmt::format("dtype_size: {} packs {} elements a byte and has no size of its own; count bytes with "
                            "dtype_bytes",
                            dtype, 8 / d.bits));
  return static_cast<std::size_t>(d.bits / 8);
}

std::size_t packed_bytes(DType dtype, std::int64_t elements) {
  const DTypeInfo d = row(dtype);
  if (elements < 0) throw Error(fmt::format("dtype_bytes: a negative count of {} elements ({})", dtype, elements));
  const std::int64_t bits = elements * d.bits;  // fewer than 8 bits an element: no overflow before the bytes do
  if (bits % 8 != 0)
    throw Error(fmt::format("dtype_bytes: {} {} elements of {} bits end inside a byte; every {} tensor, view and "
                            "slice must start and end on a whole byte (an even count for 4 bits)",
                            elements, dtype, d.bits, dtype));
  return static_cast<std::size_t>(bits / 8);
}

std::string_view dtype_name(DType dtype) { return dtype_info(dtype).name; }

std::string_view dtype_file_name(DType dtype) { return row(dtype).file_name; }

std::span<const DType> all_dtypes() { return kAll; }

std::string dtype_names(bool file_names) {
  std::string names;
  for (std::size_t i = 0; i < kAll.size(); ++i) {
    if (i > 0) names += i + 1 == kAll.size() ? " and " : ", ";
    names += file_names ? fmt::format("\"{}\"", dtype_file_name(kAll[i])) : std::string(dtype_name(kAll[i]));
  }
  return names;
}

bool is_floating(DType dtype) { return row(dtype).mantissa_bits >= 0; }

bool is_integer(DType dtype) { return row(dtype).mantissa_bits < 0; }

bool is_low_precision(DType dtype) { return dtype == DType::F16 || dtype == DType::BF16; }

bool is_fp8(DType dtype) {
  const DTypeInfo d = row(dtype);
  return d.storage_only && d.bits == 8 && d.mantissa_bits > 0 && d.has_sign;
}

bool is_coded(DType dtype) {
  const DTypeInfo d = row(dtype);
  return d.storage_only && d.mantissa_bits >= 0;
}

std::int64_t packed_group(DType dtype) {
  const int bits = row(dtype).bits;
  return bits % 8 == 0 ? 1 : 8 / std::gcd(bits, 8);
}

double dtype_eps(DType dtype) { return std::ldexp(1.0, -floating_row(dtype, "dtype_eps").mantissa_bits); }

double dtype_max(DType dtype) { return row(dtype).max; }

double dtype_min_normal(DType dtype) { return floating_row(dtype, "dtype_min_normal").min_normal; }

double dtype_min_subnormal(DType dtype) { return floating_row(dtype, "dtype_min_subnormal").min_subnormal; }

// The table's facts, checked where they can be derived from the others (IEEE-style formats: the
// smallest normal is 2^(1 - bias), the smallest subnormal 2^(1 - bias - mantissa bits); a format of
// exponent alone, E8M0, has no subnormals and its smallest value is 2^-bias).
constexpr bool rows_consistent() {
  for (const DType dtype : kAll) {
    const DTypeInfo d = dtype_info(dtype);
    if (d.bits == 0 || d.mantissa_bits < 0) continue;
    double normal = 1.0;
    for (int i = 0; i < d.bias - (d.mantissa_bits == 0 ? 0 : 1); ++i) normal /= 2.0;
    double subnormal = normal;
    for (int i = 0; i < d.mantissa_bits; ++i) subnormal /= 2.0;
    if (normal != d.min_normal || subnormal != d.min_subnormal) return false;
    if (d.bits != (d.has_sign ? 1 : 0) + d.exponent_bits + d.mantissa_bits) return false;
  }
  return true;
}
static_assert(rows_consistent(), "core/dtype.h: a row of MG_DTYPES disagrees with its bias and mantissa bits");

}  // namespace mg
