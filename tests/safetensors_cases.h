// What the safetensors suites share (test_safetensors.cpp, test_safetensors_numpy.cpp): a file of
// every dtype with the values easiest to get wrong, and the check that two tensors are identical.
#pragma once

#include <cmath>
#include <limits>
#include <string>

#include "tests/testing.h"

namespace mg::testing::safetensors_cases {

inline std::string bytes_of(const Tensor& t) { return std::string(static_cast<const char*>(t.data_ptr()), t.nbytes()); }

// Same dtype, shape and bytes: NaN payloads and the sign of zero included.
inline void check_identical(const Tensor& got, const Tensor& expected) {
  REQUIRE(got.defined());
  CHECK((got.dtype() == expected.dtype() && got.shape() == expected.shape() && bytes_of(got) == bytes_of(expected)));
}

// Every dtype, with the values that are easiest to get wrong, plus a 0-d and an empty tensor.
inline StateDict every_dtype() {
  Generator gen(7);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const std::vector<double> special = {0.0, -0.0, 1.0, -2.5, 0.1, inf, -inf, nan, 5.960464477539063e-08, 65504.0};
  return {{"f32", randn({3, 5}, gen)},
          {"f16.special", from_vector(special, {2, 5}, {.dtype = DType::F16})},
          {"bf16.special", from_vector(special, {10}, {.dtype = DType::BF16})},
          {"f64", randn({4}, gen, {.dtype = DType::F64})},
          {"i32", from_vector({-2147483648.0, -1, 0, 2147483647.0}, {2, 2}, {.dtype = DType::I32})},
          {"i64", from_vector({-0x1p63, 0x1p53 + 2, -1, 0x1p62}, {4}, {.dtype = DType::I64})},
          {"u8", from_vector({0, 1, 255}, {3}, {.dtype = DType::U8})},
          {"bool", from_vector({1, 0, 0, 1}, {2, 2}, {.dtype = DType::BOOL})},
          {"step", state_scalar(1200)},
          {"empty", zeros({0, 3}, {.dtype = DType::F16})},
          {std::string(300, 'w').append(".weight"),  // not +: GCC 12 warns falsely (-Warray-bounds)
           randn({2}, gen, {.dtype = DType::BF16})},
          {"couche.poids.été.层", ones({1}, {.dtype = DType::F32})}};
}

}  // namespace mg::testing::safetensors_cases
