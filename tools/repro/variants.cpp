#include "tools/repro/variants.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace mg::tools::repro {

namespace {

using enum amp::LossScaling;
using enum kernels::Accumulation;

// V12..V15: what each changes in its recipe's FP8 options.
void gradients_in_e4m3(Fp8Options& o) { o.backward_format = DType::E4M3; }
void limited_accumulator(Fp8Options& o) { o.accumulator = {.limited = true, .promote_every = 0}; }
void promoted_accumulator(Fp8Options& o) { o.accumulator = {.limited = true, .promote_every = 128}; }
void mx_exponent_rounded_up(Fp8Options& o) { o.mx_rule = MxScaleRule::RoundUp; }
// V18..V22: one ingredient of nvfp4 each.
void no_hadamard(Fp8Options& o) { o.hadamard = HadamardMode::Off; }
void fixed_hadamard(Fp8Options& o) { o.hadamard = HadamardMode::Deterministic; }
void nearest_gradients(Fp8Options& o) { o.stochastic_gradients = false; }
void weight_blocks_1d(Fp8Options& o) { o.weight_blocks_2d = false; }
void every_linear(Fp8Options& o) { o.bf16_last_layers = 0; }

// The variants, as the table in variants.h has them. V3's name and description end with its S.
struct Row {
  std::string_view id, name, recipe;
  amp::LossScaling scaling;
  kernels::Accumulation accumulation;
  std::string_view description;
  void (*fp8_change)(Fp8Options&) = nullptr;  // applied to the recipe's FP8 options
  optim::UpdateRounding rounding = optim::UpdateRounding::Nearest;  // V23, V24
};
constexpr Row kRows[] = {
    {"V0", "fp32", "fp32", None, F32, "f32 everywhere: the control"},
    {"V1", "float16_pure", "float16_pure", None, F32, "f16 weights updated in place, no master copy, no scaling"},
    {"V2", "float16_master", "float16_master", None, F32, "f16 weights and math, f32 master copy, no loss scaling"},
    {"V3", "float16_master_S", "float16_master", Static, F32,
     "f16 weights and math, f32 master copy, constant loss scale S = "},
    {"V4", "float16_dynamic", "float16_master", Dynamic, F32,
     "f16 weights and math, f32 master copy, dynamic loss scaling (GradScaler)"},
    {"V5", "mixed_bfloat16", "mixed_bfloat16", None, F32, "f32 weights, bf16 math under autocast, no scaling"},
    {"V6", "bfloat16_pure", "bfloat16_pure", None, F32, "bf16 weights updated in place, no master copy"},
    {"V7", "float16_f16_accum", "float16_master", Dynamic, F16,
     "V4 with every f16 GEMM accumulating its products in f16 instead of f32 (an ablation)"},
    {"V8", "fp8_delayed", "fp8_delayed", None, F32,
     "V5 with every Linear's GEMMs in FP8: E4M3 forward, E5M2 gradients, per-tensor scales from an amax history"},
    {"V9", "fp8_current", "fp8_current", None, F32,
     "V5 with every Linear's GEMMs in FP8: E4M3 forward, E5M2 gradients, per-tensor scales from the tensor's own amax"},
    {"V10", "fp8_block", "fp8_block", None, F32,
     "V5 with every Linear's GEMMs in FP8: E4M3 throughout, a scale per 1x128 tile of activations and gradients and "
     "per 128x128 block of weights (DeepSeek-V3)"},
    {"V11", "mxfp8", "mxfp8", None, F32,
     "V5 with every Linear's GEMMs in FP8: E4M3 throughout, a power-of-two scale per 32 values (OCP MX)"},
    {"V12", "fp8_delayed_e4m3", "fp8_delayed", None, F32, "V8 with its gradients in E4M3 instead of E5M2",
     gradients_in_e4m3},
    {"V13", "fp8_acc13", "fp8_delayed", None, F32,
     "V8 with the FP8 GEMMs accumulating in the Hopper model (13 mantissa bits, truncated), never promoted",
     limited_accumulator},
    {"V14", "fp8_acc13_promoted", "fp8_delayed", None, F32,
     "V13 with the running sum promoted into f32 every 128 products (DeepSeek-V3)", promoted_accumulator},
    {"V15", "mxfp8_round_up", "mxfp8", None, F32,
     "V11 with each block's shared exponent rounded up (Transformer Engine's rule) instead of the spec's floor",
     mx_exponent_rounded_up},
    {"V16", "nvfp4", "nvfp4", None, F32,
     "V5 with every Linear's GEMMs but the last in NVFP4: E2M1 values, an E4M3 scale per 16 and an f32 scale per "
     "tensor, 16x16 weight blocks, a random Hadamard transform and stochastic rounding on the weight gradient"},
    {"V17", "mxfp4", "mxfp4", None, F32,
     "V5 with every Linear's GEMMs but the last in MXFP4: E2M1 values with a power-of-two scale per 32, the same "
     "transform and stochastic gradients"},
    {"V18", "nvfp4_no_hadamard", "nvfp4", None, F32, "V16 without the Hadamard transform", no_hadamard},
    {"V19", "nvfp4_fixed_hadamard", "nvfp4", None, F32, "V16 with the Hadamard transform's signs all +1",
     fixed_hadamard},
    {"V20", "nvfp4_nearest", "nvfp4", None, F32, "V16 with its gradients rounded to nearest, not stochastically",
     nearest_gradients},
    {"V21", "nvfp4_1d_weights", "nvfp4", None, F32, "V16 with 1x16 weight blocks instead of 16x16", weight_blocks_1d},
    {"V22", "nvfp4_every_linear", "nvfp4", None, F32, "V16 with every Linear in FP4, the head too", every_linear},
    {"V23", "bfloat16_pure_sr", "bfloat16_pure", None, F32,
     "V6 with each update rounded stochastically into the bf16 weight", nullptr, optim::UpdateRounding::Stochastic},
    {"V24", "bfloat16_pure_kahan", "bfloat16_pure", None, F32,
     "V6 with Kahan's compensation of each update (a bf16 buffer of what rounding dropped)", nullptr,
     optim::UpdateRounding::Kahan},
};

}  // namespace

const std::vector<std::string>& variant_ids() {
  static const std::vector<std::string> ids = [] {
    std::vector<std::string> all;
    for (const Row& row : kRows) all.emplace_back(row.id);
    return all;
  }();
  return ids;
}

Variant variant(std::string_view id, double static_scale) {
  MG_CHECK(static_scale > 0, "repro::variant: the static loss scale S must be > 0, got {}", static_scale);
  for (const Row& row : kRows) {
    if (row.id != id) continue;
    Variant v{.id = std::string(row.id),
              .name = std::string(row.name),
              .description = std::string(row.description),
              .recipe = amp::Recipe::parse(row.recipe),
              .scaler = {},
              .monitor = {},
              .accumulation = row.accumulation,
              .update_rounding = row.rounding};
    v.recipe.loss_scaling = row.scaling;
    if (row.fp8_change) row.fp8_change(*v.recipe.fp8);
    if (row.scaling == Static) {
      v.recipe.static_scale = static_scale;
      v.name += fmt::format("{:g}", static_scale);
      v.description += fmt::format("{:g}", static_scale);
    }
    // A repro run is short: the alarm for a collapsing scale would only add noise to the output,
    // and a variant that collapses is a result to report, not an error.
    v.monitor.collapse_patience = 0;
    return v;
  }
  throw Error(
      fmt::format("repro::variant: unknown variant '{}'; choose one of {}", id, fmt::join(variant_ids(), ", ")));
}

std::vector<Variant> variants(const std::vector<std::string>& ids, double static_scale) {
  std::vector<Variant> result;
  for (const std::string& id : ids) result.push_back(variant(id, static_scale));
  return result;
}

}  // namespace mg::tools::repro
