// `mixgrad repro`'s machinery (tools/repro/): the variants, the report's files (report.md, CSVs,
// gnuplot scripts and plots) and the command's refusals. The experiments' outcomes: test_repro.cpp.
#include <cstdlib>
#include <filesystem>
#include <set>

#include "tests/repro_fixtures.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"
#include "tools/repro/e3_histograms.h"
#include "tools/repro/e6_speed_memory.h"
#include "tools/repro/e8_fp8_parity.h"
#include "tools/repro/e9_granularity.h"
#include "tools/repro/e10_fp8_accumulation.h"
#include "tools/repro/e11_gradient_formats.h"
#include "tools/repro/repro.h"
#include "tools/repro/run_tables.h"

using namespace mg;
using namespace mg::tools::repro;
using namespace mg::testing::repro;
using mg::testing::TempDir;

TEST_CASE("variants: V0..V6 are the paper's setups, V2/V3/V4 differ only in loss scaling, V7 only in accumulation") {
  CHECK(variant("V0").recipe.name == "fp32");
  CHECK(variant("V1").recipe.name == "float16_pure");
  for (const char* id : {"V2", "V3", "V4"}) {
    CHECK(variant(id).recipe.name == "float16_master");
    CHECK(variant(id).recipe.master_weights);
  }
  CHECK(variant("V2").recipe.loss_scaling == amp::LossScaling::None);
  CHECK(variant("V3", 256).recipe.loss_scaling == amp::LossScaling::Static);
  CHECK(variant("V3", 256).recipe.make_scaler().get_scale() == 256);
  CHECK(variant("V4").recipe.loss_scaling == amp::LossScaling::Dynamic);
  CHECK(variant("V5").recipe.name == "mixed_bfloat16");
  CHECK(variant("V6").recipe.name == "bfloat16_pure");
  for (const std::string& id : variant_ids())
    CHECK_MESSAGE((variant(id).accumulation == kernels::Accumulation::F16) == (id == "V7"), id);
  CHECK(variant("V7").recipe.name == variant("V4").recipe.name);
  CHECK(variant("V7").recipe.loss_scaling == amp::LossScaling::Dynamic);
  mg::testing::check_error([] { variant("V25"); }, "repro::variant");
}

// Every field of two Fp8Options (the struct has no operator==).
bool same_fp8(const Fp8Options& a, const Fp8Options& b) {
  const kernels::Fp8Accumulator &x = a.accumulator, &y = b.accumulator;
  return a.scaling == b.scaling && a.forward_format == b.forward_format && a.backward_format == b.backward_format &&
         a.margin == b.margin && a.power_of_two == b.power_of_two && a.amax_history_len == b.amax_history_len &&
         a.amax_algorithm == b.amax_algorithm && a.mx_rule == b.mx_rule && x.limited == y.limited &&
         x.mantissa_bits == y.mantissa_bits && x.rounding == y.rounding && x.group == y.group &&
         x.promote_every == y.promote_every;
}

TEST_CASE("variants: V8..V11 are the FP8 recipes, V12..V15 change one FP8 option each; every variant its own style") {
  const char* recipes[] = {"fp8_delayed", "fp8_current", "fp8_block", "mxfp8"};
  for (int i = 0; i < 4; ++i) {
    const Variant v = variant(fmt::format("V{}", 8 + i));
    CHECK(v.recipe.name == recipes[i]);
    CHECK(same_fp8(*v.recipe.fp8, *amp::Recipe::parse(recipes[i]).fp8));  // unchanged from amp/recipe.h
  }
  const Fp8Options delayed = *variant("V8").recipe.fp8;
  Fp8Options e4m3 = delayed, limited = delayed, promoted = delayed, round_up = *variant("V11").recipe.fp8;
  e4m3.backward_format = DType::E4M3;
  limited.accumulator = {.limited = true, .promote_every = 0};
  promoted.accumulator = {.limited = true, .promote_every = 128};
  round_up.mx_rule = MxScaleRule::RoundUp;
  CHECK(same_fp8(*variant("V12").recipe.fp8, e4m3));
  CHECK(same_fp8(*variant("V13").recipe.fp8, limited));
  CHECK(same_fp8(*variant("V14").recipe.fp8, promoted));
  CHECK(same_fp8(*variant("V15").recipe.fp8, round_up));
  std::set<int> styles;
  for (const std::string& id : variant_ids()) {
    CHECK(variant_style(variant(id)) != kNoVariantStyle);
    styles.insert(variant_style(variant(id)));
  }
  CHECK(styles.size() == variant_ids().size());
  CHECK(variant_style(variant("V8")) == 9);
}

TEST_CASE("Context: what an experiment keeps, a later one gets back by id and type") {
  Context context(Preset::Quick, Device::cpu(), 0, true);
  CHECK(context.kept<int>("E8") == nullptr);
  context.keep<int>("E8", std::make_shared<const int>(8));
  REQUIRE(context.kept<int>("E8") != nullptr);
  CHECK(*context.kept<int>("E8") == 8);
  CHECK(context.kept<double>("E8") == nullptr);  // another type: nothing
  CHECK(context.kept<int>("E9") == nullptr);
}

TEST_CASE("the report: report.md with every experiment's section, CSVs with headers, plots when gnuplot exists") {
  TempDir tmp;
  E2Options e2 = small_e2();
  e2.steps = 20;
  e2.eval_every = 10;
  E4Options e4 = small_e4();
  e4.steps = 20;
  e4.organic = true;
  e4.organic_steps = 20;
  e4.organic_sizes = {784, 16, 8, 16, 784};
  e4.organic_scales = {8};
  {
    Report report(tmp / "out");
    report.add(e2_section(run_e2(e2, tiny_fashion()), report));
    report.add(e4_section(run_e4(e4, tiny_fashion()), report));
    E3Options e3;
    e3.images.mlp_steps = e3.images.cnn_steps = 10;
    e3.images.batch = 16;
    e3.images.cnn = nn::CnnOptions{.channels1 = 2, .channels2 = 2, .hidden = 8};
    e3.record_every = 5;
    e3.text = false;
    e3.long_run_steps = 20;
    e3.checkpoint_every = 10;
    report.add(e3_section(run_e3(e3, tiny_fashion(), nullptr), report));
    report.write("test preamble");
  }
  const fs::path out = tmp.path / "out";
  const std::string md = read(out / "report.md");
  for (const char* needle :
       {"## E2", "Figure 2a", "## E3", "## E4", "Table 2", "**Verdict.**", "| k |", "test preamble"})
    CHECK_MESSAGE(md.find(needle) != std::string::npos, needle);
  for (const char* csv : {"e2_runs.csv", "e2_steps.csv", "e4_sweep_runs.csv", "e4_sweep_steps.csv",
                          "e4_organic_runs.csv", "e4_organic_steps.csv"}) {
    INFO(csv);
    REQUIRE(fs::exists(out / csv));
    const std::string text = read(out / csv);
    CHECK(text.starts_with("experiment,series,variant,variant_name"));
    CHECK(text.find(std::string(csv).starts_with("e2") ? "\nE2," : "\nE4,") != std::string::npos);
  }
  // E3's histograms: one bin per exponent and layer, plotted over f16's ranges shaded.
  const std::string bins = read(out / "e3_histograms.csv");
  CHECK(bins.starts_with("model,gradient,layer,exponent,values_in_bin,values"));
  CHECK(bins.find("\nMLP,weight,") != std::string::npos);
  const std::string histogram_script = read(out / "e3_weights_mlp.gp");
  CHECK(histogram_script.find("f16 subnormal") != std::string::npos);
  CHECK(histogram_script.find("set object 1 rect") != std::string::npos);
  CHECK(histogram_script.find("histeps") != std::string::npos);
  // An MLP's layers share op names and shapes: each legend names its layer by its path in the model.
  const std::string activation_script = read(out / "e3_activations_mlp.gp");
  CHECK(activation_script.find("title \"1 Linear [16, 256]\"") != std::string::npos);
  CHECK(activation_script.find("title \"3 Linear [16, 256]\"") != std::string::npos);
  CHECK(activation_script.find("title \"5 Linear [16, 10]\"") != std::string::npos);
  // The long run: a row per checkpoint and weight, and one over all weights.
  const std::string long_run = read(out / "e3_weights_over_training.csv");
  CHECK(long_run.starts_with("step,lr,loss,weight,values,zero,flushed_in_f16"));
  CHECK(long_run.find("\n10,") != std::string::npos);
  CHECK(long_run.find("\n20,") != std::string::npos);
  CHECK(long_run.find(",all weights,268800,") != std::string::npos);
  CHECK(md.find("reaches 5% at step") != std::string::npos);
  for (const char* plot :
       {"e2_accuracy_constant", "e2_lost_updates_decaying", "e4_accuracy_by_k", "e4_activation_zeros_by_k",
        "e4_organic_output_flush", "e3_weights_cnn", "e3_activations_mlp", "e3_weights_over_training"}) {
    CHECK(fs::exists(out / (std::string(plot) + ".gp")));
    CHECK(fs::exists(out / (std::string(plot) + ".dat")));
    if (have_gnuplot()) {
      CHECK(fs::exists(out / (std::string(plot) + ".png")));
      CHECK(md.find(std::string("](") + plot + ".png)") != std::string::npos);
    }
  }
  if (!have_gnuplot()) {
    MESSAGE("gnuplot is not installed: the PNG checks are skipped (apt-get install gnuplot-nox)");
    CHECK(md.find("No plots") != std::string::npos);
  }
}

// The y range a script sets: "set yrange [from:to]".
std::pair<double, double> y_range_of(const std::string& script) {
  const std::size_t at = script.find("set yrange [");
  REQUIRE(at != std::string::npos);
  const std::size_t colon = script.find(':', at), end = script.find(']', at);
  return {std::stod(script.substr(at + 12, colon - at - 12)), std::stod(script.substr(colon + 1, end - colon - 1))};
}

TEST_CASE("plots: coinciding curves stay apart, no curve runs along the frame, categories are bars") {
  TempDir tmp;
  Report report(tmp / "plots");
  Series fp32{.name = "V0 fp32", .style = 0}, master{.name = "V2 float16_master", .style = 2};
  for (int step = 10; step <= 400; step += 10) {  // identical curves, all at exactly 0
    for (Series* s : {&fp32, &master}) {
      s->x.push_back(step);
      s->y.push_back(0);
    }
  }
  Series constant_scale{.name = "V3 scale", .x = {0, 400}, .y = {1024, 1024}, .style = 3};
  Series bars{.name = "CNN", .x = {0, 1, 2}, .y = {1, 0.9, 1.1}};
  report.add(Section{.id = "T",
                     .title = "plots",
                     .plots = {Plot{.name = "lines", .series = {fp32, master}},
                               Plot{.name = "scale", .log_y = 2, .series = {constant_scale}},
                               Plot{.name = "bars",
                                    .kind = PlotKind::bars,
                                    .x_ticks = {{0, "V0 fp32"}, {1, "V1 float16_pure"}, {2, "V2 float16_master"}},
                                    .series = {bars}}}});
  const fs::path out = tmp.path / "plots";
  const std::string lines = read(out / "lines.gp");
  CHECK(lines.find("set key below") != std::string::npos);  // the legend takes no width from the data
  // Each variant has its own line style, and the two curves' markers start at different points.
  CHECK(lines.find("index 0 using 1:2 with lines ls 1 ") != std::string::npos);
  CHECK(lines.find("index 1 using 1:2 with lines ls 3 ") != std::string::npos);
  CHECK(lines.find("index 0 every 4::0 ") != std::string::npos);
  CHECK(lines.find("index 1 every 4::2 ") != std::string::npos);
  CHECK(lines.find("keyentry with linespoints ls 3 title \"V2 float16_master\"") != std::string::npos);
  const auto [lines_from, lines_to] = y_range_of(lines);
  CHECK(lines_from < 0);
  CHECK(lines_to > 0);
  const std::string scale = read(out / "scale.gp");
  const auto [scale_from, scale_to] = y_range_of(scale);
  CHECK(scale_from < 1024);
  CHECK(scale_to > 1024);
  CHECK(scale.find("set logscale y 2") != std::string::npos);
  const std::string bar_script = read(out / "bars.gp");
  CHECK(bar_script.find("with boxes") != std::string::npos);
  CHECK(bar_script.find("\"V1 float16_pure\" 1") != std::string::npos);
  CHECK(y_range_of(bar_script).first == 0);  // bars start at 0
  if (have_gnuplot())
    for (const char* plot : {"lines", "scale", "bars"})
      CHECK_MESSAGE(fs::exists(out / (std::string(plot) + ".png")), plot);
}

TEST_CASE("E6's plots: the variants are categories, drawn as bars") {
  TempDir tmp;
  Report report(tmp / "e6");
  E6Workload cnn{.model = "CNN", .unit = "images"};
  for (const std::string& id : variant_ids()) {
    RunResult run;
    run.variant = variant(id);
    run.items_per_second = 1000;
    run.activation_bytes = run.state_bytes = run.peak_bytes = id == "V0" ? 2000 : 1000;
    cnn.runs.push_back(run);
  }
  report.add(e6_section(E6Result{.options = {}, .workloads = {cnn}}, report));
  for (const char* plot : {"e6_speed", "e6_memory"}) {
    INFO(plot);
    const std::string script = read(tmp.path / "e6" / (std::string(plot) + ".gp"));
    CHECK(script.find("with boxes") != std::string::npos);
    CHECK(script.find("with lines") == std::string::npos);
    CHECK(script.find("\"V6 bfloat16_pure\" 6") != std::string::npos);
  }
}

TEST_CASE("run_repro: bad options are refused before anything runs") {
  TempDir tmp;
  mg::testing::check_error([&] { run_repro(ReproOptions{.experiment = "E15", .out = tmp / "x", .quiet = true}); },
                           "mixgrad repro");
  mg::testing::check_error([&] { run_repro(ReproOptions{.preset = "huge", .out = tmp / "x", .quiet = true}); },
                           "--preset");
  if (cuda_device_count() == 0)
    mg::testing::check_error([&] { run_repro(ReproOptions{.experiment = "E1", .device = "cuda", .out = tmp / "y"}); },
                             "mixgrad repro --device cuda");
  CHECK(experiments().size() == 14);
  for (const Experiment& e : experiments()) CHECK_MESSAGE(e.run, e.id);
}

// A run of `id` whose training loss is `loss` at steps 10, 20, ..., and whose score is `score`.
RunResult fake_run(const std::string& id, std::vector<double> loss, double score, bool text = false) {
  RunResult run{.variant = variant(id)};
  for (std::size_t i = 0; i < loss.size(); ++i) {
    StepLog entry;
    entry.step = static_cast<std::int64_t>(10 * (i + 1));
    entry.loss = loss[i];
    run.log.push_back(entry);
  }
  (text ? run.final_bpc : run.final_accuracy) = score;
  (text ? run.final_accuracy : run.final_bpc) = std::nan("");
  run.log.back().test_accuracy = text ? std::nullopt : std::optional<double>(score);
  run.log.back().validation_bpc = text ? std::optional<double>(score) : std::nullopt;
  return run;
}

TEST_CASE("E8..E11's sections: their tables, verdicts, CSVs and plots, from results made by hand") {
  TempDir tmp;
  const fs::path out = tmp / "fp8";
  {
    Report report(out);
    // E8: the MLP at parity in every recipe, the char LSTM out of it in one.
    E8Model mlp{.name = "MLP"}, lstm{.name = "char LSTM", .text = true};
    for (const char* id : {"V5", "V8", "V11"}) {
      mlp.runs.push_back({fake_run(id, {1.0, 0.5, 0.4, 0.3}, 0.86)});
      lstm.runs.push_back({fake_run(id, {3.0, 2.5, 2.2, std::string(id) == "V11" ? 2.3 : 2.0},
                                    std::string(id) == "V11" ? 2.9 : 2.8, true)});
    }
    report.add(e8_section(E8Result{.options = {}, .models = {mlp, lstm}}, report));
    // E9: the synthetic sweep only.
    E9Result e9{.options = {}};
    for (double factor : {1.0, 100.0}) {
      e9.synthetic.push_back(
          measure_scalings("synthetic x" + std::to_string(factor), outlier_activations(16, 256, 0.01, factor, 0)));
      e9.synthetic.back().outlier_factor = factor;
    }
    report.add(e9_section(e9, report));
    // E10: two lengths, no training.
    report.add(e10_section(E10Result{.options = {.lengths = {64, 128}}, .errors = fp8_gemm_errors({64, 128}, 2, 2, 0)},
                           report));
    // E11: one layer's gradients, recorded once.
    E11Model e11{.name = "MLP"};
    E11Gradients layer{.layer = "5", .tensors = 1};
    const Tensor g = outlier_activations(8, 16, 0.1, 100, 1);
    for (const E11Cast& cast : e11_casts())
      layer.effects.push_back(
          cast.scaled ? fp8_effect_of(g, Fp8Role::GradOutput,
                                      Fp8Options{.scaling = Fp8Scaling::Current, .backward_format = cast.format})
                      : fp8_effect_with_scale(g, 1.0f, cast.format));
    layer.exponents.add(g);
    e11.gradients = {layer, layer};
    for (const char* id : {"V5", "V8", "V12"}) e11.runs.push_back(fake_run(id, {1.0, 0.5, 0.4, 0.3}, 0.86));
    report.add(e11_section(E11Result{.options = {}, .models = {e11}}, report));
    report.write("fp8 preamble");
  }
  const std::string md = read(out / "report.md");
  for (const char* needle :
       {"## E8", "## E9", "## E10", "## E11", "FP8 Formats for Deep Learning", "DeepSeek-V3 §3.3.2",
        "**Reproduced for some recipes only**", "| V11 mxfp8 |", "13 bits, promoted every 128", "E4M3 per tensor"})
    CHECK_MESSAGE(md.find(needle) != std::string::npos, needle);
  // The char LSTM's V11 is 0.1 bits/char behind: outside the 0.02 margin; the MLP's recipes all within.
  CHECK(md.find("| char LSTM | V11 mxfp8 | 2.9 | +0.1000 | **no** |") != std::string::npos);
  CHECK(md.find("| MLP | V8 fp8_delayed | 86.00% | +0.00 | yes |") != std::string::npos);
  for (const char* csv : {"e8_runs.csv", "e8_steps.csv", "e9_activations.csv", "e10_gemm_errors.csv",
                          "e11_gradients.csv", "e11_runs.csv"})
    CHECK_MESSAGE(fs::exists(out / csv), csv);
  CHECK(read(out / "e10_gemm_errors.csv").starts_with("distribution,k,accumulator,mean,largest,normwise"));
  CHECK(read(out / "e9_activations.csv").find("\nsynthetic,") != std::string::npos);
  // A variant's curve keeps its style: V8's is style 9, gnuplot's line style 10.
  const std::string gap = read(out / "e8_loss_gap_lstm.gp");
  CHECK(gap.find("ls 10 title \"V8 fp8_delayed\"") != std::string::npos);
  for (const char* plot :
       {"e8_loss_gap_mlp", "e8_accuracy_mlp", "e8_validation_bpc_lstm", "e9_flushed", "e9_error",
        "e10_gemm_error_zero_mean", "e10_gemm_error_positive", "e11_gradient_exponents", "e11_loss_gap_mlp"}) {
    INFO(plot);
    CHECK(fs::exists(out / (std::string(plot) + ".gp")));
    if (have_gnuplot()) CHECK(fs::exists(out / (std::string(plot) + ".png")));
  }
  CHECK(read(out / "e11_gradient_exponents.gp").find("E4M3 flushes") != std::string::npos);
}
