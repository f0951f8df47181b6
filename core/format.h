// fmt support: fmt::print("{}", t) shows the values, shape, dtype and device of a tensor.
//
//   tensor([[1, 2.5, 3],
//           [4, 5, 6]], shape=[2, 3], dtype=f16)
//
// Tensors over 1000 elements show the first and last three entries of each dim around "...".
#pragma once

#include <string>

#include "core/tensor.h"

namespace mg {

std::string to_string(const Tensor& tensor);

}  // namespace mg

template <>
struct fmt::formatter<mg::Tensor> : fmt::formatter<std::string_view> {
  auto format(const mg::Tensor& tensor, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(mg::to_string(tensor), ctx);
  }
};
