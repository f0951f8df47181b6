// `mixgrad repro` (tools/repro/): reduced versions of E1..E7 asserting the paper's qualitative
// outcomes (E8..E11, the FP8 papers': test_repro_fp8.cpp). The report's files and the command:
// test_repro_report.cpp.
//
// The runs are tiny (a few thousand images, a hundred-odd steps), so the assertions are orderings
// with margins, never exact accuracies: "float16_pure loses most of its updates and ends several
// points below fp32", not "ends at 61.3%". The one exact assertion is E4's control: scaling the
// loss by 2^-k and the learning rate by 2^k leaves plain SGD's f32 trajectory bit-identical.
#include <algorithm>
#include <cmath>
#include <optional>

#include "tests/repro_fixtures.h"
#include "tests/testing.h"
#include "tools/repro/e1_parity.h"
#include "tools/repro/e2_master_weights.h"
#include "tools/repro/e3_histograms.h"
#include "tools/repro/e4_loss_scaling.h"
#include "tools/repro/e5_language_model.h"
#include "tools/repro/e6_speed_memory.h"
#include "tools/repro/e7_accumulation.h"

using namespace mg;
using namespace mg::tools::repro;
using namespace mg::testing::repro;

TEST_CASE("E2: without master weights f16 loses its updates and accuracy; with them, parity") {
  const E2Result r = run_e2(small_e2(), small_fashion());
  for (const auto* runs : {&r.constant_lr, &r.decaying_lr}) {
    const RunResult &fp32 = by_id(*runs, "V0"), &pure = by_id(*runs, "V1"), &master = by_id(*runs, "V2");
    INFO((runs == &r.constant_lr ? "constant lr" : "decaying lr")
         << ": fp32 " << fp32.final_accuracy << ", float16_pure " << pure.final_accuracy << " (lost "
         << pure.lost_update_fraction << "), float16_master " << master.final_accuracy << " (lost "
         << master.lost_update_fraction << ")");
    CHECK(fp32.final_accuracy > 0.3);  // fp32 learned something to lose (chance: 0.1)
    CHECK(pure.lost_update_fraction > 0.5);  // most updates round away in f16 weights
    CHECK(master.lost_update_fraction < 0.05);  // the f32 masters keep them
    CHECK(std::fabs(master.final_accuracy - fp32.final_accuracy) < 0.02);
    CHECK(pure.final_accuracy < fp32.final_accuracy + 0.01);  // losing updates never helps
  }
  // At the small constant rate the lost updates cost accuracy; with the decaying one most learning
  // happens early, at rates f16 can still represent, and the gap is smaller (see the report).
  CHECK(by_id(r.constant_lr, "V1").final_accuracy < by_id(r.constant_lr, "V0").final_accuracy - 0.05);
}

TEST_CASE("E4: 2^-k starves unscaled f16 of gradients; static or dynamic scaling restores fp32's result") {
  const E4Result r = run_e4(small_e4(), small_fashion());
  REQUIRE(r.sweep.size() == 2);
  CHECK(r.fp32_identical_across_k);  // the control: the same f32 trajectory for every k, bit for bit
  const std::vector<RunResult>& large_k = r.sweep[1];
  const RunResult &fp32 = by_id(large_k, "V0"), &unscaled = by_id(large_k, "V2");
  const double fp32_zeros = mean_over_log(fp32, [](const StepLog& s) { return s.activation_zero_fraction; });
  const double unscaled_zeros = mean_over_log(unscaled, [](const StepLog& s) { return s.activation_zero_fraction; });
  INFO("k=16 activation-gradient zeros: fp32 " << fp32_zeros << ", float16_master unscaled " << unscaled_zeros);
  CHECK(unscaled_zeros > fp32_zeros + 0.3);
  CHECK(unscaled.final_accuracy < fp32.final_accuracy - 0.1);
  for (const char* id : {"V3", "V4"}) {
    const RunResult& scaled = by_id(large_k, id);
    INFO(id << ": " << scaled.final_accuracy << " vs fp32 " << fp32.final_accuracy);
    CHECK(std::fabs(scaled.final_accuracy - fp32.final_accuracy) < 0.03);
    const double zeros = mean_over_log(scaled, [](const StepLog& s) { return s.activation_zero_fraction; });
    CHECK(zeros < fp32_zeros + 0.1);
  }
  // At k = 0 the gradients are in f16's range: unscaled f16 with master weights keeps up.
  CHECK(std::fabs(by_id(r.sweep[0], "V2").final_accuracy - by_id(r.sweep[0], "V0").final_accuracy) < 0.03);
}

TEST_CASE("E4 organic: an autoencoder's own output gradients flush in f16 unless the loss is scaled") {
  E4Options o = small_e4();
  o.ks = {0};
  o.variant_ids = {"V0"};
  o.organic = true;
  o.organic_steps = 60;
  o.organic_batch = 128;
  o.organic_lr = 3e-3;
  o.organic_sizes = {784, 64, 16, 64, 784};
  o.organic_scales = {1024};
  const E4Result r = run_e4(o, tiny_fashion());
  REQUIRE(r.organic.size() == 4);
  auto flushed = [](const RunResult& run) { return run.log.back().logit_zero_in_f16_fraction; };
  const RunResult &fp32 = by_id(r.organic, "V0"), &unscaled = by_id(r.organic, "V2"), &fixed = by_id(r.organic, "V3"),
                  &dynamic = by_id(r.organic, "V4");
  INFO("output gradients zero in f16 at the end: fp32 "
       << flushed(fp32) << ", V2 " << flushed(unscaled) << ", V3 " << flushed(fixed) << ", V4 " << flushed(dynamic)
       << "; test loss fp32 " << fp32.final_test_loss << ", V2 " << unscaled.final_test_loss << ", V4 "
       << dynamic.final_test_loss);
  // Every run learned to reconstruct: below the loss of predicting 0.5 everywhere (log 2).
  for (const RunResult& run : r.organic) CHECK(run.final_test_loss < 0.6);
  // (sigmoid - pixel) / (128 x 784) is below 2^-25 for every pixel the model has within ~3e-3.
  CHECK(flushed(unscaled) > 0.2);
  CHECK(flushed(fp32) > 0.2);  // what f16 would lose of fp32's own gradients: the same pixels
  CHECK(flushed(fixed) < flushed(unscaled) - 0.15);
  CHECK(flushed(dynamic) < 0.05);
  CHECK(std::fabs(dynamic.final_test_loss - fp32.final_test_loss) < 0.01 * fp32.final_test_loss);
}

TEST_CASE("E1: float16_master and mixed_bfloat16 end at fp32's accuracy, seed by seed") {
  E1Options o;
  o.mlp_steps = 200;
  o.cnn_steps = 40;
  o.batch = 32;
  o.log_every = 20;
  o.eval_every = 0;
  o.cnn = nn::CnnOptions{.channels1 = 4, .channels2 = 8, .hidden = 32};
  o.variant_ids = {"V0", "V2", "V5"};
  o.seed_offsets = {0, 1};
  const E1Result r = run_e1(o, small_fashion());
  REQUIRE(r.mlp_seeds.size() == 3);
  REQUIRE(r.mlp_seeds[0].size() == 2);
  const RunResult& fp32 = by_id(r.mlp, "V0");
  CHECK(fp32.final_accuracy == r.mlp_seeds[0][0].final_accuracy);  // mlp holds the first seed's runs
  CHECK(fp32.final_accuracy > 0.7);
  for (std::size_t i : {1u, 2u}) {
    const PairedDifference d = paired_difference(r.mlp_seeds[i], r.mlp_seeds[0]);
    INFO(o.variant_ids[i] << " MLP: paired difference " << d.mean << " [" << d.low << ", " << d.high << "]");
    CHECK(d.seeds == 2);
    CHECK(std::fabs(d.mean) < 0.02);
    CHECK(d.low <= d.mean);
    CHECK(d.high >= d.mean);
  }
  for (const RunResult& run : r.cnn) {
    INFO(run.variant.id << " CNN " << run.final_accuracy);
    CHECK(run.final_accuracy > 0.4);  // 40 steps: learning, far from converged
  }
  CHECK(accuracy_standard_error(0.9, 1000) == doctest::Approx(std::sqrt(0.09 / 1000)));
  CHECK(fp32_seed_spread({r.mlp_seeds[0][0]}) == 0);
}

TEST_CASE("E1's paired difference: by hand, with Student's t") {
  auto runs = [](std::vector<double> accuracies) {
    std::vector<RunResult> result;
    for (double a : accuracies) result.push_back(RunResult{.final_accuracy = a});
    return result;
  };
  // Differences 0.01, 0.02, 0.03: mean 0.02, deviation 0.01, interval 0.02 +- 4.303 x 0.01 / sqrt(3).
  const PairedDifference d = paired_difference(runs({0.81, 0.82, 0.83}), runs({0.80, 0.80, 0.80}));
  CHECK(d.mean == doctest::Approx(0.02));
  CHECK(d.deviation == doctest::Approx(0.01));
  CHECK(d.high - d.mean == doctest::Approx(4.303 * 0.01 / std::sqrt(3.0)));
  CHECK(d.mean - d.low == doctest::Approx(4.303 * 0.01 / std::sqrt(3.0)));
  CHECK(fp32_seed_spread(runs({0.8, 0.83, 0.81})) == doctest::Approx(0.03));
}

TEST_CASE("E3: fp32 gradient histograms count every value; ReLU's zeros are exact, f16's flushes come on top") {
  E3Options o;
  o.images.mlp_steps = 40;
  o.images.cnn_steps = 20;
  o.images.batch = 32;
  o.images.cnn = nn::CnnOptions{.channels1 = 4, .channels2 = 8, .hidden = 32};
  o.language.steps = 20;
  o.language.batch = 16;
  o.language.context = 12;  // not the batch: the shapes [B, T, .] and [T, B, .] differ
  o.language.hidden = 32;
  o.language.embed_dim = 16;
  o.record_every = 10;
  o.long_run_steps = 0;  // its own case below
  const E3Result r = run_e3(o, tiny_fashion(), small_text());
  REQUIRE(r.models.size() == 3);
  for (const E3Model& m : r.models) {
    const GradientHistograms& h = m.run.histograms;
    INFO(m.model);
    REQUIRE(h.weights.size() == m.run.weight_names.size());
    REQUIRE(!h.activations.empty());
    for (const auto* all : {&h.weights, &h.activations})
      for (const amp::GradientStats& stats : *all) {
        std::int64_t binned = 0;
        for (std::int64_t n : stats.histogram) binned += n;
        CHECK(binned + stats.zero + stats.nonfinite == stats.count);  // every value is in one place
        CHECK(fraction_below(stats, -24) >= stats.fraction(stats.f16_flushed));  // flushed ones are below 2^-24
        CHECK(fraction_below(stats, amp::GradientStats::kMaxExponent + 1) == doctest::Approx(stats.fraction(binned)));
      }
    CHECK(h.weight_names.size() == h.weights.size());
    CHECK(h.activation_names.size() == h.activations.size());
    CHECK(m.run.log.size() == static_cast<std::size_t>(m.model == "MLP" ? 4 : 2));
    // The layers counted: each layer's output, at its own gradient entry, and nothing else.
    for (const E3Layer& layer : m.layers) {
      REQUIRE(layer.index < h.activations.size());
      CHECK(h.activation_names[layer.index] == layer.entry);
      CHECK(h.activations[layer.index].count == static_cast<std::int64_t>(m.run.log.size()) * numel(layer.shape));
    }
  }
  auto types = [](const E3Model& m) {
    std::vector<std::string> all;
    for (const E3Layer& layer : m.layers) all.push_back(layer.type);
    return all;
  };
  auto counted_per_step = [](const E3Model& m) {
    std::int64_t values = 0;
    for (const E3Layer& layer : m.layers) values += m.run.histograms.activations[layer.index].count;
    return values / static_cast<std::int64_t>(m.run.log.size());
  };
  // In the order backward meets them, the logits first; a Flatten adds nothing, and the first layer's
  // input (the images) has no gradient.
  const E3Model &mlp = r.models[0], &cnn = r.models[1], &lstm = r.models[2];
  CHECK(types(mlp) == std::vector<std::string>{"Linear", "ReLU", "Linear", "ReLU", "Linear"});
  CHECK(counted_per_step(mlp) == 32 * (10 + 4 * 256));
  // The CNN counts each convolution's output (its pre-activation), not the im2col buffer inside it.
  CHECK(types(cnn) == std::vector<std::string>{"Linear", "ReLU", "Linear", "MaxPool2d", "ReLU", "Conv2d", "MaxPool2d",
                                               "ReLU", "Conv2d"});
  CHECK(cnn.layers.back().shape == Shape{32, 4, 28, 28});
  CHECK(counted_per_step(cnn) == 32 * (10 + 2 * 32 + 8 * 7 * 7 + 2 * 8 * 14 * 14 + 4 * 14 * 14 + 2 * 4 * 28 * 28));
  for (const E3Layer& layer : cnn.layers) CHECK(!layer.entry.starts_with("im2col"));
  bool gemm_rows_recorded = false;  // ... nor its GEMM rows, though backward did hand them a gradient
  for (const std::string& name : cnn.run.histograms.activation_names) gemm_rows_recorded |= name.starts_with("conv2d");
  CHECK(gemm_rows_recorded);
  // The LSTM counts its h sequence [B, T, H], not the recurrence's (h, c): c gets no gradient from
  // outside the layer, so half of that entry was zero by construction.
  CHECK(types(lstm) == std::vector<std::string>{"Linear", "LSTM", "Embedding"});
  CHECK(lstm.layers[1].shape == Shape{16, 12, 32});
  const amp::GradientStats& h_sequence = lstm.run.histograms.activations[lstm.layers[1].index];
  CHECK(h_sequence.fraction(h_sequence.zero) < 0.1);
  // Recording only observes: E3's MLP run is E1's fp32 run, step for step.
  E1Options e1 = o.images;
  e1.variant_ids = {"V0"};
  e1.cnn_steps = 1;
  e1.seed_offsets = {0};
  const E1Result e1_result = run_e1(e1, tiny_fashion());
  const RunResult& e1_mlp = e1_result.mlp.at(0);
  CHECK(e1_mlp.final_accuracy == mlp.run.final_accuracy);
  CHECK(e1_mlp.log.back().loss == mlp.run.log.back().loss);
  // The MLP's hidden layers are ReLU: the gradient of a ReLU's input is exactly zero where the unit
  // was off, so some layer-output gradients are zero in f32 already.
  std::int64_t zeros = 0;
  for (const E3Layer& layer : mlp.layers) zeros += mlp.run.histograms.activations[layer.index].zero;
  CHECK(zeros > 0);
  // Weight gradients of these small fp32 runs are mostly within f16's range.
  for (const amp::GradientStats& stats : mlp.run.histograms.weights) CHECK(fraction_below(stats, -24) < 0.05);
}

TEST_CASE("E3's long run: a checkpoint every N steps, each weight's zero and flushed share in [0, 1]") {
  E3Options o;
  o.images.batch = 32;
  o.text = false;
  o.images.mlp_steps = o.images.cnn_steps = 1;
  o.long_run_steps = 60;
  o.checkpoint_every = 20;
  const E3Result r = run_e3(o, tiny_fashion(), nullptr);
  REQUIRE(r.checkpoints.size() == 3);
  REQUIRE(r.long_run.weight_names.size() == 3);  // the MLP's three Linear weights
  CHECK(r.long_run_weight_values == std::vector<std::int64_t>{784 * 256, 256 * 256, 256 * 10});
  for (std::size_t i = 0; i < r.checkpoints.size(); ++i) {
    const E3Checkpoint& c = r.checkpoints[i];
    CHECK(c.step == 20 * static_cast<std::int64_t>(i + 1));  // steps rise, one checkpoint every 20
    REQUIRE(c.zero.size() == 3);
    REQUIRE(c.flushed.size() == 3);
    for (std::size_t w = 0; w < 3; ++w) {
      CHECK(c.zero[w] >= 0);
      CHECK(c.flushed[w] >= 0);
      CHECK(c.zero[w] + c.flushed[w] <= 1);
    }
    // Over all weights: a mean of the layers' shares weighted by their sizes, so between them.
    CHECK(c.all_flushed >= *std::min_element(c.flushed.begin(), c.flushed.end()) - 1e-12);
    CHECK(c.all_flushed <= *std::max_element(c.flushed.begin(), c.flushed.end()) + 1e-12);
  }
  // The first checkpoint whose share reaches a threshold, or none.
  const std::vector<E3Checkpoint> by_hand{{.step = 100, .all_flushed = 0.01},
                                          {.step = 200, .all_flushed = 0.06},
                                          {.step = 300, .all_flushed = 0.04}};
  auto all = [](const E3Checkpoint& c) { return c.all_flushed; };
  CHECK(first_step_reaching(by_hand, all, 0.05) == std::optional<std::int64_t>(200));
  CHECK(!first_step_reaching(by_hand, all, 0.07).has_value());
}

TEST_CASE("E5: a text run scores bits per character; scaling keeps the logit gradients f16 would flush") {
  E5Options o;
  o.steps = 30;
  o.batch = 16;
  o.context = 16;
  o.hidden = 32;
  o.embed_dim = 16;
  o.log_every = 10;
  o.eval_every = 0;
  o.optimizers = {"adam"};
  o.adam_lr = 1e-2;
  o.variant_ids = {"V0", "V3"};
  const E5Result r = run_e5(o, small_text());
  REQUIRE(r.models.size() == 1);
  const RunResult &fp32 = by_id(r.models[0].runs, "V0"), &scaled = by_id(r.models[0].runs, "V3");
  // The gate gradient is found, and recorded at every logged step; the head has one row per symbol.
  CHECK(r.models[0].gate_entry >= 0);
  for (const StepLog& s : scaled.log) {
    CHECK(s.activation_zero_in_f16_by_entry.size() == scaled.activation_names.size());
    CHECK(s.weight_grad_zero_rows.size() == scaled.weight_names.size());
  }
  const double uniform = std::log2(static_cast<double>(small_text()->vocab));
  INFO("bits/char: fp32 " << fp32.final_bpc << ", S=128 " << scaled.final_bpc << ", uniform " << uniform);
  CHECK(fp32.final_bpc < uniform - 0.5);  // it learned the text's statistics
  CHECK(std::fabs(scaled.final_bpc - fp32.final_bpc) < 0.05);
  CHECK(scaled.skipped_steps == 0);
  // The mechanism: with the loss x 2^-16 (plain SGD), the logit gradients sink below f16's range, and
  // only a matching loss scale keeps them.
  auto sunk = [&](const Variant& v) {
    return logit_flush_fraction(run(RunConfig{.variant = v,
                                              .make_model = char_lstm(small_text()->vocab, 16, 32),
                                              .text = small_text(),
                                              .context = 16,
                                              .steps = 10,
                                              .batch = 16,
                                              .lr = 0.5,
                                              .loss_multiplier = std::ldexp(1.0, -16),
                                              .log_every = 5,
                                              .record_activation_gradients = true}));
  };
  const double unscaled = sunk(variant("V2")), matched = sunk(variant("V3", 65536));
  INFO("logit gradients zero in f16 with the loss x 2^-16: unscaled " << unscaled << ", S = 2^16 " << matched);
  CHECK(unscaled > 0.9);
  CHECK(matched < 0.05);
  // The tiny GPT path (on by default on a GPU) runs the same variants through the same loop.
  o.gpt = true;
  o.steps = 2;
  o.gpt_steps = 4;
  o.gpt_options = nn::GptOptions{.block_size = 16, .embed_dim = 16, .heads = 2, .layers = 1};
  o.variant_ids = {"V0", "V4"};
  const E5Result with_gpt = run_e5(o, small_text());
  REQUIRE(with_gpt.models.size() == 2);
  REQUIRE(with_gpt.models[1].runs.size() == 2);
  for (const RunResult& gpt : with_gpt.models[1].runs) CHECK(std::isfinite(gpt.final_bpc));
  mg::testing::check_error(
      [] {
        run(RunConfig{.variant = variant("V0"),
                      .make_model = char_lstm(small_text()->vocab, 8, 8),
                      .text = small_text(),
                      .context = 8,
                      .steps = 1,
                      .optimizer = "adam",
                      .loss_multiplier = 0.5});
      },
      "use 1 with adam");
}

TEST_CASE("E6: every variant trains; half-precision storage halves the activations") {
  E6Options o;
  o.steps = 6;
  o.batch = 16;
  o.log_every = 3;
  o.cnn = nn::CnnOptions{.channels1 = 4, .channels2 = 8, .hidden = 32};
  const E6Result r = run_e6(o, tiny_fashion(), nullptr);
  REQUIRE(r.workloads.size() == 1);
  const std::vector<RunResult>& runs = r.workloads[0].runs;
  REQUIRE(runs.size() == 7);
  const RunResult& fp32 = by_id(runs, "V0");
  REQUIRE(fp32.activation_bytes > 0);
  for (const RunResult& run : runs) {
    INFO(run.variant.id << ": activations " << run.activation_bytes << " vs fp32 " << fp32.activation_bytes
                        << ", state " << run.state_bytes << ", peak " << run.peak_bytes);
    CHECK(run.items_per_second > 0);
    CHECK(run.peak_bytes >= run.state_bytes + run.activation_bytes);
    if (run.variant.id == "V0") continue;
    // Every other variant stores its activations in 16 bits, except what stays the same size: max
    // pooling's i32 argmax and the loss's f32 probabilities, about a sixth of fp32's bytes in this CNN
    // since the convolutions save their input rather than a window matrix 9 times its size
    // (autograd/conv.cpp). So 16-bit activations come to 0.5-0.7 of fp32's, never more than 72%.
    const double ratio = static_cast<double>(run.activation_bytes) / static_cast<double>(fp32.activation_bytes);
    CHECK(ratio > 0.4);
    CHECK(ratio < 0.72);
  }
  // The master copy costs state: f16 weights plus f32 masters hold more than f32 weights alone.
  CHECK(by_id(runs, "V2").state_bytes > fp32.state_bytes);
  CHECK(by_id(runs, "V1").state_bytes < fp32.state_bytes);

  // The larger workloads (on by default on a GPU): a wider CNN and the tiny GPT, in tokens per second.
  o.variant_ids = {"V0"};
  o.large = true;
  o.large_cnn = nn::CnnOptions{.channels1 = 4, .channels2 = 4, .hidden = 16};
  o.large_steps = o.gpt_steps = 6;
  o.large_batch = o.gpt_batch = 8;
  o.gpt = nn::GptOptions{.block_size = 16, .embed_dim = 16, .heads = 2, .layers = 1};
  o.large_variant_ids = {"V0", "V2"};
  mg::testing::check_error([&] { run_e6(o, tiny_fashion(), nullptr); }, "tiny GPT");
  const E6Result large = run_e6(o, tiny_fashion(), small_text());
  REQUIRE(large.workloads.size() == 3);
  CHECK(large.workloads[2].unit == "tokens");
  for (const RunResult& run : large.workloads[2].runs) CHECK(std::isfinite(run.final_bpc));
}

TEST_CASE("E7: f16 accumulation loses long sums that f32 keeps, and V7 trains through it") {
  const std::vector<DotError> dots = dot_product_errors({64, 4096, 65536}, 8, 0, Device::cpu());
  REQUIRE(dots.size() == 6);
  auto at = [&](const std::string& distribution, std::int64_t k) -> const DotError& {
    for (const DotError& d : dots)
      if (d.distribution == distribution && d.k == k) return d;
    FAIL("no dot product " << distribution << " k " << k);
    return dots.front();
  };
  // f32 accumulation: within the k roundings of an f32 sum, far below f16's spacing.
  for (const DotError& d : dots) CHECK(d.f32_max <= static_cast<double>(d.k) * std::ldexp(1.0, -24));
  // Positive terms in f16: the sum grows by blocks of 16 products, about 4 each (kernels/gemm.h).
  // Past 8192 the f16 spacing is 8, and each block rounds to +0 or +8 about equally often: the sum
  // keeps its size but takes a random walk of +-4 per block, some 4096 blocks at k = 65536, about
  // 1% of the sum (blocks of 8, +2 each, stalled there and lost half). Far above f16's own rounding,
  // and thousands of times f32's.
  CHECK(at("positive", 65536).f16_mean > 4 * dtype_eps(DType::F16));
  CHECK(at("positive", 65536).f16_mean > 1000 * at("positive", 65536).f32_mean);
  CHECK(at("positive", 64).f16_mean < 4 * dtype_eps(DType::F16));  // a short sum keeps f16's precision
  // Zero-mean terms: the sum wanders like sqrt(k) and so does its spacing; the error stays near f16's
  // rounding of sum |a_i b_i|, far above f32's.
  CHECK(at("zero-mean", 65536).f16_mean < 4 * dtype_eps(DType::F16));
  CHECK(at("zero-mean", 65536).f16_mean > 100 * at("zero-mean", 65536).f32_mean);

  E7Options o;
  o.lstm_steps = 20;
  o.lstm_batch = 16;
  o.context = 16;
  o.embed_dim = 8;
  o.hidden = 16;
  o.log_every = 10;
  o.eval_every = 0;
  o.dot_lengths = {64};
  o.dot_products = 2;
  o.variant_ids = {"V4", "V7"};
  const E7Result r = run_e7(o, nullptr, small_text());
  const RunResult &f32 = by_id(r.lstm, "V4"), &f16 = by_id(r.lstm, "V7");
  CHECK(f16.variant.accumulation == kernels::Accumulation::F16);
  CHECK(std::isfinite(f16.final_bpc));
  CHECK_FALSE(identical_trajectories(f32, f16));  // the mode reached the training GEMMs
  CHECK(kernels::gemm_accumulation() == kernels::Accumulation::F32);  // and left with the run
}
