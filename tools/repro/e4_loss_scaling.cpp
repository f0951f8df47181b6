#include "tools/repro/e4_loss_scaling.h"

#include <fmt/format.h>

#include <array>
#include <cmath>

#include "tools/repro/run_tables.h"

namespace mg::tools::repro {

constexpr Heading kE4LossScaling{
    .id = "E4",
    .title = "Where loss scaling is needed",
    .reference = "Table 2, Figure 3",
    .claim = "Many networks train in FP16 without loss scaling, but some do not: Multibox SSD diverges unscaled and "
             "reaches 77.1% mAP with S = 8 (FP32: 76.9%). In SSD's FP32 training 67% of activation-gradient values "
             "are zero and many non-zero ones lie below FP16's 2^-24; scaling the loss shifts them into range "
             "(values in [2^-27, 2^-24) mattered, below 2^-27 did not)."};

namespace {

double activation_zeros(const RunResult& run) {
  return mean_over_log(run, [](const StepLog& s) { return s.activation_zero_fraction; });
}
double activation_zeros_in_f16(const RunResult& run) {
  return mean_over_log(run, [](const StepLog& s) { return s.activation_zero_in_f16_fraction; });
}
std::string k_label(int k) { return fmt::format("k={}", k); }

// The verdict at the largest k: V2 unscaled collapses, V3 and V4 stay with fp32.
std::string sweep_verdict(const E4Result& r) {
  const E4Options& o = r.options;
  const std::size_t last = o.ks.size() - 1;
  const std::vector<RunResult>& runs = r.sweep[last];
  const RunResult *fp32 = find_run(runs, "V0"), *unscaled = find_run(runs, "V2"), *fixed = find_run(runs, "V3"),
                  *dynamic = find_run(runs, "V4");
  if (!fp32 || !unscaled || !fixed || !dynamic) return "V0, V2, V3 and V4 are needed for a verdict.";
  const double zeros_gap = activation_zeros(*unscaled) - activation_zeros(*fp32);
  const double drop = fp32->final_accuracy - unscaled->final_accuracy;
  const double worst_scaled = std::max(std::fabs(fp32->final_accuracy - fixed->final_accuracy),
                                       std::fabs(fp32->final_accuracy - dynamic->final_accuracy));
  const bool reproduced = zeros_gap > 0.2 && drop > 0.05 && worst_scaled <= 0.02;
  return fmt::format("At k = {} (every gradient 2^-{} of its size), float16_master without scaling had {} of its "
                     "activation gradients at exactly zero against fp32's {} and ended {:.1f} points below fp32; with "
                     "S = 2^{} (V3) or the dynamic GradScaler (V4) the f16 runs ended within {:.2f} points of fp32. "
                     "fp32 itself was {} across k. {}",
                     o.ks[last], o.ks[last], percent(activation_zeros(*unscaled), 1),
                     percent(activation_zeros(*fp32), 1), 100 * drop, o.ks[last], 100 * worst_scaled,
                     r.fp32_identical_across_k ? "bit-identical" : "**not** identical",
                     reproduced
                         ? "**Reproduced:** loss scaling is what keeps the small gradients."
                         : "**Not reproduced** with these margins (zero fraction +20 points, accuracy -5 points, "
                           "scaled within 2 points).");
}

// The fraction of output-gradient values zero in f16 at the last logged step.
double output_flush_at_end(const RunResult& run) { return run.log.back().logit_zero_in_f16_fraction; }

std::string organic_verdict(const E4Result& r) {
  const RunResult *fp32 = find_run(r.organic, "V0"), *unscaled = find_run(r.organic, "V2"),
                  *dynamic = find_run(r.organic, "V4");
  if (!fp32 || !unscaled || !dynamic) return "Organic case: V0, V2 and V4 are needed for a verdict.";
  const double unscaled_gap = unscaled->final_test_loss - fp32->final_test_loss;
  double worst_scaled = std::fabs(dynamic->final_test_loss - fp32->final_test_loss);
  std::string scaled_losses;
  for (const RunResult& run : r.organic)
    if (run.variant.id == "V3") {
      scaled_losses += fmt::format("{}S = {:g}: {} ({:+.2f}%)", scaled_losses.empty() ? "" : ", ",
                                   run.variant.recipe.static_scale, number(run.final_test_loss, 4),
                                   100 * (run.final_test_loss / fp32->final_test_loss - 1));
      if (run.variant.recipe.static_scale >= 64)
        worst_scaled = std::max(worst_scaled, std::fabs(run.final_test_loss - fp32->final_test_loss));
    }
  const bool flushes = output_flush_at_end(*unscaled) > output_flush_at_end(*dynamic) + 0.2;
  const bool costs = unscaled_gap > 0 && unscaled_gap > 3 * worst_scaled;
  return fmt::format(
      "Organic case (autoencoder, nothing multiplied): at the last logged step unscaled f16 flushed {} of the "
      "output-gradient values to zero (fp32's values: {} would flush), the GradScaler {}. Test loss (binary cross "
      "entropy per pixel): fp32 {}, unscaled {} ({:+.2f}%), {}, dynamic {} ({:+.2f}%). {}",
      percent(output_flush_at_end(*unscaled), 1), percent(output_flush_at_end(*fp32), 1),
      percent(output_flush_at_end(*dynamic), 1), number(fp32->final_test_loss, 4), number(unscaled->final_test_loss, 4),
      100 * unscaled_gap / fp32->final_test_loss, scaled_losses, number(dynamic->final_test_loss, 4),
      100 * (dynamic->final_test_loss / fp32->final_test_loss - 1),
      flushes && costs ? "**Reproduced:** this model's own gradients underflow in f16, costing test loss, and scaling "
                         "the loss (S >= 64 or dynamic) recovers fp32's result."
      : flushes        ? "**Mechanism reproduced, cost not:** the output gradients flush, but the test loss does not "
                         "separate the unscaled run from the scaled ones by more than their own spread."
                       : "**Not reproduced:** unscaled f16 did not flush markedly more output gradients.");
}

}  // namespace

E4Options e4_options(Preset preset, Device device, std::uint64_t seed) {
  return preset_options<E4Options>(preset,
                                   {.train_examples = 60000,
                                    .test_examples = 10000,
                                    .steps = 3000,
                                    .batch = 128,
                                    .log_every = 25,
                                    .organic_steps = 1000},
                                   device, seed);
}

double mean_over_log(const RunResult& run, const std::function<double(const StepLog&)>& value) {
  double sum = 0;
  int count = 0;
  for (const StepLog& s : run.log)
    if (const double v = value(s); !std::isnan(v)) {
      sum += v;
      ++count;
    }
  return count ? sum / count : std::nan("");
}

bool identical_trajectories(const RunResult& a, const RunResult& b) {
  if (a.log.size() != b.log.size()) return false;
  for (std::size_t i = 0; i < a.log.size(); ++i)
    if (a.log[i].loss != b.log[i].loss) return false;
  return a.final_accuracy == b.final_accuracy;
}

E4Result run_e4(const E4Options& o, std::shared_ptr<const ImageData> data, const Progress& progress) {
  MG_CHECK(!o.ks.empty(), "repro E4: needs at least one k");
  E4Result result{.options = o};
  for (int k : o.ks) {
    MG_CHECK(k >= 0 && k <= 60, "repro E4: k must be in [0, 60], got {}", k);
    const double multiplier = std::ldexp(1.0, -k);
    std::vector<RunResult> runs;
    for (const Variant& v : variants(o.variant_ids, std::ldexp(1.0, k))) {
      runs.push_back(run(RunConfig{.variant = v,
                                   .make_model = mlp_784_256_256_10,
                                   .data = data,
                                   .steps = o.steps,
                                   .batch = o.batch,
                                   .lr = o.lr,
                                   .loss_multiplier = multiplier,
                                   .log_every = o.log_every,
                                   .record_activation_gradients = true,
                                   .seed = o.seed,
                                   .device = o.device}));
      const RunResult& last = runs.back();
      tell(progress, "E4 k={:2}: {} test accuracy {}, activation-gradient zeros {} ({:.1f} s)", k, legend(v),
           percent(last.final_accuracy), percent(activation_zeros(last), 1), last.seconds);
    }
    result.sweep.push_back(std::move(runs));
  }
  for (std::size_t j = 0; j < o.variant_ids.size(); ++j)
    if (o.variant_ids[j] == "V0") {
      result.fp32_identical_across_k = true;
      for (const auto& runs : result.sweep)
        result.fp32_identical_across_k = result.fp32_identical_across_k &&
                                         identical_trajectories(runs[j], result.sweep[0][j]);
    }
  if (o.organic) {
    std::vector<Variant> organic;
    for (const std::string& id : o.organic_variant_ids)
      if (id == "V3")
        for (double scale : o.organic_scales) organic.push_back(variant("V3", scale));
      else
        organic.push_back(variant(id));
    for (const Variant& v : organic) {
      result.organic.push_back(run(RunConfig{.variant = v,
                                             .make_model = autoencoder(o.organic_sizes),
                                             .data = data,
                                             .reconstruct = true,
                                             .steps = o.organic_steps,
                                             .batch = o.organic_batch,
                                             .lr = o.organic_lr,
                                             .optimizer = "adam",
                                             .log_every = o.log_every,
                                             .record_activation_gradients = true,
                                             .seed = o.seed,
                                             .device = o.device}));
      const RunResult& last = result.organic.back();
      tell(progress, "E4 organic (autoencoder): {} test loss {}, output gradients zero in f16 {} ({:.1f} s)", legend(v),
           number(last.final_test_loss, 4), percent(output_flush_at_end(last), 1), last.seconds);
    }
  }
  return result;
}

namespace {

// What ran: the control sweep and the organic case.
std::string setup_text(const E4Options& o) {
  std::string sizes;
  for (std::int64_t size : o.organic_sizes) sizes += fmt::format("{}{}", sizes.empty() ? "" : "-", size);
  return fmt::format("Control (the sweep): MLP 784-256-256-10, plain SGD, batch {}, {} steps on the first {} "
                     "Fashion-MNIST training images, accuracy on the first {} test images; loss x 2^-k and lr {:g} "
                     "x 2^k. Built so that scaling must work: V3's S = 2^k undoes the multiplier exactly. "
                     "Activation-gradient zeros: over every op's output gradient in the backward pass (casts "
                     "excepted), in the dtype it was computed in, averaged over the logged steps. Organic case: an "
                     "autoencoder {} (ReLU) on the same images, binary cross entropy with logits averaged over the "
                     "{} x {} outputs of a batch, Adam lr {:g}, {} steps, nothing multiplied; scored by the loss on "
                     "the test images.",
                     o.batch, o.steps, o.train_examples, o.test_examples, o.lr, sizes, o.organic_batch,
                     o.organic_sizes.back(), o.organic_lr, o.organic_steps);
}

// The sweep's CSVs, its tables and plots per k (rows k, one column per variant), and its verdict.
void add_sweep(const E4Result& r, const Report& report, Section& s) {
  const E4Options& o = r.options;
  std::vector<RunGroup> sweep;
  for (std::size_t i = 0; i < r.sweep.size(); ++i) sweep.push_back(group_of(k_label(o.ks[i]), r.sweep[i]));
  s.csv_files = write_run_csvs(report, "E4", "e4_sweep", sweep);
  Table accuracy{.caption = "Test accuracy per k (loss x 2^-k, lr x 2^k). The paper: SSD diverges without scaling "
                            "and reaches 77.1% mAP with S = 8 (76.9% in FP32).",
                 .header = {"k"}};
  Table zeros{.caption = "Activation gradients that are exactly zero (V0 also: what would be zero in f16). The paper "
                         "(SSD, FP32): 67% zero, many more below 2^-24.",
              .header = {"k"}};
  for (const std::string& id : o.variant_ids) {
    const Variant v = variant(id);
    accuracy.header.push_back(id == "V3" ? "V3 float16_master S=2^k" : legend(v));
    zeros.header.push_back(id == "V3" ? "V3 float16_master S=2^k" : legend(v));
    if (id == "V0") zeros.header.push_back("V0 zero in f16");
  }
  std::vector<Series> accuracy_by_k(o.variant_ids.size()), zeros_by_k(o.variant_ids.size());
  for (std::size_t i = 0; i < r.sweep.size(); ++i) {
    std::vector<std::string> acc_row{std::to_string(o.ks[i])}, zero_row{std::to_string(o.ks[i])};
    for (std::size_t j = 0; j < r.sweep[i].size(); ++j) {
      const RunResult& run = r.sweep[i][j];
      acc_row.push_back(percent(run.final_accuracy) +
                        (run.skipped_steps ? fmt::format(" ({} skipped)", run.skipped_steps) : ""));
      zero_row.push_back(percent(activation_zeros(run), 1));
      if (run.variant.id == "V0") zero_row.push_back(percent(activation_zeros_in_f16(run), 1));
      accuracy_by_k[j].name = zeros_by_k[j].name = o.variant_ids[j] == "V3" ? "V3 float16_master S=2^k"
                                                                            : legend(run.variant);
      accuracy_by_k[j].style = zeros_by_k[j].style = variant_style(run.variant);
      accuracy_by_k[j].x.push_back(o.ks[i]);
      accuracy_by_k[j].y.push_back(100 * run.final_accuracy);
      zeros_by_k[j].x.push_back(o.ks[i]);
      zeros_by_k[j].y.push_back(100 * activation_zeros(run));
    }
    accuracy.rows.push_back(acc_row);
    zeros.rows.push_back(zero_row);
  }
  s.tables.push_back(accuracy);
  s.tables.push_back(zeros);
  std::vector<Tick> k_ticks;  // the k that ran, not gnuplot's even numbers between them
  for (int k : o.ks) k_ticks.push_back(Tick{.at = static_cast<double>(k), .label = std::to_string(k)});
  s.plots.push_back(Plot{.name = "e4_accuracy_by_k",
                         .title = "E4 test accuracy with the loss x 2^-k (lr x 2^k)",
                         .x_label = "k",
                         .y_label = "test accuracy (%)",
                         .kind = PlotKind::points,
                         .x_ticks = k_ticks,
                         .series = accuracy_by_k});
  s.plots.push_back(Plot{.name = "e4_activation_zeros_by_k",
                         .title = "E4 activation gradients exactly zero",
                         .x_label = "k",
                         .y_label = "zero activation gradients (%)",
                         .kind = PlotKind::points,
                         .x_ticks = k_ticks,
                         .series = zeros_by_k});
  s.verdict = sweep_verdict(r);
}

// The organic case's CSVs, table, plots and sentence of the verdict.
void add_organic(const E4Result& r, const Report& report, Section& s) {
  for (const std::string& name : write_run_csvs(report, "E4", "e4_organic", {group_of("organic", r.organic)}))
    s.csv_files.push_back(name);
  const RunResult* fp32 = find_run(r.organic, "V0");
  Table organic{.caption = "Organic case: the autoencoder's test loss, and its output-gradient values that are zero "
                           "in f16 (for fp32: would be), at the last logged step and over the run. The paper: SSD "
                           "diverges without scaling, 77.1% mAP with S = 8 (76.9% in FP32).",
                .header = {"variant", "test loss", "vs fp32", "output gradients zero in f16, last step",
                           "mean over the run", "skipped steps", "final scale"}};
  Plot flush{.name = "e4_organic_output_flush",
             .title = "E4 organic: autoencoder output-gradient values zero in f16",
             .x_label = "step",
             .y_label = "fraction of output-gradient values"};
  Plot loss{.name = "e4_organic_training_loss",
            .title = "E4 organic: autoencoder training loss (per pixel)",
            .x_label = "step",
            .y_label = "binary cross entropy"};
  int scale_style = 0;  // the V3 runs: one style each, from the variants absent here (V3, V5, V6)
  for (const RunResult& run : r.organic) {
    organic.rows.push_back(
        {legend(run.variant), number(run.final_test_loss, 4),
         fp32 ? fmt::format("{:+.2f}%", 100 * (run.final_test_loss / fp32->final_test_loss - 1)) : "-",
         percent(output_flush_at_end(run), 1),
         percent(mean_over_log(run, [](const StepLog& l) { return l.logit_zero_in_f16_fraction; }), 1),
         std::to_string(run.skipped_steps), number(run.final_scale)});
    Series f = step_series(run, [](const StepLog& l) { return l.logit_zero_in_f16_fraction; });
    Series l = step_series(run, [](const StepLog& entry) { return entry.loss; });
    if (run.variant.id == "V3") f.style = l.style = std::array{3, 5, 6}[static_cast<std::size_t>(scale_style++ % 3)];
    flush.series.push_back(f);
    loss.series.push_back(l);
  }
  s.tables.push_back(organic);
  s.plots.push_back(flush);
  s.plots.push_back(loss);
  s.verdict += fmt::format(" {}", organic_verdict(r));
}

}  // namespace

Section e4_section(const E4Result& r, Report& report) {
  Section s = kE4LossScaling.section();
  s.setup = setup_text(r.options);
  add_sweep(r, report, s);
  if (!r.organic.empty()) add_organic(r, report, s);
  return s;
}

}  // namespace mg::tools::repro
