// Recipes: the precision setups users know by name, selectable by a string everywhere.
//
//   name             parameters  autocast  master copy  loss scaling
//   fp32             f32         -         -            -            plain f32 training
//   mixed_float16    f32         f16       (the params) dynamic      PyTorch AMP: f32 params are the master copy
//   mixed_bfloat16   f32         bf16      (the params) -            bf16 has f32's range: no scaler
//   float16_master   f16         f16       f32          dynamic      the paper's recipe, literally (Apex O2):
//                                                                    the optimizer's master_weights
//   float16_pure     f16         f16       -            -            ablation only: updates rounded into f16
//   bfloat16_pure    bf16        bf16      -            -            updates rounded into bf16: lost to nearest,
//                                                                    kept stochastically or with Kahan's
//                                                                    compensation (optim::UpdateRounding)
//   fp8_delayed      f32         bf16+FP8  (the params) -            Linear GEMMs in FP8, per-tensor delayed scaling
//   fp8_current      f32         bf16+FP8  (the params) -            ... per-tensor current scaling
//   fp8_block        f32         bf16+FP8  (the params) -            ... DeepSeek-V3's 1x128 / 128x128 blocks
//   mxfp8            f32         bf16+FP8  (the params) -            ... OCP MX: blocks of 32, E8M0 scales, E4M3 only
//   nvfp4            f32         bf16+FP4  (the params) -            Linear GEMMs in NVFP4 (E4M3 scales per 16, f32
//                                                                    per tensor), but the last Linear in bf16
//   mxfp4            f32         bf16+FP4  (the params) -            ... in MXFP4 (E8M0 scales per 32)
//
// The FP8 recipes (autograd/fp8.h) run every nn::Linear's three GEMMs in FP8 (E4M3 forward, E5M2
// gradients; mxfp8: E4M3 both ways) and everything else as mixed_bfloat16. Their per-tensor or per-block
// scales do for the gradients what loss scaling does for f16, so they need no scaler. The FP4 recipes
// (autograd/fp4.h) do the same in 4 bits, with a Hadamard transform and stochastic rounding on the weight
// gradient; their Fp8Options switch each ingredient off for ablations (recipe.fp8->hadamard, ...). Call
// recipe.prepare(model) before training: it gives each Linear its delayed-scaling or FP4 state and marks
// the last bf16_last_layers Linears to stay in bf16 (an error if none would be left in FP4).
//
// The pure recipes exist to reproduce the paper's Figure 2a: without a master copy, an update
// smaller than half a weight's ulp is lost. Nobody should train with them as they are; bfloat16_pure
// with {.update_rounding = Stochastic or Kahan} in the optimizer's options (mixgrad train
// --update-rounding) is Zamirai et al.'s answer, which keeps 4 bytes a parameter fewer than a master.
//
//   amp::Recipe recipe = amp::Recipe::parse("float16_master");
//   recipe.cast_parameters(parameters);                         // f16 storage for *_master/*_pure
//   optim::SGD sgd(parameters, {.lr = 0.1, .master_weights = recipe.master_weights});
//   amp::GradScaler scaler = recipe.make_scaler();                // disabled where not needed
//   { Autocast region = recipe.autocast(); loss = ...; }
//   mg::backward(scaler.scale(loss)); scaler.step(sgd); scaler.update();
//
// train::make_optimizer (train/trainer.h) builds SGD, Adam, AdamW or Adagrad by name with the recipe's masters.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/autocast.h"
#include "amp/grad_scaler.h"
#include "autograd/fp8.h"
#include "nn/module.h"

namespace mg::amp {

enum class LossScaling { None, Dynamic, Static };

struct Recipe {
  std::string name;
  DType parameter_dtype = DType::F32;  // how the model stores its parameters
  std::optional<DType> autocast_dtype;  // the autocast region's dtype; none: no casting
  bool master_weights = false;  // the optimizer keeps an f32 master of each parameter (optim/optimizer.h)
  LossScaling loss_scaling = LossScaling::None;
  double static_scale = 1024.0;  // S for LossScaling::Static (the paper's constant scale)
  std::optional<Fp8Options> fp8;  // the FP8 recipes' options; none for the others

  // One of names(); any other string is an error that lists them.
  static Recipe parse(std::string_view name);
  static const std::vector<std::string>& names();

  // An Autocast region for the forward pass (a disabled one for fp32; an FP8 region for the FP8 recipes).
  Autocast autocast() const { return Autocast(autocast_dtype.value_or(DType::F16), autocast_dtype.has_value(), fp8); }
  // What the model needs before training under this recipe: for the FP8 recipes with delayed scaling,
  // each nn::Linear's amax histories (nn::Linear::enable_fp8); nothing for the others.
  void prepare(nn::Module& model) const;
  // Converts each parameter's storage to parameter_dtype in place (every holder of the tensor sees
  // it), dropping its .grad; call before building the optimizer.
  void cast_parameters(const std::vector<Tensor>& parameters) const;
  // A GradScaler set up for the recipe: dynamic, static (init_scale = static_scale) or disabled;
  // `options` supplies everything else.
  GradScaler make_scaler(GradScalerOptions options = {}) const;
  std::string describe() const;  // one line, e.g. for a log header
};

}  // namespace mg::amp
