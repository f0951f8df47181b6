// A stride-1 convolution over zero-padded copies of the images: the forward pass, the input gradient
// and the weight gradient of kernels/cpu/conv_gemm.cpp where they pay (its ConvForm::Best).
//
// Copy image n of x [C, H, W] into a zero-bordered f32 buffer [C, Hp = H + 2 pad_h, Wp = W + 2 pad_w].
// The window of output position (oh, ow) then starts at oh * Wp + ow, and tap (c, kh, kw) sits at the
// offset c * Hp * Wp + kh * Wp + kw from every window's start: no clamping to the padding, no
// division, one add. Tap t of position p is padded[position_offset[p] + tap_offset[t]].
//
// On the Fma kernels both GEMM operands are read in place, nothing is packed (MicroKernel::run_gathered;
// the window form packed every value of an image nine times over, once per tap):
//   forward  a tile is MR output positions x NR output channels: row i's value at step t is
//            padded[position_offset[p0 + i] + tap_offset[t]], B's row t is the weight transposed
//            [T, O] (made once a call); the tile is stored transposed into y [O, P], bias added to
//            the f32 sum, rounded once. The same products in the same order of taps as the window
//            form: the same bits.
//   dx       the forward convolution of dy, padded by KH - 1 - pad_h and KW - 1 - pad_w, with the
//            weight's taps mirrored and its channels swapped: W'[c, (o, kh, kw)] = W[o, c, KH - 1 - kh,
//            KW - 1 - kw]. One f32 sum per element (over o, then the taps), rounded once, where the
//            window form summed each tap's shares (col2im). Needs pad <= K - 1.
//   dW       a tile is MR taps x NR output channels: row i's value at step p is padded[tap_offset[t0 +
//            i] + position_offset[p]], B's row p is dy of that position over the channels (dy[n]
//            transposed once per image); the steps run over every position of every image in order:
//            the window form's chain, the same bits.
// On the dot kernel (vdpbf16ps: a step is a pair of k, one 32-bit word of two bf16) the forward pass
// and dx read in place too, over an image padded as channel pairs, [ceil(C / 2), Hp, Wp] words with
// channel 2q in the low half: a step is a tap of a pair of channels, (q, kh, kw), at one offset as
// before, and B is the weight as pairs [steps, O]. Its chain pairs channels where the window form
// pairs neighbouring taps: its own bits, held to the f64 loops. dW's steps are positions: on the dot
// kernel a step is a pair of neighbouring positions of one output row, read as one word from the
// padded bf16 image with each value paired with the next, dy laid out as pairs [positions / 2, O];
// where an output row is odd in length the dot kernel hands dW to the Fma kernel of its family
// (kernels/cpu/conv_gemm.cpp). (Before, the dot kernel packed a panel of positions as one copy per
// tap, junk columns included: the bf16 conv step of bench/train_step conv:128 took 19.2-19.8 ms then
// and 11.8-13.1 ms so, one thread of a Zen 5.)
//
// Tests: build/tests/test_ops_conv_grad (every form on every kernel, the models included, against the
// window form's bits and the f64 loops). Benchmark: build/bench/train_step conv:128.
#pragma once

#include "core/tensor.h"
#include "kernels/cpu/microkernel.h"
#include "kernels/window.h"

namespace mg::kernels::cpu {

// Whether the padded-image forms compute that window's forward pass (stride 1), or its input gradient.
bool conv2d_shifted_forward_applies(const Window2d& w);
bool conv2d_shifted_input_grad_applies(const Window2d& w);

// As kernels::cpu::conv2d_forward and conv2d_input_grad (kernels/conv.h), on that microkernel (in place
// where it has run_gathered, else packed); bias: O f32 values or nullptr.
void conv2d_forward_shifted(const MicroKernel& kernel, const Tensor& x, const Tensor& weight, const float* bias,
                            const Window2d& w, Tensor& y);
void conv2d_input_grad_shifted(const MicroKernel& kernel, const Tensor& dy, const Tensor& weight, const Window2d& w,
                               Tensor& dx);
// As kernels::cpu::conv2d_weight_grad, on a kernel with run_gathered, stride 1; on the dot kernel (bf16
// x and dy) only where conv2d_weight_grad_pairs_apply: each output row holds whole pairs of positions.
bool conv2d_weight_grad_pairs_apply(const Window2d& w);
void conv2d_weight_grad_gathered(const MicroKernel& kernel, const Tensor& dy, const Tensor& x, const Window2d& w,
                                 Tensor& dw);

}  // namespace mg::kernels::cpu
