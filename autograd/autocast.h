// Autocast: inside a region, each op casts its inputs to the dtype its row of the cast-policy table
// names (autograd/cast_policy.h), so matmuls run in f16/bf16 while softmax and losses stay in f32. This
// is how mixgrad carries out the paper's third technique (section 3.3): f16 products accumulated in
// f32, and the ops that need f32's range or long sums kept in f32.
//
//   {
//     mg::Autocast autocast(DType::F16);         // thread-local, until the end of the scope
//     Tensor logits = model.forward(x);          // matmul casts x and the f32 weights to f16
//     Tensor loss = mg::cross_entropy(logits, y);  // f32 list: logits are cast back up
//   }
//   scaler.scale(loss) ... backward(...)         // backward runs outside autocast, always
//
// It is op-dispatch machinery, so it lives beside the ops: each op calls autocast_inputs(Op::..., ...)
// first, and the casts it inserts are mg::cast ops, recorded on the tape before the op.
// - The op saves its f16 inputs (half the activation memory), and an f32 parameter's gradient comes
//   back f32 through the cast's backward.
// - Regions nest; an inner Autocast(dtype, false) turns casting off, and each guard restores the
//   previous state on exit. backward() always runs with autocast off.
// - Weight-cast cache: inside the outermost region, an f32 leaf that requires grad (a parameter) is
//   cast to f16/bf16 once and the cast is reused, so an LSTM unrolled over 64 steps casts its weights
//   once. A reuse must still be valid: same data version (no optimizer step since), the same tape
//   (no backward since), and the same grad mode (a cast made under NoGradGuard is not on the tape,
//   so it must never serve a grad-enabled use, a bug PyTorch shipped for years). Cleared when the outermost
//   guard exits.
// - f64 and i32 tensors are never cast. Inside an f16 region a bf16 input of a listed op is an error
//   (and the reverse): mixing the two low-precision formats is never what was meant.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "autograd/cast_policy.h"
#include "autograd/fp8.h"
#include "core/tensor.h"

namespace mg {

class Autocast {
 public:
  // dtype: F16 or BF16. enabled=false makes a region where nothing is cast. fp8: the FP8 region's
  // options (autograd/fp8.h): Linear layers run their GEMMs in FP8, every other op as autocast says.
  // A region without fp8 (or disabled) is not an FP8 region, even inside one.
  explicit Autocast(DType dtype = DType::F16, bool enabled = true, std::optional<Fp8Options> fp8 = std::nullopt);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool previous_enabled_;
  DType previous_dtype_;
  std::optional<Fp8Options> fp8_;  // the region's own copy, which fp8_autocast_options() points to
  const Fp8Options* previous_fp8_;
};

bool autocast_enabled();  // is this thread inside an enabled region?
DType autocast_dtype();  // the innermost region's dtype (F16 outside any region)
DType last_autocast_dtype();  // the dtype of this thread's most recent enabled region (F16 before any)

// What an op calls first: its inputs, cast per the op's row of kOps. Outside a region the inputs
// come back unchanged. Throws mg::Error for a banned op or mixed f16/bf16.
void autocast_inputs(Op op, std::vector<Tensor>& inputs);
// The same for a user's own op, which has no row: it names its policy (and its name, for errors).
void autocast_inputs(CastPolicy policy, const char* op_name, std::vector<Tensor>& inputs);
// The dtype autocast_input(op, x) would give x, after the same checks, without casting it: for an op
// that reads a lower-precision input as it is and widens it inside its kernel (layer_norm reads bf16
// rows into f32, the values the cast would have made, without a pass that writes them all first).
DType autocast_input_dtype(Op op, const Tensor& x);
// One tensor: const Tensor x = autocast_input(Op::Exp, x_in);
Tensor autocast_input(Op op, const Tensor& x);
// A fixed number of tensors: auto [a, b] = autocast_inputs(Op::MatMul, a_in, b_in);
template <class... Tensors>
std::array<Tensor, sizeof...(Tensors)> autocast_inputs(Op op, const Tensors&... tensors) {
  if (!autocast_enabled()) return {tensors...};
  std::vector<Tensor> inputs{tensors...};
  autocast_inputs(op, inputs);
  std::array<Tensor, sizeof...(Tensors)> out;
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = inputs[i];
  return out;
}

// The weight-cast cache of this thread: entries held, casts served from it, and casts made for it.
struct CastCacheStats {
  std::size_t entries = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
};
CastCacheStats cast_cache_stats();

}  // namespace mg
