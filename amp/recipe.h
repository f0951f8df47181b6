// Recipes: the precision setups users know by name, selectable by a string everywhere.
//
//   name             parameters  autocast  master copy  loss scaling
//   fp32             f32         -         -            -            plain f32 training
//   mixed_float16    f32         f16       (the params) dynamic      PyTorch AMP: f32 params are the master copy
//   mixed_bfloat16   f32         bf16      (the params) -            bf16 has f32's range: no scaler
//   float16_master   f16         f16       f32          dynamic      the paper's recipe, literally (Apex O2)
//   float16_pure     f16         f16       -            -            ablation only: updates rounded into f16
//   bfloat16_pure    bf16        bf16      -            -            ablation only: updates rounded into bf16
//
// The pure recipes exist to reproduce the paper's Figure 2a: without a master copy, an update
// smaller than half a weight's ulp is lost. Nobody should train with them.
//
//   amp::Recipe recipe = amp::Recipe::parse("mixed_float16");
//   recipe.cast_parameters(parameters);                         // f16 storage for *_master/*_pure
//   auto optimizer = recipe.make_optimizer(parameters, make_sgd); // MasterWeights where needed
//   amp::GradScaler scaler = recipe.make_scaler();                // disabled where not needed
//   { Autocast region = recipe.autocast(); loss = ...; }
//   mg::backward(scaler.scale(loss)); scaler.step(*optimizer); scaler.update();
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/autocast.h"
#include "amp/grad_scaler.h"
#include "amp/master_weights.h"

namespace mg::amp {

enum class LossScaling { None, Dynamic, Static };

struct Recipe {
  std::string name;
  DType parameter_dtype = DType::F32;  // how the model stores its parameters
  std::optional<DType> autocast_dtype;  // the autocast region's dtype; none: no casting
  bool master_weights = false;          // an f32 master copy owned by amp::MasterWeights
  LossScaling loss_scaling = LossScaling::None;
  double static_scale = 1024.0;  // S for LossScaling::Static (the paper's constant scale)

  // One of names(); any other string is an error that lists them.
  static Recipe parse(std::string_view name);
  static const std::vector<std::string>& names();

  // An Autocast region for the forward pass (a disabled one for fp32).
  Autocast autocast() const { return Autocast(autocast_dtype.value_or(DType::F16), autocast_dtype.has_value()); }
  // Converts each parameter's storage to parameter_dtype in place (every holder of the tensor sees
  // it), dropping its .grad; call before building the optimizer.
  void cast_parameters(const std::vector<Tensor>& parameters) const;
  // make_optimizer(parameters), wrapped in MasterWeights when the recipe keeps a master copy.
  std::unique_ptr<optim::Optimizer> make_optimizer(const std::vector<Tensor>& parameters,
                                                   const MasterWeights::MakeOptimizer& make_optimizer) const;
  // The same with parameter groups (optim/optimizer.h): make_optimizer receives the groups, over
  // the f32 masters when the recipe keeps a master copy.
  std::unique_ptr<optim::Optimizer> make_optimizer(const std::vector<optim::ParamGroup>& groups,
                                                   const MasterWeights::MakeGroupedOptimizer& make_optimizer) const;
  // A GradScaler set up for the recipe: dynamic, static (init_scale = static_scale) or disabled;
  // `options` supplies everything else.
  GradScaler make_scaler(GradScalerOptions options = {}) const;
  std::string describe() const;  // one line, e.g. for a log header
};

}  // namespace mg::amp
