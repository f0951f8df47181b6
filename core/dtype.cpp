#include "core/dtype.h"

#include <array>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace mg {

namespace {

struct DTypeRow {
  DType dtype;
  std::string_view name;
  std::size_t size;
  int mantissa_bits;  // bits after the binary point; -1: an integer type
  double max;
  std::string_view file_name;  // safetensors' name (github.com/huggingface/safetensors, "Dtype")
};

// One row per dtype, in enum order (checked below).
constexpr std::array<DTypeRow, 7> kRows{{
    {DType::F32, "f32", 4, 23, std::numeric_limits<float>::max(), "F32"},
    {DType::F16, "f16", 2, 10, 65504.0, "F16"},
    {DType::BF16, "bf16", 2, 7, 0x1.FEp127, "BF16"},  // 0x7F7F: (2 - 2^-7) * 2^127
    {DType::F64, "f64", 8, 52, std::numeric_limits<double>::max(), "F64"},
    {DType::I32, "i32", 4, -1, std::numeric_limits<std::int32_t>::max(), "I32"},
    {DType::E4M3, "e4m3", 1, 3, 448.0, "F8_E4M3"},
    {DType::E5M2, "e5m2", 1, 2, 57344.0, "F8_E5M2"},
}};
constexpr std::array<DType, kRows.size()> kAll{DType::F32, DType::F16,  DType::BF16, DType::F64,
                                               DType::I32, DType::E4M3, DType::E5M2};

constexpr bool rows_in_enum_order() {
  for (std::size_t i = 0; i < kRows.size(); ++i)
    if (static_cast<std::size_t>(kRows[i].dtype) != i || kAll[i] != kRows[i].dtype) return false;
  return true;
}
static_assert(rows_in_enum_order(), "core/dtype.cpp: kRows must list every DType in enum order");

const DTypeRow& row(DType dtype) {
  const auto i = static_cast<std::size_t>(dtype);
  if (i >= kRows.size()) throw Error(fmt::format("mg::DType: unknown dtype tag {}", i));
  return kRows[i];
}

}  // namespace

std::size_t dtype_size(DType dtype) { return row(dtype).size; }

std::string_view dtype_name(DType dtype) {
  const auto i = static_cast<std::size_t>(dtype);
  return i < kRows.size() ? kRows[i].name : "unknown";
}

std::string_view dtype_file_name(DType dtype) { return row(dtype).file_name; }

std::span<const DType> all_dtypes() { return kAll; }

bool is_floating(DType dtype) { return row(dtype).mantissa_bits >= 0; }

bool is_low_precision(DType dtype) { return dtype == DType::F16 || dtype == DType::BF16; }

bool is_fp8(DType dtype) { return dtype == DType::E4M3 || dtype == DType::E5M2; }

double dtype_eps(DType dtype) {
  if (!is_floating(dtype)) throw Error(fmt::format("dtype_eps: {} is not a floating-point dtype", dtype));
  return std::ldexp(1.0, -row(dtype).mantissa_bits);
}

double dtype_max(DType dtype) { return row(dtype).max; }

}  // namespace mg
