// Window2d: the geometry shared by convolution and pooling over [batch, channels, height, width].
//
// A kernel_h x kernel_w window slides over the input zero-padded by pad_h / pad_w on each side,
// moving stride_h / stride_w at a time, so the output has
//   out_h = (height + 2 pad_h - kernel_h) / stride_h + 1   (and likewise out_w)
// positions. Output position (oh, ow) reads input row oh * stride_h - pad_h + kh, kh in [0, kernel_h).
#pragma once

#include <cstdint>

namespace mg::kernels {

struct Window2d {
  std::int64_t batch = 1, channels = 1, height = 1, width = 1;
  std::int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;

  std::int64_t out_h() const { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  std::int64_t out_w() const { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
};

}  // namespace mg::kernels
