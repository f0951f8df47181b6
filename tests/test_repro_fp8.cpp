// `mixgrad repro` (tools/repro/): reduced versions of E8..E11, the FP8 papers' experiments, asserting
// their qualitative outcomes, and the pieces they are built from (fp8_effect, linear_operands). As in
// test_repro.cpp (E1..E7) the runs are tiny, so the assertions are orderings with margins.
#include <algorithm>
#include <cmath>
#include <optional>

#include "tests/repro_fixtures.h"
#include "tests/testing.h"
#include "tools/repro/e10_fp8_accumulation.h"
#include "tools/repro/e11_gradient_formats.h"
#include "tools/repro/e8_fp8_parity.h"
#include "tools/repro/e9_granularity.h"
#include "tools/repro/fp8_effect.h"
#include "tools/repro/linear_operands.h"

using namespace mg;
using namespace mg::tools::repro;
using namespace mg::testing::repro;

TEST_CASE("fp8_effect: what a cast into E4M3 or E5M2 flushes, leaves subnormal and saturates, counted exactly") {
  // 896 is past E4M3's 448; 2^-11 is below half of E4M3's smallest subnormal (2^-9); 2^-8 is an E4M3
  // subnormal, exact; 1 is normal; 0 is not counted among the non-zero values.
  const Tensor x = from_vector({896, 0x1p-11, 0x1p-8, 1, 0}, {1, 5});
  const Fp8Effect e4m3 = fp8_effect_with_scale(x, 1.0f, DType::E4M3);
  CHECK(e4m3.values == 5);
  CHECK(e4m3.nonzero == 4);
  CHECK(e4m3.flushed == 1);
  CHECK(e4m3.saturated == 1);
  CHECK(e4m3.subnormal == 1);
  CHECK(e4m3.mean_element_error() == doctest::Approx((0.5 + 1.0) / 4));  // 896 -> 448, 2^-11 -> 0
  // E5M2 holds all four exactly (57344 and 2^-14 bound its normals).
  const Fp8Effect e5m2 = fp8_effect_with_scale(x, 1.0f, DType::E5M2);
  CHECK(e5m2.flushed + e5m2.saturated + e5m2.subnormal == 0);
  CHECK(e5m2.relative_error() == 0);
  // Scaled per tensor (448 / 896), nothing saturates, and 2^-11 falls further: still flushed.
  const Fp8Effect scaled = fp8_effect_of(x, Fp8Role::Input, Fp8Options{.scaling = Fp8Scaling::Current});
  CHECK(scaled.saturated == 0);
  CHECK(scaled.flushed == 1);
  Fp8Effect merged = e4m3;
  merged.merge(e5m2);
  CHECK(merged.nonzero == 8);
  CHECK(merged.flushed_share() == doctest::Approx(1.0 / 8));
}

TEST_CASE("linear_operands: every nn::Linear's input and output gradient, and nothing else named linear") {
  Generator generator(0);
  const std::shared_ptr<nn::Module> mlp = mlp_784_256_256_10(generator);
  std::vector<std::string> inputs, gradients;
  std::vector<Shape> input_shapes;
  {
    LinearOperands watch(
        *mlp,
        [&](const LinearOperand& x) {
          inputs.push_back(x.layer);
          input_shapes.push_back(x.values.shape());
        },
        [&](const LinearOperand& g) { gradients.push_back(g.layer); });
    backward(sum((*mlp)(tiny_fashion()->train_images.slice(0, 4))));
  }
  CHECK(inputs == std::vector<std::string>{"1", "3", "5"});
  CHECK(input_shapes == std::vector<Shape>{{4, 784}, {4, 256}, {4, 256}});
  CHECK(gradients == std::vector<std::string>{"5", "3", "1"});  // backward meets them in reverse
  // The char LSTM's recurrence projects its input with the same op, inside the LSTM: not a Linear.
  const std::shared_ptr<nn::Module> lstm = char_lstm(small_text()->vocab, 8, 16)(generator);
  inputs.clear();
  {
    LinearOperands watch(
        *lstm, [&](const LinearOperand& x) { inputs.push_back(x.layer); }, nullptr);
    NoGradGuard no_grad;
    (*lstm)(small_text()->train.slice(0, 24).reshape({2, 12}));
  }
  CHECK(inputs == std::vector<std::string>{"head"});
}

TEST_CASE("E8: every FP8 recipe trains the MLP to mixed_bfloat16's accuracy; the char LSTM's head runs in FP8") {
  E8Options o;
  o.images.mlp_steps = 150;
  o.images.cnn_steps = 20;
  o.images.cnn = nn::CnnOptions{.channels1 = 4, .channels2 = 8, .hidden = 32};
  o.images.batch = 32;
  o.images.log_every = 10;
  o.images.eval_every = 0;
  o.language.steps = 20;
  o.language.batch = 16;
  o.language.context = 16;
  o.language.hidden = 32;
  o.language.embed_dim = 16;
  o.variant_ids = {"V5", "V8", "V9", "V10", "V11"};
  E8Result r = run_e8(o, small_fashion(), nullptr);
  REQUIRE(r.models.size() == 2);  // MLP and CNN
  const E8Model& mlp = r.models[0];
  REQUIRE(mlp.runs.size() == 5);
  const RunResult& bf16 = e8_runs_of(mlp, "V5")->front();
  CHECK(bf16.final_accuracy > 0.7);
  for (const char* id : {"V8", "V9", "V10", "V11"}) {
    const RunResult& fp8 = e8_runs_of(mlp, id)->front();
    INFO(id << ": " << fp8.final_accuracy << " vs mixed_bfloat16 " << bf16.final_accuracy << ", late loss gap "
            << late_loss_gap(fp8, bf16));
    CHECK(fp8.variant.recipe.fp8.has_value());
    CHECK_FALSE(identical_trajectories(fp8, bf16));  // FP8 reached the GEMMs
    CHECK(std::fabs(fp8.final_accuracy - bf16.final_accuracy) < 0.03);
    CHECK(std::fabs(late_loss_gap(fp8, bf16)) < 0.05);
  }
  for (const std::vector<RunResult>& cnn : r.models[1].runs) CHECK(cnn.front().final_accuracy > 0.2);  // chance: 0.1
  // The gaps by hand: a run minus itself is 0 in both quarters, and a diverged run has none.
  CHECK(early_loss_gap(bf16, bf16) == 0);
  CHECK(late_loss_gap(bf16, bf16) == 0);
  RunResult diverged = bf16;
  diverged.diverged = true;
  CHECK(std::isnan(late_loss_gap(diverged, bf16)));
  // The char LSTM: only its head is an nn::Linear, and FP8 changes its training all the same.
  o.images.mlp_steps = o.images.cnn_steps = 1;
  o.variant_ids = {"V5", "V11"};
  r = run_e8(o, nullptr, small_text());
  REQUIRE(r.models.size() == 1);
  CHECK(r.models[0].text);
  const RunResult &lstm_bf16 = e8_runs_of(r.models[0], "V5")->front(),
                  &lstm_mx = e8_runs_of(r.models[0], "V11")->front();
  CHECK(std::isfinite(lstm_mx.final_bpc));
  CHECK_FALSE(identical_trajectories(lstm_mx, lstm_bf16));
}

TEST_CASE("E9: outlier channels cost one scale per tensor; MX's floor saturates where rounding up does not") {
  const Tensor x = outlier_activations(64, 256, 0.01, 1000, 0);
  CHECK(channel_outlier_ratio(x) > 100);
  CHECK(channel_outlier_ratio(outlier_activations(64, 256, 0.01, 1, 0)) < 3);
  const E9Measure m = measure_scalings("synthetic", x);
  REQUIRE(m.effects.size() == e9_scalings().size());
  const Fp8Effect &tensor = m.effects[0], &tiles = m.effects[1], &floor = m.effects[2], &up = m.effects[3];
  INFO("flushed: per tensor " << tensor.flushed_share() << ", tiles " << tiles.flushed_share() << ", MX "
                              << floor.flushed_share());
  CHECK(tensor.flushed_share() > 2 * floor.flushed_share());  // the outliers' scale flushes the rest
  CHECK(tensor.mean_element_error() > 1.2 * floor.mean_element_error());
  CHECK(tensor.saturated == 0);  // a scale from the tensor's own amax never saturates
  CHECK(tiles.saturated == 0);
  CHECK(floor.saturated > 0);  // the spec's exponent leaves [448, 512) of each block's top binade to clamp
  CHECK(up.saturated == 0);
  // A short run: the MLP's activations measured, its loss gaps trained here, then taken from an "E8".
  E9Options o;
  o.training.images.mlp_steps = 60;
  o.training.images.batch = 32;
  o.training.images.log_every = 10;
  o.training.images.eval_every = 0;
  o.watched_steps = 20;
  o.synthetic_rows = 32;
  o.synthetic_channels = 256;
  o.outlier_factors = {1, 100};
  o.gap_variant_ids = {"V5", "V11"};
  o.gap_models = {"MLP"};
  const E9Result r = run_e9(o, tiny_fashion(), nullptr);
  REQUIRE(r.real.size() == 4);  // layers 1, 3, 5, and all together
  CHECK(r.real[0].source.find("layer 1") != std::string::npos);
  CHECK(r.real[3].effects[0].values == 2 * 32 * (784 + 256 + 256));  // two logged steps watched, batch 32
  REQUIRE(r.gaps.size() == 1);
  REQUIRE(r.gaps[0].runs.size() == 2);
  CHECK(r.from_e8.empty());
  CHECK(r.gaps[0].runs[0].front().final_accuracy == r.measured.final_accuracy);  // the measured run is V5's
  E8Result e8{.options = {}, .models = {E8Model{.name = "MLP", .runs = r.gaps[0].runs}}};
  const E9Result again = run_e9(o, tiny_fashion(), nullptr, &e8);
  CHECK(again.from_e8 == std::vector<std::string>{"MLP V5", "MLP V11"});
  CHECK(e9_from_e8(again, "MLP", "V11"));
  CHECK(again.gaps[0].runs[1].front().final_accuracy == r.gaps[0].runs[1].front().final_accuracy);
}

TEST_CASE("E10: the 13-bit accumulator's error grows with K, promotion every 128 caps it, and V13 trains") {
  const std::vector<GemmError> errors = fp8_gemm_errors({128, 2048}, 8, 8, 0);
  REQUIRE(errors.size() == 4);
  for (const GemmError& e : errors) {
    INFO(e.distribution << " K = " << e.k);
    REQUIRE(e.largest.size() == e10_accumulators().size());
    CHECK(e.largest[0] < 1e-5);  // f32: the FP8 products summed as the contract says
    CHECK(e.largest[1] > 10 * e.largest[0]);  // 13 bits lose far more
    CHECK(e.largest[4] > e.largest[1]);  // every product cut alone loses more than exact groups of 32
    CHECK(e.normwise[3] < e.normwise[1]);  // rounding to nearest loses less than truncation
  }
  for (const std::string distribution : {"zero-mean", "positive"}) {
    const GemmError &short_k = errors[distribution == "positive" ? 2 : 0],
                    &long_k = errors[distribution == "positive" ? 3 : 1];
    INFO(distribution);
    CHECK(long_k.normwise[1] > 4 * short_k.normwise[1]);  // never promoted: the error grows with K
    CHECK(long_k.normwise[1] > 4 * long_k.normwise[2]);  // promoted every 128: capped
    CHECK(long_k.normwise[2] < 2 * short_k.normwise[2]);
  }
  E10Options o;
  o.lengths = {64};
  o.rows = o.cols = 2;
  o.images.mlp_steps = 4;
  o.images.batch = 8;
  o.images.log_every = 2;
  o.images.eval_every = 0;
  o.variant_ids = {"V8", "V13"};
  const E10Result r = run_e10(o, tiny_fashion());
  const RunResult &f32 = by_id(r.mlp, "V8"), &limited = by_id(r.mlp, "V13");
  CHECK(limited.variant.recipe.fp8->accumulator.limited);
  CHECK(std::isfinite(limited.final_accuracy));
  CHECK_FALSE(identical_trajectories(f32, limited));  // the model reached the training GEMMs
}

TEST_CASE("E11: per tensor, E4M3 flushes gradients that E5M2 keeps; unscaled, E5M2 keeps far more") {
  E11Options o;
  o.images.mlp_steps = 40;
  o.images.batch = 32;
  o.images.log_every = 10;
  o.images.eval_every = 0;
  o.record_every = 20;
  const E11Result r = run_e11(o, tiny_fashion(), nullptr);
  REQUIRE(r.models.size() == 1);
  const E11Model& mlp = r.models[0];
  REQUIRE(mlp.gradients.size() == 4);  // layers 5, 3, 1 (backward order), and all together
  CHECK(mlp.gradients[0].layer == "5");
  CHECK(mlp.gradients[0].tensors == 2);  // steps 20 and 40
  const E11Gradients& all = mlp.gradients[3];
  CHECK(all.effects[0].values == 2 * 32 * (10 + 256 + 256));
  std::int64_t binned = 0;
  for (std::int64_t n : all.exponents.counts) binned += n;
  CHECK(binned == all.effects[0].nonzero);  // every non-zero gradient value in one bin
  const Fp8Effect &e4m3 = all.effects[0], &e5m2 = all.effects[1], &e4m3_scaled = all.effects[2],
                  &e5m2_scaled = all.effects[3];
  INFO("flushed: unscaled E4M3 " << e4m3.flushed_share() << ", E5M2 " << e5m2.flushed_share() << "; per tensor E4M3 "
                                 << e4m3_scaled.flushed_share() << ", E5M2 " << e5m2_scaled.flushed_share());
  CHECK(e4m3.flushed_share() > 0.5);  // gradients of ~1e-4 are below E4M3's 2^-9 without a scale
  CHECK(e5m2.flushed_share() < e4m3.flushed_share() - 0.2);
  CHECK(e4m3_scaled.flushed_share() > 2 * e5m2_scaled.flushed_share());
  CHECK(e5m2_scaled.saturated == 0);
  const RunResult &e5 = by_id(mlp.runs, "V8"), &e4 = by_id(mlp.runs, "V12");
  CHECK(e4.variant.recipe.fp8->backward_format == DType::E4M3);
  CHECK_FALSE(identical_trajectories(e4, e5));
}
