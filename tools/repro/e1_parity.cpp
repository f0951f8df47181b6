#include "tools/repro/e1_parity.h"

#include <fmt/format.h>

#include <cmath>
#include <tuple>

#include "tools/repro/run_tables.h"

namespace mg::tools::repro {

constexpr Heading kE1Parity{
    .id = "E1",
    .title = "Parity",
    .reference = "Table 1",
    .claim = "ImageNet CNNs trained in mixed precision (FP16 storage and arithmetic, FP32 master weights, FP32 "
             "accumulation) match their FP32 top-1 accuracy within a few tenths of a point (e.g. ResNet-50 75.92 -> "
             "76.04), without loss scaling."};

namespace {

// Table 1 has no row per variant; what the paper (or its bf16 follow-up) leads one to expect.
constexpr PaperNote kPaper[] = {
    {"V0", "baseline"},
    {"V1", "not mixed precision: E2 (Figure 2a) shows what it loses"},
    {"V2", "parity without scaling (Table 1: e.g. ResNet-50 75.92 -> 76.04)"},
    {"V3", "parity (scaling is harmless where it is not needed)"},
    {"V4", "parity (scaling is harmless where it is not needed)"},
    {"V5", "parity (Kalamkar et al. 2019)"},
};

// Student's t for a two-sided 95% interval, by degrees of freedom (1 .. 10; 1.96 beyond).
double t_975(std::size_t degrees) {
  static constexpr double kTable[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228};
  return degrees == 0 ? 0.0 : degrees <= std::size(kTable) ? kTable[degrees - 1] : 1.96;
}

// "+0.12 [-0.30, +0.54]": a paired difference in points, with its interval.
std::string difference_cell(const PairedDifference& d) {
  if (d.seeds < 2) return fmt::format("{:+.2f}", 100 * d.mean);
  return fmt::format("{:+.2f} [{:+.2f}, {:+.2f}]", 100 * d.mean, 100 * d.low, 100 * d.high);
}

// The runs of variant `id` over the seeds, or nullptr.
const std::vector<RunResult>* seeds_of(const E1Result& r, const std::vector<std::vector<RunResult>>& all,
                                       const std::string& id) {
  for (std::size_t i = 0; i < r.options.variant_ids.size() && i < all.size(); ++i)
    if (r.options.variant_ids[i] == id) return &all[i];
  return nullptr;
}

double mean_accuracy(const std::vector<RunResult>& runs) {
  double sum = 0;
  for (const RunResult& run : runs) sum += run.final_accuracy;
  return runs.empty() ? std::nan("") : sum / static_cast<double>(runs.size());
}

std::string verdict_for(const std::string& model, const E1Result& r, const std::vector<std::vector<RunResult>>& all) {
  const std::vector<RunResult>* fp32 = seeds_of(r, all, "V0");
  if (!fp32 || fp32->empty() || all.size() < 2)
    return model + ": V0 and at least one other variant are needed for a verdict.";
  const double spread = fp32_seed_spread(*fp32);
  const double error = accuracy_standard_error(mean_accuracy(*fp32), r.options.test_examples);
  const double margin = std::max({0.005, error, spread});
  double worst = 0;
  bool established = true;
  std::string pure;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::string& id = r.options.variant_ids[i];
    if (id == "V0") continue;
    const PairedDifference d = paired_difference(all[i], *fp32);
    if (id == "V1") {  // not the paper's mixed precision: reported, not judged
      pure = fmt::format(" V1 float16_pure (f16 weights updated in place) under this recipe: {} points{}.",
                         difference_cell(d),
                         std::fabs(d.mean) <= margin
                             ? ", within the margin: at this rate and "
                               "length its lost updates cost nothing measurable (E2 shows where they do)"
                             : "");
      continue;
    }
    worst = std::max(worst, std::fabs(d.mean));
    established = established && d.low >= -margin && d.high <= margin;
  }
  return fmt::format(
      "{}: fp32 reached {} on average over {} seeds (spread {:.2f} points). The mixed-precision variants' "
      "paired differences from fp32 were at most {:.2f} points in the mean. Parity margin {:.2f} points: "
      "the largest of 0.5, one standard error on {} test images ({:.2f}) and fp32's spread over seeds. {}{}",
      model, percent(mean_accuracy(*fp32)), fp32->size(), 100 * spread, 100 * worst, 100 * margin,
      r.options.test_examples, 100 * error,
      worst > margin ? "**Not reproduced** within that margin."
      : established  ? "**Reproduced:** every 95% interval lies within the margin."
                     : "**Reproduced in the mean**; with this few seeds not every 95% interval lies "
                       "within the margin, so parity is not established statistically.",
      pure);
}

}  // namespace

PairedDifference paired_difference(const std::vector<RunResult>& variant, const std::vector<RunResult>& fp32,
                                   double RunResult::*metric) {
  PairedDifference d;
  std::vector<double> differences;
  for (std::size_t s = 0; s < variant.size() && s < fp32.size(); ++s)
    differences.push_back(variant[s].*metric - fp32[s].*metric);
  d.seeds = differences.size();
  if (differences.empty()) return d;
  for (double x : differences) d.mean += x / static_cast<double>(differences.size());
  double squares = 0;
  for (double x : differences) squares += (x - d.mean) * (x - d.mean);
  d.deviation = differences.size() > 1 ? std::sqrt(squares / static_cast<double>(differences.size() - 1)) : 0.0;
  const double half_width = t_975(differences.size() - 1) * d.deviation /
                            std::sqrt(static_cast<double>(differences.size()));
  d.low = d.mean - half_width;
  d.high = d.mean + half_width;
  return d;
}

double fp32_seed_spread(const std::vector<RunResult>& fp32_runs, double RunResult::*metric) {
  if (fp32_runs.empty()) return 0;
  double low = fp32_runs.front().*metric, high = low;
  for (const RunResult& r : fp32_runs) {
    low = std::min(low, r.*metric);
    high = std::max(high, r.*metric);
  }
  return high - low;
}

double accuracy_standard_error(double accuracy, std::int64_t examples) {
  return examples > 0 ? std::sqrt(accuracy * (1 - accuracy) / static_cast<double>(examples)) : std::nan("");
}

E1Options e1_options(Preset preset, Device device, std::uint64_t seed) {
  return preset_options<E1Options>(preset,
                                   {.train_examples = 60000,
                                    .test_examples = 10000,
                                    .mlp_steps = 4000,
                                    .cnn_steps = 4000,
                                    .batch = 128,
                                    .log_every = 25,
                                    .eval_every = 500,
                                    .cnn = {},  // 32 and 64 channels, 128 hidden
                                    .variant_ids = {"V0", "V1", "V2", "V3", "V4", "V5"}},
                                   device, seed);
}

RunConfig e1_run_config(const E1Options& o, std::shared_ptr<const ImageData> data, const ModelFactory& make,
                        std::int64_t steps, const Variant& v, std::uint64_t seed) {
  return RunConfig{.variant = v,
                   .make_model = make,
                   .data = std::move(data),
                   .steps = steps,
                   .batch = o.batch,
                   .lr = o.lr,
                   .momentum = o.momentum,
                   .schedule = optim::cosine_decay(steps, o.min_lr_factor),
                   .log_every = o.log_every,
                   .eval_every = o.eval_every,
                   .seed = seed,
                   .device = o.device};
}

E1Result run_e1(const E1Options& o, std::shared_ptr<const ImageData> data, const Progress& progress) {
  MG_CHECK(!o.seed_offsets.empty(), "repro E1: needs at least one seed offset");
  E1Result result{.options = o};
  auto train = [&](const std::string& model, const ModelFactory& make, std::int64_t steps, const Variant& v,
                   std::uint64_t seed) {
    RunResult r = run(e1_run_config(o, data, make, steps, v, seed));
    tell(progress, "E1 {}: {} seed {} test accuracy {} ({} skipped steps, {:.1f} s)", model, legend(v), seed,
         percent(r.final_accuracy), r.skipped_steps, r.seconds);
    return r;
  };
  for (const auto& [model, make, steps, all, first] :
       {std::tuple{"MLP", ModelFactory(mlp_784_256_256_10), o.mlp_steps, &result.mlp_seeds, &result.mlp},
        std::tuple{"CNN", cnn_of(o.cnn), o.cnn_steps, &result.cnn_seeds, &result.cnn}})
    for (const Variant& v : variants(o.variant_ids, o.static_scale)) {
      std::vector<RunResult> runs;
      for (std::uint64_t offset : o.seed_offsets) runs.push_back(train(model, make, steps, v, o.seed + offset));
      first->push_back(runs.front());
      all->push_back(std::move(runs));
    }
  return result;
}

Section e1_section(const E1Result& r, Report& report) {
  const E1Options& o = r.options;
  std::vector<RunGroup> groups;
  for (const auto& [model, all] : {std::pair{"MLP", &r.mlp_seeds}, std::pair{"CNN", &r.cnn_seeds}})
    for (std::size_t s = 0; s < o.seed_offsets.size(); ++s) {
      RunGroup group{.series = fmt::format("{} seed {}", model, o.seed + o.seed_offsets[s]),
                     .runs = {},
                     .steps = s == 0};
      for (const auto& runs : *all)
        if (s < runs.size()) group.runs.push_back(&runs[s]);
      groups.push_back(group);
    }
  Section s = kE1Parity.section();
  s.csv_files = write_run_csvs(report, "E1", "e1", groups);
  std::string seeds;
  for (std::uint64_t offset : o.seed_offsets) seeds += fmt::format("{}{}", seeds.empty() ? "" : ", ", o.seed + offset);
  s.setup = fmt::format("MLP 784-256-256-10 ({} steps) and CNN conv{}-pool-conv{}-pool-{}-10 ({} steps), SGD with "
                        "momentum {:g}, lr {:g} decaying to {:g} (cosine), batch {}, on the first {} Fashion-MNIST "
                        "training images; accuracy on the first {} test images. Every variant ran with seeds {} (the "
                        "seed sets the initial weights and the batch order, shared by the variants), so each "
                        "variant's difference from fp32 is paired seed by seed. V3's static scale S = {:g}.",
                        o.mlp_steps, o.cnn.channels1, o.cnn.channels2, o.cnn.hidden, o.cnn_steps, o.momentum, o.lr,
                        o.lr * o.min_lr_factor, o.batch, o.train_examples, o.test_examples, seeds, o.static_scale);
  Table table{.caption = "Final test accuracy, the mean over the seeds, and the paired difference from fp32 in points: "
                         "mean [95% interval].",
              .header = {"variant", "MLP accuracy", "vs fp32", "CNN accuracy", "vs fp32", "skipped steps (MLP / CNN)",
                         "the paper"}};
  const std::vector<RunResult>*mlp_fp32 = seeds_of(r, r.mlp_seeds, "V0"), *cnn_fp32 = seeds_of(r, r.cnn_seeds, "V0");
  auto skipped = [](const std::vector<RunResult>& runs) {
    std::int64_t total = 0;
    for (const RunResult& run : runs) total += run.skipped_steps;
    return total;
  };
  for (std::size_t i = 0; i < r.mlp_seeds.size() && i < r.cnn_seeds.size(); ++i) {
    const std::vector<RunResult>&m = r.mlp_seeds[i], &c = r.cnn_seeds[i];
    table.rows.push_back({legend(m.front().variant), percent(mean_accuracy(m)),
                          mlp_fp32 ? difference_cell(paired_difference(m, *mlp_fp32)) : "-", percent(mean_accuracy(c)),
                          cnn_fp32 ? difference_cell(paired_difference(c, *cnn_fp32)) : "-",
                          fmt::format("{} / {}", skipped(m), skipped(c)), paper_note(kPaper, m.front().variant.id)});
  }
  auto seed_cells = [](const std::vector<RunResult>* runs) {
    std::string cells;
    if (runs)
      for (const RunResult& run : *runs)
        cells += fmt::format("{}{}", cells.empty() ? "" : ", ", percent(run.final_accuracy));
    return cells.empty() ? std::string("-") : cells;
  };
  table.rows.push_back({"V0 fp32, each seed", seed_cells(mlp_fp32),
                        fmt::format("spread {:.2f}", mlp_fp32 ? 100 * fp32_seed_spread(*mlp_fp32) : 0.0),
                        seed_cells(cnn_fp32),
                        fmt::format("spread {:.2f}", cnn_fp32 ? 100 * fp32_seed_spread(*cnn_fp32) : 0.0), "-",
                        "the noise parity is judged against"});
  s.tables.push_back(table);
  s.tables.push_back(Table{
      .caption = "The paper's Table 1 (ILSVRC12 top-1 %, FP32 baseline and mixed precision without loss scaling):",
      .header = {"AlexNet", "VGG-D", "GoogLeNet", "Inception v2", "Inception v3", "ResNet-50"},
      .rows = {
          {"56.77 / 56.93", "65.40 / 65.43", "68.33 / 68.43", "70.03 / 70.02", "73.85 / 74.13", "75.92 / 76.04"}}});
  s.verdict = verdict_for("MLP", r, r.mlp_seeds) + " " + verdict_for("CNN", r, r.cnn_seeds);
  for (const auto& [kind, runs] : {std::pair{&model_kind("mlp"), &r.mlp}, std::pair{&model_kind("cnn"), &r.cnn}}) {
    const std::string& tag = kind->name;
    const std::string& model = kind->title;
    s.plots.push_back(
        accuracy_plot(fmt::format("e1_accuracy_{}", tag), fmt::format("E1 test accuracy, {}", model), *runs));
    s.plots.push_back(step_plot({.name = fmt::format("e1_loss_{}", tag),
                                 .title = fmt::format("E1 training loss, {}", model),
                                 .y_label = "training loss (batch)",
                                 .log_y = 10},
                                *runs, [](const StepLog& l) { return l.loss; }));
    if (const auto scaled = with_loss_scaling(*runs); !scaled.empty())
      s.plots.push_back(scale_plot(fmt::format("e1_scale_{}", tag),
                                   fmt::format("E1 loss scale, {} (skipped steps marked)", model), scaled));
  }
  return s;
}

}  // namespace mg::tools::repro
