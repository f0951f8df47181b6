// FP8 training: how each operand of a Linear's three GEMMs gets its scales (the scaling recipes), the
// region that turns FP8 on, and mg::fp8_linear, the op that runs a Linear's GEMMs in FP8.
//
//   scaling   scale of an operand                         blocks (along the GEMM's reduction)  source
//   Current   fp8_max / amax(x now) / 2^margin            one per tensor                       Transformer Engine, torchao
//   Delayed   fp8_max / amax(history) / 2^margin; the     one per tensor                       Transformer Engine
//             history holds the amax of earlier steps
//   Block     fp8_max / amax(block)                       activations and gradients 1 x 128,   DeepSeek-V3, section 3.3
//                                                         weights 128 x 128
//   Mx        2^-(floor(log2 amax(block)) - emax)         32 along the reduction, E8M0 scale   OCP MX v1.0, section 6.3
//   Nvfp4     E2M1 codes: an E4M3 scale per block and      16 along the reduction; weights      NVIDIA (arXiv 2509.25149)
//             an f32 scale per tensor (autograd/fp4.h)     16 x 16
//   Mxfp4     E2M1 codes: an E8M0 scale per block          32 along the reduction               OCP MX; Tseng et al. 2025
//
// A scale multiplies values before they are rounded (kernels/fp8.h): x ~= decode(codes) / scale. Each
// GEMM quantises its operands along its own reduction dimension: in y = x W^T the reduction runs along
// x's and W's columns, in dx = dy W along dy's columns and W's rows, in dW = dy^T x along the rows (the
// batch) of both. Per-tensor scales do not care, so the forward's codes of x and W serve the backward
// (what Transformer Engine saves); block and MX scales do, so the backward quantises again from the
// values the forward saved. The forward's operands (x, W) are E4M3 and the gradient dy E5M2 (the
// "hybrid" of Micikevicius et al. 2022); `backward_format = E4M3` is DeepSeek-V3's and MX's choice.
//
// Delayed scaling (Transformer Engine's DelayedScaling): each of a layer's three tensors keeps the amax
// of its last `amax_history_len` steps. The scale used this step comes from that history (its max,
// or the most recent), never from the tensor being quantised: a tensor whose amax grew since saturates
// (the codes are clamped to +-max, never NaN). After quantising, its own amax enters the history and the
// next step's scale is computed. An amax of 0 or not finite keeps the previous scale, as in Transformer
// Engine. The histories and scales are buffers of the Linear (nn::Linear::enable_fp8): they are in its
// state dict, so a checkpoint resumes bit for bit.
//
// MX's scale: the spec sets the shared exponent to floor(log2 amax) - emax_elem (emax 8 for E4M3, 15
// for E5M2), which leaves the block's largest value in [2^emax, 2^(emax+1)): for E4M3 the top of that
// binade, 448 to 512, saturates to 448. Transformer Engine rounds the exponent up instead
// (ceil(log2(amax / max))), which never saturates but wastes up to one binade of the smallest values.
// MxScaleRule picks one; `mixgrad repro` measures the difference.
#pragma once

#include <cstdint>
#include <string>

#include "core/fp8.h"
#include "core/tensor.h"
#include "kernels/fp8.h"

namespace mg {

// Nvfp4 and Mxfp4 are the FP4 recipes' (autograd/fp4.h): the same three GEMMs, their operands in FP4.
enum class Fp8Scaling : std::uint8_t { Current, Delayed, Block, Mx, Nvfp4, Mxfp4 };
constexpr bool is_fp4(Fp8Scaling scaling) { return scaling == Fp8Scaling::Nvfp4 || scaling == Fp8Scaling::Mxfp4; }
// FP4's Hadamard transform on the weight gradient's operands (autograd/fp4.h): random signs from the
// options' seed (NVFP4's and Tseng et al.'s), all signs +1, or none.
enum class HadamardMode : std::uint8_t { Random, Deterministic, Off };
enum class AmaxAlgorithm : std::uint8_t { Max, MostRecent };
enum class MxScaleRule : std::uint8_t { Floor, RoundUp };  // Floor: the OCP spec; RoundUp: Transformer Engine

struct Fp8Options {
  Fp8Scaling scaling = Fp8Scaling::Delayed;
  DType forward_format = DType::E4M3;  // x and W
  DType backward_format = DType::E5M2;  // dy
  int margin = 0;  // per-tensor scales are divided by 2^margin (Transformer Engine's margin)
  bool power_of_two = false;  // Current, Delayed and Block: round each scale down to a power of two
  int amax_history_len = 16;  // Delayed: steps of amax kept (Transformer Engine's default is 1024)
  AmaxAlgorithm amax_algorithm = AmaxAlgorithm::Max;  // Delayed: the history's max, or its newest entry
  MxScaleRule mx_rule = MxScaleRule::Floor;
  kernels::Fp8Accumulator accumulator = {};  // F32 unless .limited (kernels/fp8.h)
  // How many of a model's Linear layers, counted from its last, stay in bf16 (amp::Recipe::prepare
  // marks them): the NVFP4 recipe keeps the head (1); 0 puts every Linear in the low-precision format.
  int bf16_last_layers = 0;
  // FP4 only (Nvfp4, Mxfp4; autograd/fp4.h), each ingredient a switch for ablations:
  HadamardMode hadamard = HadamardMode::Random;  // on both operands of the weight-gradient GEMM
  bool stochastic_gradients = true;  // dy rounded stochastically; every other operand to nearest
  bool weight_blocks_2d = true;  // NVFP4: 16 x 16 weight blocks, so that W and W^T quantise alike
  std::uint64_t seed = 0;  // the Hadamard signs and the stochastic rounding's stream
  std::string describe() const;  // "delayed (E4M3 forward, E5M2 backward, history 16, max)"
};

// A Linear's FP4 state: its index among the model's Linears (amp::Recipe::prepare numbers them) and
// how many training forwards it has run, step (i32 [1], a buffer of the Linear, so that a checkpoint
// resumes the stream). A backward's stochastic rounding draws from (seed, step, 4 * layer + which copy).
struct Fp4State {
  Tensor step;
  std::uint32_t layer = 0;
};

// The three tensors of a Linear's GEMMs, in the order their histories are kept.
enum class Fp8Role : std::uint8_t { Input, Weight, GradOutput };
constexpr int kFp8Roles = 3;

// A Linear's delayed-scaling state: amax_history f32 [3, len] (row = role, column 0 the newest step)
// and scale f32 [3]. Fresh state: zeros and ones (the first step quantises with scale 1).
struct Fp8History {
  Tensor amax_history;
  Tensor scale;
  static Fp8History fresh(int history_len);
};

// The scale(s) of x for `role` under `options`, and the codes, with x's reduction along its rows
// (reduce_rows) or columns. Delayed reads and then updates `history` (required for Delayed, ignored
// otherwise). x: 2-D, f32, f16 or bf16.
kernels::Fp8Tensor fp8_quantize_operand(const Tensor& x, Fp8Role role, bool reduce_rows, const Fp8Options& options,
                                        Fp8History* history);
// The same, with the copies a GEMM needs (kernels/fp8.h: FP8 GEMM operands are K-major): RowWise is
// fp8_quantize_operand's codes, ColumnWise the codes of x^T made by the same kernel, Both for a tensor
// that one GEMM reduces along its columns and another along its rows (per-tensor scales: one amax, and
// one entry in the history). The scales are computed on x's device: on a GPU nothing waits for the
// host, unless the history is on another device than x.
kernels::Fp8Quantized fp8_quantize_copies(const Tensor& x, Fp8Role role, bool reduce_rows, const Fp8Options& options,
                                          Fp8History* history, kernels::Fp8Copies copies);

// The per-block scale for an amax under `options` (the table above): Current and Delayed give
// fp8_max / amax / 2^margin, or `previous` when amax is 0 or not finite; Block gives fp8_max / amax (1
// for an empty or non-finite block); Mx gives 2^-(the shared exponent), clamped to E8M0's range.
float fp8_scale_for(float amax, DType format, const Fp8Options& options, float previous = 1.0f);

// The FP8 region is an Autocast region given Fp8Options (autograd/autocast.h): inside it every
// nn::Linear runs its GEMMs through fp8_linear, and every other op is autocast to the region's dtype
// (bf16). amp::Recipe::autocast() opens it for the FP8 recipes. The innermost enabled region's
// options, or nullptr outside any FP8 region:
const Fp8Options* fp8_autocast_options();
namespace detail {
// Autocast's hook: makes `options` the current FP8 region of this thread, returns the previous one.
const Fp8Options* exchange_fp8_region(const Fp8Options* options);
}  // namespace detail

// y = x W^T + b with the three GEMMs in FP8 (forward, input gradient, weight gradient), their scales
// chosen by `options`; x [..., in], weight [out, in] (f32 or bf16), bias [out] or undefined. y is bf16
// (the autocast dtype of the FP8 recipes); the gradients reach x in x's dtype and the weight and bias
// in theirs. history: the layer's Fp8History, required by Delayed scaling.
// With FP4 scaling (Nvfp4, Mxfp4) the GEMMs run in FP4 instead (autograd/fp4.h), and fp4, the layer's
// Fp4State, keys stochastic rounding (without it: layer 0, step 0 on every call).
Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Fp8Options& options,
                  Fp8History* history = nullptr, Fp4State* fp4 = nullptr);

}  // namespace mg
