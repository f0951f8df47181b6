#include "amp/recipe.h"

#include <fmt/ranges.h>

#include <algorithm>

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

// An FP4 recipe: mixed_bfloat16 with the Linear GEMMs in FP4 (autograd/fp4.h), all but the last Linear.
Recipe make_fp4(std::string name, Fp8Scaling scaling) {
  Recipe recipe = make(std::move(name), DType::F32, DType::BF16, false, LossScaling::None);
  recipe.fp8 = Fp8Options{.scaling = scaling, .bf16_last_layers = 1};
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
      make_fp4("nvfp4", Fp8Scaling::Nvfp4),
      make_fp4("mxfp4", Fp8Scaling::Mxfp4),
  };
}

// The model's Linear layers, in the order of its children (the order they were registered).
void collect_linears(nn::Module& module, std::vector<nn::Linear*>& out) {
  if (auto* linear = dynamic_cast<nn::Linear*>(&module)) out.push_back(linear);
  for (const auto& [name, child] : module.children()) collect_linears(*child, out);
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
  if (!fp8) return;
  std::vector<nn::Linear*> linears;
  collect_linears(model, linears);
  const auto count = static_cast<std::int64_t>(linears.size());
  const std::int64_t kept = std::min<std::int64_t>(std::max(fp8->bf16_last_layers, 0), count);
  MG_CHECK(
      kept < count || (kept == 0 && !is_fp4(fp8->scaling)),
      "amp::Recipe::prepare ({}): the model has {} Linear layer(s) and the recipe keeps the last {} in bf16, so "
      "none would run in {}; {} acts on nn::Linear only (a model whose only Linear is its head, such as the char "
      "LSTM, has nothing to give it): choose a model with more Linear layers, or set bf16_last_layers lower (mixgrad train --bf16-last-layers)",
      name, count, fp8->bf16_last_layers, is_fp4(fp8->scaling) ? "FP4" : "FP8", name);
  for (std::int64_t i = 0; i < count; ++i) {
    nn::Linear& linear = *linears[static_cast<std::size_t>(i)];
    linear.keep_bf16 = i >= count - kept;
    if (fp8->scaling == Fp8Scaling::Delayed) linear.enable_fp8(fp8->amax_history_len);
    if (is_fp4(fp8->scaling)) linear.enable_fp4(static_cast<std::uint32_t>(i));
  }
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
  if (fp8 && is_fp4(fp8->scaling))
    region += fmt::format(", Linear GEMMs in {}", fp8->describe());
  else if (fp8)
    region += fmt::format(", Linear GEMMs in FP8: {} scaling", fp8->describe());
  return fmt::format("{}: parameters {}, {}, {}, {}{}", name, parameter_dtype, region,
                     master_weights ? "f32 master weights" : "no master copy", scaling, scale);
}

}  // namespace mg::amp
