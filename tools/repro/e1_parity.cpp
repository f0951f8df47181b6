#include "tools/repro/e1_parity.h"

#include <fmt/format.h>

#include <cmath>
#include <tuple>

#include "tools/repro/run_tables.h"

namespace mg::tools::repro {

namespace {

// Table 1 has no row per variant; what the paper (or its bf16 follow-up) leads one to expect.
std::string paper_expectation(const std::string& id) {
  if (id == "V0") return "baseline";
  if (id == "V2") return "parity without scaling (Table 1: e.g. ResNet-50 75.92 -> 76.04)";
  if (id == "V3" || id == "V4") return "parity (scaling is harmless where it is not needed)";
  if (id == "V5") return "parity (Kalamkar et al. 2019)";
  return "-";
}

// The largest |accuracy - fp32's| over the non-fp32 runs.
double worst_gap(const std::vector<RunResult>& runs) {
  const RunResult* fp32 = find_run(runs, "V0");
  double worst = 0;
  for (const RunResult& r : runs)
    if (fp32 && &r != fp32) worst = std::max(worst, std::fabs(r.final_accuracy - fp32->final_accuracy));
  return worst;
}

std::string verdict_for(const std::string& model, const std::vector<RunResult>& runs,
                        const std::vector<RunResult>& other_seeds, std::int64_t test_examples) {
  const RunResult* fp32 = find_run(runs, "V0");
  if (!fp32 || runs.size() < 2) return model + ": V0 and at least one other variant are needed for a verdict.";
  const double worst = worst_gap(runs), spread = fp32_seed_spread(runs, other_seeds);
  const double error = accuracy_standard_error(fp32->final_accuracy, test_examples);
  const double margin = std::max({0.005, error, spread});
  return fmt::format("{}: fp32 reached {} (over {} seeds it spread {:.2f} points); every other variant ended within "
                     "{:.2f} points of it. Parity margin {:.2f} points: the largest of 0.5, one standard error on {} "
                     "test images ({:.2f}) and fp32's spread over seeds. {}", model, percent(fp32->final_accuracy),
                     other_seeds.size() + 1, 100 * spread, 100 * worst, 100 * margin, test_examples, 100 * error,
                     worst <= margin ? "**Reproduced.**" : "**Not reproduced** within that margin.");
}

}  // namespace

double fp32_seed_spread(const std::vector<RunResult>& runs, const std::vector<RunResult>& other_seeds) {
  const RunResult* fp32 = find_run(runs, "V0");
  if (!fp32) return 0;
  double low = fp32->final_accuracy, high = low;
  for (const RunResult& r : other_seeds) {
    low = std::min(low, r.final_accuracy);
    high = std::max(high, r.final_accuracy);
  }
  return high - low;
}

double accuracy_standard_error(double accuracy, std::int64_t examples) {
  return examples > 0 ? std::sqrt(accuracy * (1 - accuracy) / static_cast<double>(examples)) : std::nan("");
}

E1Options e1_options(Preset preset) {
  E1Options o;
  if (preset == Preset::Full) {
    o.train_examples = 60000;
    o.test_examples = 10000;
    o.mlp_steps = o.cnn_steps = 4000;
    o.batch = 128;
    o.log_every = 25;
    o.eval_every = 500;
    o.cnn = nn::CnnOptions{};  // 32 and 64 channels, 128 hidden
    o.fp32_seed_offsets = {1, 2};
  }
  return o;
}

RunConfig e1_run_config(const E1Options& o, std::shared_ptr<const ImageData> data, const ModelFactory& make,
                        std::int64_t steps, const Variant& v, std::uint64_t seed) {
  return RunConfig{.variant = v, .make_model = make, .data = std::move(data), .steps = steps, .batch = o.batch,
                   .lr = o.lr, .momentum = o.momentum, .schedule = optim::cosine_decay(steps, o.min_lr_factor),
                   .log_every = o.log_every, .eval_every = o.eval_every, .seed = seed, .device = o.device};
}

E1Result run_e1(const E1Options& o, std::shared_ptr<const ImageData> data,
                const std::function<void(const std::string&)>& progress) {
  E1Result result{.options = o};
  auto train = [&](const std::string& model, const ModelFactory& make, std::int64_t steps, const Variant& v,
                   std::uint64_t seed) {
    RunResult r = run(e1_run_config(o, data, make, steps, v, seed));
    if (progress)
      progress(fmt::format("E1 {}: {} seed {} test accuracy {} ({} skipped steps, {:.1f} s)", model, legend(v), seed,
                           percent(r.final_accuracy), r.skipped_steps, r.seconds));
    return r;
  };
  for (const Variant& v : variants(o.variant_ids, o.static_scale))
    result.mlp.push_back(train("MLP", mlp_784_256_256_10, o.mlp_steps, v, o.seed));
  for (std::uint64_t offset : o.fp32_seed_offsets)
    result.mlp_fp32_seeds.push_back(train("MLP", mlp_784_256_256_10, o.mlp_steps, variant("V0"), o.seed + offset));
  for (const Variant& v : variants(o.variant_ids, o.static_scale))
    result.cnn.push_back(train("CNN", cnn_of(o.cnn), o.cnn_steps, v, o.seed));
  for (std::uint64_t offset : o.fp32_seed_offsets)
    result.cnn_fp32_seeds.push_back(train("CNN", cnn_of(o.cnn), o.cnn_steps, variant("V0"), o.seed + offset));
  return result;
}

Section e1_section(const E1Result& r, Report& report) {
  const E1Options& o = r.options;
  std::vector<RunGroup> groups;
  for (const auto& [model, runs, seeds] : {std::tuple{"MLP", &r.mlp, &r.mlp_fp32_seeds},
                                           std::tuple{"CNN", &r.cnn, &r.cnn_fp32_seeds}}) {
    groups.push_back(group_of(model, *runs));
    for (std::size_t i = 0; i < seeds->size(); ++i)  // the seeds' runs: their final numbers only
      groups.push_back({fmt::format("{} seed {}", model, o.seed + o.fp32_seed_offsets[i]), {&(*seeds)[i]}, false});
  }
  Section s = e1_experiment().section();
  s.csv_files = write_run_csvs(report, "E1", "e1", groups);
  s.setup = fmt::format("MLP 784-256-256-10 ({} steps) and CNN conv{}-pool-conv{}-pool-{}-10 ({} steps), SGD with "
                        "momentum {:g}, lr {:g} decaying to {:g} (cosine), batch {}, on the first {} Fashion-MNIST training images; accuracy on "
                        "the first {} test images. V3's static scale S = {:g}. Same seed ({}), initialization and batch "
                        "order for every variant; fp32 also ran with {} other seeds to measure the noise.", o.mlp_steps, o.cnn.channels1, o.cnn.channels2, o.cnn.hidden,
                        o.cnn_steps, o.momentum, o.lr, o.lr * o.min_lr_factor, o.batch, o.train_examples, o.test_examples, o.static_scale,
                        o.seed, o.fp32_seed_offsets.size());
  Table table{.header = {"variant", "MLP accuracy", "vs fp32", "CNN accuracy", "vs fp32", "skipped steps (MLP / CNN)",
                         "the paper"}};
  const RunResult *mlp_fp32 = find_run(r.mlp, "V0"), *cnn_fp32 = find_run(r.cnn, "V0");
  auto versus = [](const RunResult& run, const RunResult* fp32) {
    return fp32 ? fmt::format("{:+.2f}", 100 * (run.final_accuracy - fp32->final_accuracy)) : std::string("-");
  };
  for (std::size_t i = 0; i < r.mlp.size() && i < r.cnn.size(); ++i) {
    const RunResult &m = r.mlp[i], &c = r.cnn[i];
    table.rows.push_back({legend(m.variant), percent(m.final_accuracy), versus(m, mlp_fp32), percent(c.final_accuracy),
                          versus(c, cnn_fp32), fmt::format("{} / {}", m.skipped_steps, c.skipped_steps),
                          paper_expectation(m.variant.id)});
  }
  auto seed_cells = [](const std::vector<RunResult>& runs) {
    std::string cells;
    for (const RunResult& run : runs) cells += (cells.empty() ? "" : ", ") + percent(run.final_accuracy);
    return cells.empty() ? std::string("-") : cells;
  };
  table.rows.push_back({"V0 fp32, other seeds", seed_cells(r.mlp_fp32_seeds),
                        fmt::format("spread {:.2f}", 100 * fp32_seed_spread(r.mlp, r.mlp_fp32_seeds)),
                        seed_cells(r.cnn_fp32_seeds),
                        fmt::format("spread {:.2f}", 100 * fp32_seed_spread(r.cnn, r.cnn_fp32_seeds)), "-",
                        "the noise parity is judged against"});
  s.tables.push_back(table);
  s.tables.push_back(Table{
      .caption = "The paper's Table 1 (ILSVRC12 top-1 %, FP32 baseline and mixed precision without loss scaling):",
      .header = {"AlexNet", "VGG-D", "GoogLeNet", "Inception v2", "Inception v3", "ResNet-50"},
      .rows = {{"56.77 / 56.93", "65.40 / 65.43", "68.33 / 68.43", "70.03 / 70.02", "73.85 / 74.13", "75.92 / 76.04"}}});
  s.verdict = verdict_for("MLP", r.mlp, r.mlp_fp32_seeds, o.test_examples) + " " +
              verdict_for("CNN", r.cnn, r.cnn_fp32_seeds, o.test_examples);
  for (const auto& [tag, runs] : {std::pair{"mlp", &r.mlp}, std::pair{"cnn", &r.cnn}}) {
    Plot accuracy{.name = fmt::format("e1_accuracy_{}", tag),
                  .title = fmt::format("E1 test accuracy, {}", tag == std::string("mlp") ? "MLP" : "CNN"),
                  .x_label = "step", .y_label = "test accuracy (%)", .kind = PlotKind::points};
    Plot loss{.name = fmt::format("e1_loss_{}", tag),
              .title = fmt::format("E1 training loss, {}", tag == std::string("mlp") ? "MLP" : "CNN"),
              .x_label = "step", .y_label = "training loss (batch)", .log_y = 10};
    for (const RunResult& run : *runs) {
      accuracy.series.push_back(accuracy_series(run));
      loss.series.push_back(step_series(run, [](const StepLog& l) { return l.loss; }));
    }
    s.plots.push_back(accuracy);
    s.plots.push_back(loss);
    if (const auto scaled = with_loss_scaling(*runs); !scaled.empty())
      s.plots.push_back(scale_plot(fmt::format("e1_scale_{}", tag),
                                   fmt::format("E1 loss scale, {} (skipped steps marked)",
                                               tag == std::string("mlp") ? "MLP" : "CNN"), scaled));
  }
  return s;
}

Experiment e1_experiment() {
  return Experiment{
      .id = "E1",
      .title = "Parity",
      .reference = "Table 1",
      .claim = "ImageNet CNNs trained in mixed precision (FP16 storage and arithmetic, FP32 master weights, FP32 "
               "accumulation) match their FP32 top-1 accuracy within a few tenths of a point (e.g. ResNet-50 75.92 -> "
               "76.04), without loss scaling.",
      .run = [](Context& context, Report& report) {
        E1Options options = e1_options(context.preset);
        options.seed = context.seed;
        options.device = context.device;
        auto data = context.fashion_mnist(options.train_examples, options.test_examples);
        return e1_section(run_e1(options, data, context.progress_sink()), report);
      }};
}

}  // namespace mg::tools::repro
