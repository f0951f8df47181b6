#include "core/dtype.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace mg {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return 4;
    case DType::F16:
      return 2;
    case DType::BF16:
      return 2;
    case DType::F64:
      return 8;
    case DType::I32:
      return 4;
  }
  throw Error(fmt::format("dtype_size: unknown dtype tag {}", static_cast<int>(dtype)));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::F64:
      return "f64";
    case DType::I32:
      return "i32";
  }
  return "unknown";
}

bool is_floating(DType dtype) { return dtype != DType::I32; }

bool is_low_precision(DType dtype) { return dtype == DType::F16 || dtype == DType::BF16; }

double dtype_eps(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return std::ldexp(1.0, -23);
    case DType::F16:
      return std::ldexp(1.0, -10);
    case DType::BF16:
      return std::ldexp(1.0, -7);
    case DType::F64:
      return std::ldexp(1.0, -52);
    case DType::I32:
      break;
  }
  throw Error(fmt::format("dtype_eps: {} is not a floating-point dtype", dtype));
}

double dtype_max(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return std::numeric_limits<float>::max();
    case DType::F16:
      return 65504.0;
    case DType::BF16:
      return std::ldexp(255.0, 120);  // 0x7F7F: (2 - 2^-7) * 2^127
    case DType::F64:
      return std::numeric_limits<double>::max();
    case DType::I32:
      return std::numeric_limits<std::int32_t>::max();
  }
  throw Error(fmt::format("dtype_max: unknown dtype tag {}", static_cast<int>(dtype)));
}

}  // namespace mg
