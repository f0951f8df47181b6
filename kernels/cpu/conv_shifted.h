// A stride-1 convolution as GEMMs over zero-padded copies of the images ("shifted" operands): the
// forward pass and the input gradient of kernels/cpu/conv_gemm.cpp where they apply.
//
// Copy image n of x [C, H, W] into a zero-bordered buffer [C, H + 2 pad_h, W + 2 pad_w] (Wp wide) and
// number the output positions as the buffer's, p = oh * Wp + ow with ow running over all Wp columns.
// Then the input a tap (c, kh, kw) reads for position p is buffer[p + c * Hp * Wp + kh * Wp + kw]: for
// every tap the positions are one contiguous run, shifted by the tap's offset. So packing a panel of
// positions for the GEMM copies one run per tap (GemmOperand's `shifted` form), where the window form
// (kernels/cpu/gemm_pack.cpp's gather) cuts every panel into runs at the end of each output row and
// clamps each run to the padding. The price: Wp - OW columns of junk per output row (2 of 16 for a
// 3x3 kernel on a 14-wide map), computed and dropped when the result is copied into y.
//
//   forward  y[n] [O, OH * Wp] = W [O, T] x shifted(x[n]) [T, OH * Wp] + bias, then the first OW columns
//            of each row copied into y: each element the same f32 sum in the same order of taps as the
//            window form, so the same bits.
//   dx       the input gradient is the forward convolution of dy, padded by KH - 1 - pad_h and
//            KW - 1 - pad_w, with the weight's taps mirrored and its channels swapped:
//            dx[n] [C, H * Wq] = W' [C, O * KH * KW] x shifted(dy[n]), W'[c, (o, kh, kw)] =
//            W[o, c, KH - 1 - kh, KW - 1 - kw]: one f32 sum per element (over o, then the taps),
//            rounded once, where the window form summed each tap's shares (col2im). Needs pad <= K - 1.
//
// Tests: build/tests/test_ops_conv (both forms against f64 loops, and the forward's bits against the
// window form's), build/tests/test_ops_conv_grad. Benchmark: build/bench/train_step conv:128.
#pragma once

#include "core/tensor.h"
#include "kernels/cpu/microkernel.h"
#include "kernels/window.h"

namespace mg::kernels::cpu {

// Whether the shifted form computes that window's forward pass, or its input gradient.
bool conv2d_shifted_forward_applies(const Window2d& w);
bool conv2d_shifted_input_grad_applies(const Window2d& w);

// As kernels::cpu::conv2d_forward and conv2d_input_grad (kernels/conv.h), on that microkernel; bias: O
// f32 values or nullptr.
void conv2d_forward_shifted(const MicroKernel& kernel, const Tensor& x, const Tensor& weight, const float* bias,
                            const Window2d& w, Tensor& y);
void conv2d_input_grad_shifted(const MicroKernel& kernel, const Tensor& dy, const Tensor& weight, const Window2d& w,
                               Tensor& dx);

}  // namespace mg::kernels::cpu
