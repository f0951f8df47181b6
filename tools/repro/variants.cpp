#include "tools/repro/variants.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace mg::tools::repro {

namespace {

Variant make(std::string id, std::string name, std::string recipe_name, amp::LossScaling scaling,
             std::string description) {
  Variant v;
  v.id = std::move(id);
  v.name = std::move(name);
  v.recipe = amp::Recipe::parse(recipe_name);
  v.recipe.loss_scaling = scaling;
  v.description = std::move(description);
  // A repro run is short: the alarm for a collapsing scale would only add noise to the output,
  // and a variant that collapses is a result to report, not an error.
  v.monitor.collapse_patience = 0;
  return v;
}

}  // namespace

const std::vector<std::string>& variant_ids() {
  static const std::vector<std::string> ids{"V0", "V1", "V2", "V3", "V4", "V5", "V6", "V7"};
  return ids;
}

Variant variant(std::string_view id, double static_scale) {
  using enum amp::LossScaling;
  MG_CHECK(static_scale > 0, "repro::variant: the static loss scale S must be > 0, got {}", static_scale);
  if (id == "V0") return make("V0", "fp32", "fp32", None, "f32 everywhere: the control");
  if (id == "V1")
    return make("V1", "float16_pure", "float16_pure", None, "f16 weights updated in place, no master copy, no scaling");
  if (id == "V2")
    return make("V2", "float16_master", "float16_master", None, "f16 weights and math, f32 master copy, no loss scaling");
  if (id == "V3") {
    Variant v = make("V3", fmt::format("float16_master_S{:g}", static_scale), "float16_master", Static,
                     fmt::format("f16 weights and math, f32 master copy, constant loss scale S = {:g}", static_scale));
    v.recipe.static_scale = static_scale;
    return v;
  }
  if (id == "V4")
    return make("V4", "float16_dynamic", "float16_master", Dynamic,
                "f16 weights and math, f32 master copy, dynamic loss scaling (GradScaler)");
  if (id == "V5")
    return make("V5", "mixed_bfloat16", "mixed_bfloat16", None, "f32 weights, bf16 math under autocast, no scaling");
  if (id == "V6")
    return make("V6", "bfloat16_pure", "bfloat16_pure", None, "bf16 weights updated in place, no master copy");
  if (id == "V7") {
    Variant v = make("V7", "float16_f16_accum", "float16_master", Dynamic,
                     "V4 with every f16 GEMM accumulating its products in f16 instead of f32 (an ablation)");
    v.accumulation = kernels::Accumulation::F16;
    return v;
  }
  throw Error(fmt::format("repro::variant: unknown variant '{}'; choose one of {}", id, fmt::join(variant_ids(), ", ")));
}

std::vector<Variant> variants(const std::vector<std::string>& ids, double static_scale) {
  std::vector<Variant> result;
  for (const std::string& id : ids) result.push_back(variant(id, static_scale));
  return result;
}

}  // namespace mg::tools::repro
