// The precision variants, V0..V24: the rows of every table `mixgrad repro` writes.
//
//   id  name                 recipe (amp/recipe.h)       loss scaling
//   V0  fp32                 fp32                        -              the control
//   V1  float16_pure         float16_pure                -              f16 weights updated directly (Figure 2a)
//   V2  float16_master       float16_master              none           f32 master copy, no scaling
//   V3  float16_master_S     float16_master              static S       the paper's constant scale
//   V4  float16_dynamic      float16_master              dynamic        GradScaler (init 2^16, x2 / x0.5)
//   V5  mixed_bfloat16       mixed_bfloat16              -              bf16 has f32's range
//   V6  bfloat16_pure        bfloat16_pure               -              bf16 weights updated directly
//   V7  float16_f16_accum    float16_master              dynamic        V4 with every f16 GEMM accumulating
//                                                                       in f16 (E7: the paper's §3.3 ablated)
//   V8  fp8_delayed          fp8_delayed                 -              Linear GEMMs in FP8, per-tensor scales from
//                                                                       an amax history (Transformer Engine)
//   V9  fp8_current          fp8_current                 -              ... per-tensor scales from the tensor itself
//   V10 fp8_block            fp8_block                   -              ... 1x128 / 128x128 blocks, E4M3 (DeepSeek-V3)
//   V11 mxfp8                mxfp8                       -              ... blocks of 32, E8M0 scales (OCP MX)
//   V12 fp8_delayed_e4m3     fp8_delayed                 -              V8 with its gradients in E4M3, not E5M2 (E11)
//   V13 fp8_acc13            fp8_delayed                 -              V8 with the Hopper accumulator model (13
//                                                                       mantissa bits, truncated), never promoted (E10)
//   V14 fp8_acc13_promoted   fp8_delayed                 -              V13 promoted to f32 every 128 products (E10)
//   V15 mxfp8_round_up       mxfp8                       -              V11 with each block's exponent rounded up
//                                                                       (Transformer Engine's rule, never saturates:
//                                                                       E9), not the spec's floor
//   V16 nvfp4                nvfp4                       -              Linear GEMMs in NVFP4 (E12), the head in bf16
//   V17 mxfp4                mxfp4                       -              ... in MXFP4 (E12)
//   V18 nvfp4_no_hadamard    nvfp4                       -              V16 without the Hadamard transform (E13)
//   V19 nvfp4_fixed_hadamard nvfp4                       -              V16 with all the transform's signs +1 (E13)
//   V20 nvfp4_nearest        nvfp4                       -              V16 with its gradients rounded to nearest (E13)
//   V21 nvfp4_1d_weights     nvfp4                       -              V16 with 1x16 weight blocks, not 16x16 (E13)
//   V22 nvfp4_every_linear   nvfp4                       -              V16 with the head in FP4 too (E13)
//   V23 bfloat16_pure_sr     bfloat16_pure               -              V6 with stochastically rounded updates (E14)
//   V24 bfloat16_pure_kahan  bfloat16_pure               -              V6 with Kahan-compensated updates (E14)
//
// V2, V3 and V4 share one recipe (f16 weights with an f32 master copy) and differ only in the loss
// scaling, so an experiment that compares them isolates the scaling: that is why V4 is
// float16_master with the dynamic scaler rather than mixed_float16 (which also differs in where the
// f32 weights live). V7 differs from V4 in the GEMMs' accumulation alone: it is an ablation for E7,
// not a recipe anyone would train with (no amp::Recipe has it: kernels/gemm.h's Accumulation::F16).
// V8..V11 are the four FP8 recipes as amp/recipe.h defines them (E8..E11 compare them with V5, the
// 16-bit recipe they are built on); V12..V15 change one field of V8's or V11's Fp8Options each (the
// gradients' format, the GEMM's accumulator, MX's scale rule: autograd/fp8.h, kernels/fp8.h), so that
// E9, E10 and E11 isolate it. V16 and V17 are the FP4 recipes (E12); V18..V22 change one ingredient of
// V16's options each (autograd/fp4.h), for E13; V23 and V24 change how V6's optimizer stores an update
// (optim::UpdateRounding), for E14.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "amp/grad_scaler.h"
#include "amp/recipe.h"
#include "amp/scale_monitor.h"
#include "kernels/gemm.h"
#include "kernels/optim.h"

namespace mg::tools::repro {

struct Variant {
  std::string id{};  // "V0" .. "V24"
  std::string name;  // short, for tables, CSVs and plot legends ("float16_master_S1024")
  std::string description{};  // one line: what is stored in which precision and how the loss is scaled
  amp::Recipe recipe;  // parameters, autocast, master copy, loss-scaling mode (and S for V3), FP8 options
  amp::GradScalerOptions scaler;  // everything else about the scaler (make_scaler sets enabled/dynamic)
  amp::ScaleMonitorOptions monitor;  // the run's record of the scale (no collapse alarm: see variants.cpp)
  // How the f16 GEMMs of its training steps accumulate (kernels/gemm.h): F16 for V7 only.
  kernels::Accumulation accumulation = kernels::Accumulation::F32;
  // How the optimizer stores an update into f16/bf16 weights without masters: V23 and V24 only.
  optim::UpdateRounding update_rounding = optim::UpdateRounding::Nearest;
};

// The variant with this id. static_scale is S of V3 (ignored by the others); it must be > 0.
// An unknown id is an mg::Error that lists the known ones.
Variant variant(std::string_view id, double static_scale = 1024.0);

// Several at once, in the given order: variants({"V0", "V2"}).
std::vector<Variant> variants(const std::vector<std::string>& ids, double static_scale = 1024.0);

// Every id, V0..V24.
const std::vector<std::string>& variant_ids();

}  // namespace mg::tools::repro
