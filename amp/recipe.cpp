#include "amp/recipe.h"

#include <fmt/ranges.h>

#include "autograd/ops.h"
#include "nn/linear.h"

namespace mg::amp {

namespace {

Recipe make(std::string name, DType parameters, std::optional<DType> autocast, bool master, LossScaling scaling) {
  Recipe recipe;
  recipe.name = std::move(name);
  recipe.parameter_dtype = parameters;
  recipe.autocast_dtype = autocast;
  recipe.master_weights = master;
  recipe.loss_scaling = scaling;
  return recipe;
}

// An FP8 recipe: mixed_bfloat16 with the Linear GEMMs in FP8, scaled as `scaling` says.
Recipe make_fp8(std::string name, Fp8Scaling scaling, DType backward_format) {
  Recipe recipe = make(std::move(name), DType::F32, DType::BF16, false, LossScaling::None);
  recipe.fp8 = Fp8Options{.scaling = scaling, .backward_format = backward_format};
  return recipe;
}

// The table of amp/recipe.h: name, parameter dtype, autocast dtype, master copy, loss scaling.
std::vector<Recipe> recipes() {
  using enum LossScaling;
  using enum DType;
  return {
      make("fp32", F32, std::nullopt, false, None),
      make("mixed_float16", F32, F16, false, Dynamic),
      make("mixed_bfloat16", F32, BF16, false, None),
      make("float16_master", F16, F16, true, Dynamic),
      make("float16_pure", F16, F16, false, None),
      make("bfloat16_pure", BF16, BF16, false, None),
      make_fp8("fp8_delayed", Fp8Scaling::Delayed, DType::E5M2),  // Transformer Engine's default (HYBRID)
      make_fp8("fp8_current", Fp8Scaling::Current, DType::E5M2),
      make_fp8("fp8_block", Fp8Scaling::Block, DType::E4M3),  // DeepSeek-V3: E4M3 on all tensors
      make_fp8("mxfp8", Fp8Scaling::Mx, DType::E4M3),  // MX: E4M3 on all tensors
  };
}

void enable_fp8_everywhere(nn::Module& module, int history_len) {
  if (auto* linear = dynamic_cast<nn::Linear*>(&module)) linear->enable_fp8(history_len);
  for (const auto& [name, child] : module.children()) enable_fp8_everywhere(*child, history_len);
}

}  // namespace

const std::vector<std::string>& Recipe::names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (const Recipe& recipe : recipes()) all.push_back(recipe.name);
    return all;
  }();
  return names;
}

Recipe Recipe::parse(std::string_view name) {
  for (const Recipe& recipe : recipes())
    if (recipe.name == name) return recipe;
  throw Error(fmt::format("amp::Recipe::parse: unknown precision recipe '{}'; choose one of {}", name,
                          fmt::join(names(), ", ")));
}

void Recipe::cast_parameters(const std::vector<Tensor>& parameters) const {
  NoGradGuard no_grad;
  for (const Tensor& p : parameters)  // every check before any change
    MG_CHECK(p.defined() && is_floating(p.dtype()) && p.is_leaf(),
             "amp::Recipe::cast_parameters ({}): every parameter must be a floating leaf", name);
  for (const Tensor& p : parameters) cast_storage_(p, parameter_dtype);
}

void Recipe::prepare(nn::Module& model) const {
  if (fp8 && fp8->scaling == Fp8Scaling::Delayed) enable_fp8_everywhere(model, fp8->amax_history_len);
}

GradScaler Recipe::make_scaler(GradScalerOptions options) const {
  options.enabled = loss_scaling != LossScaling::None;
  options.dynamic = loss_scaling == LossScaling::Dynamic;
  if (loss_scaling == LossScaling::Static) options.init_scale = static_scale;
  return GradScaler(options);
}

std::string Recipe::describe() const {
  const char* scaling = loss_scaling == LossScaling::Dynamic  ? "dynamic loss scaling"
                        : loss_scaling == LossScaling::Static ? "static loss scale"
                                                              : "no loss scaling";
  std::string region = autocast_dtype ? fmt::format("autocast {}", *autocast_dtype) : "no autocast";
  std::string scale = loss_scaling == LossScaling::Static ? fmt::format(" S = {}", static_scale) : "";
  if (fp8) region += fmt::format(", Linear GEMMs in FP8: {} scaling", fp8->describe());
  return fmt::format("{}: parameters {}, {}, {}, {}{}", name, parameter_dtype, region,
                     master_weights ? "f32 master weights" : "no master copy", scaling, scale);
}

}  // namespace mg::amp
