#include "tools/repro/e8_fp8_parity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tools/repro/run_tables.h"

namespace mg::tools::repro {

constexpr Heading kE8Fp8Parity{
    .id = "E8",
    .title = "FP8 parity",
    .reference = "Micikevicius et al. 2022, FP8 Formats for Deep Learning",
    .claim = "Training with the GEMMs' inputs in FP8 (E4M3 for weights and activations, E5M2 for gradients, a scale "
             "per tensor) matches the result quality of 16-bit training on CNNs, RNNs and Transformers up to GPT-3 "
             "175B, with every hyper-parameter left as in the 16-bit baseline; the training-loss curves of FP8 and "
             "16-bit runs lie on top of each other (its Figure 1). Later recipes scale finer: DeepSeek-V3 per 1x128 "
             "tile and 128x128 block, E4M3 throughout; OCP MX per 32 values with a power-of-two scale."};

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// "86.27%" or "2.143": a model's score as its table shows it.
std::string score_cell(const E8Model& m, double value) { return m.text ? number(value, 4) : percent(value); }

// "+0.12 points [-0.30, +0.54]" or "+0.004 bits/char": the paired difference, with its interval over
// two seeds or more.
std::string difference_cell(const E8Model& m, const PairedDifference& d) {
  const double unit = m.text ? 1.0 : 100.0;
  const std::string format = m.text ? "{:+.4f}" : "{:+.2f}";
  std::string cell = fmt::format(fmt::runtime(format), unit * d.mean);
  if (d.seeds >= 2) cell += fmt::format(fmt::runtime(" [" + format + ", " + format + "]"), unit * d.low, unit * d.high);
  return cell;
}

// When fp8_delayed misses the margin and fp8_current keeps it: the two differ only in where the
// per-tensor scale comes from, and at the first step delayed scaling has no history to take it from.
std::string delayed_note(const E8Model& m, const std::vector<RunResult>& baseline, double margin) {
  const std::vector<RunResult>*delayed = e8_runs_of(m, "V8"), *current = e8_runs_of(m, "V9");
  if (!delayed || !current) return "";
  auto outside = [&](const std::vector<RunResult>& runs) {
    return !(std::fabs(paired_difference(runs, baseline, e8_metric(m)).mean) <= margin);
  };
  if (!outside(*delayed) || outside(*current)) return "";
  return fmt::format(" fp8_delayed and fp8_current differ only in where the per-tensor scale comes from: delayed "
                     "scaling has no amax history before its first step and quantises that step with scale 1 (as "
                     "Transformer Engine does), and its loss gap stands at {:+.4f} over the first quarter of the run "
                     "already.",
                     e8_mean_gap(*delayed, baseline, early_loss_gap));
}

// One model's verdict: which recipes are within the margin, and the loss gaps beside it.
std::string verdict_for(const E8Model& m, const E8Options& o) {
  const std::vector<RunResult>* baseline = e8_runs_of(m, "V5");
  if (!baseline || m.runs.size() < 2) return m.name + ": V5 and an FP8 variant are needed for a verdict.";
  const double margin = e8_parity_margin(m, o, *baseline), unit = m.text ? 1.0 : 100.0;
  std::string within, outside, gaps;
  for (std::size_t i = 0; i < m.runs.size(); ++i) {
    const Variant& v = m.runs[i].front().variant;
    if (v.id == "V5") continue;
    const PairedDifference d = paired_difference(m.runs[i], *baseline, e8_metric(m));
    // A diverged run's score is NaN: never at parity.
    std::string& list = std::fabs(d.mean) <= margin ? within : outside;
    list += fmt::format("{}{} ({})", list.empty() ? "" : ", ", v.name, difference_cell(m, d));
    gaps += fmt::format("{}{} {:+.4f} then {:+.4f}", gaps.empty() ? "" : ", ", v.name,
                        e8_mean_gap(m.runs[i], *baseline, early_loss_gap),
                        e8_mean_gap(m.runs[i], *baseline, late_loss_gap));
  }
  std::string text = fmt::format(
      "{}: mixed_bfloat16 reached {}; parity margin {} {}. Within it: {}. Outside it: {}. Training-loss gap to "
      "mixed_bfloat16 over the first and the last quarter of the run (nats): {}. ",
      m.name, score_cell(m, e8_mean_score(*baseline, e8_metric(m))), number(unit * margin, 3),
      m.text ? "bits/char" : "points", within.empty() ? "none" : within, outside.empty() ? "none" : outside, gaps);
  text += outside.empty()  ? "**Reproduced:** every FP8 recipe matches the 16-bit baseline."
          : within.empty() ? "**Not reproduced:** no FP8 recipe matched the 16-bit baseline."
                           : "**Reproduced for some recipes only** (those within the margin).";
  return text + delayed_note(m, *baseline, margin);
}

// The mean of the gap over logged steps [from, to), NaNs left out.
double mean_gap(const std::vector<double>& gap, std::size_t from, std::size_t to) {
  double sum = 0;
  std::size_t n = 0;
  for (std::size_t i = from; i < to && i < gap.size(); ++i)
    if (!std::isnan(gap[i])) sum += gap[i], ++n;
  return n ? sum / static_cast<double>(n) : kNaN;
}

}  // namespace

RunConfig e8_run_config(const E8Options& o, const std::string& model, std::shared_ptr<const ImageData> images,
                        std::shared_ptr<const TextData> text, const Variant& v, std::uint64_t seed) {
  if (model == "MLP" || model == "CNN") {
    const ModelFactory make = model == "MLP" ? ModelFactory(mlp_784_256_256_10) : cnn_of(o.images.cnn);
    return e1_run_config(o.images, std::move(images), make, model == "MLP" ? o.images.mlp_steps : o.images.cnn_steps, v,
                         seed);
  }
  MG_CHECK(model == "char LSTM" || model == "tiny GPT", "repro E8: no model '{}'", model);
  E5Options language = o.language;
  language.seed = seed;
  RunConfig c = e5_run_config(language, std::move(text), v, "adam", model == "tiny GPT");
  c.record_activation_gradients = c.record_weight_gradients = false;  // E5's records: not needed here
  return c;
}

double RunResult::*e8_metric(const E8Model& m) { return m.text ? &RunResult::final_bpc : &RunResult::final_accuracy; }

double e8_mean_score(const std::vector<RunResult>& runs, double RunResult::*metric) {
  double sum = 0;
  for (const RunResult& run : runs) sum += run.*metric;
  return runs.empty() ? kNaN : sum / static_cast<double>(runs.size());
}

double e8_parity_margin(const E8Model& m, const E8Options& o, const std::vector<RunResult>& baseline) {
  const double spread = fp32_seed_spread(baseline, e8_metric(m));
  if (m.text) return std::max(o.bpc_margin, spread);
  const double error = accuracy_standard_error(e8_mean_score(baseline, e8_metric(m)), o.images.test_examples);
  return std::max({0.005, error, spread});
}

double e8_mean_gap(const std::vector<RunResult>& runs, const std::vector<RunResult>& baseline,
                   double (*gap)(const RunResult&, const RunResult&)) {
  double sum = 0;
  std::size_t n = 0;
  for (std::size_t s = 0; s < runs.size() && s < baseline.size(); ++s, ++n) sum += gap(runs[s], baseline[s]);
  return n ? sum / static_cast<double>(n) : kNaN;
}

std::vector<RunGroup> e8_run_groups(const E8Result& r) {
  std::vector<RunGroup> groups;
  for (const E8Model& m : r.models)
    for (std::size_t seed = 0; seed < r.options.seed_offsets.size(); ++seed) {
      RunGroup group{.series = fmt::format("{} seed {}", m.name, r.options.seed + r.options.seed_offsets[seed]),
                     .runs = {},
                     .steps = seed == 0};
      for (const std::vector<RunResult>& runs : m.runs)
        if (seed < runs.size()) group.runs.push_back(&runs[seed]);
      groups.push_back(group);
    }
  return groups;
}

const std::vector<RunResult>* e8_runs_of(const E8Model& m, const std::string& id) {
  for (const std::vector<RunResult>& runs : m.runs)
    if (!runs.empty() && runs.front().variant.id == id) return &runs;
  return nullptr;
}

double early_loss_gap(const RunResult& run, const RunResult& baseline) {
  const std::vector<double> gap = loss_gap(run, baseline);
  return run.diverged ? kNaN : mean_gap(gap, 0, std::max<std::size_t>(1, gap.size() / 4));
}

double late_loss_gap(const RunResult& run, const RunResult& baseline) {
  const std::vector<double> gap = loss_gap(run, baseline);
  const std::size_t quarter = std::min(gap.size(), std::max<std::size_t>(1, gap.size() / 4));
  return run.diverged ? kNaN : mean_gap(gap, gap.size() - quarter, gap.size());
}

Plot loss_gap_plot(Plot plot, const std::vector<RunResult>& runs, const RunResult& baseline) {
  plot.x_label = "step";
  plot.y_label = "loss gap (nats)";
  for (const RunResult& run : runs) {
    if (run.variant.id == baseline.variant.id) continue;
    Series series = variant_series(run.variant);
    const std::vector<double> gaps = loss_gap(run, baseline);
    for (std::size_t i = 0; i < run.log.size(); ++i) {
      series.x.push_back(static_cast<double>(run.log[i].step));
      series.y.push_back(gaps[i]);
    }
    plot.series.push_back(series);
  }
  return plot;
}

E8Options e8_options(Preset preset, Device /*the runs stay on the CPU*/, std::uint64_t seed) {
  E8Options o = preset_options<E8Options>(
      preset,
      {.images = e1_options(Preset::Full, Device::cpu(), seed),
       .language = {.train_chars = 4000000,
                    .validation_chars = 200000,
                    .steps = 1500,
                    .batch = 64,
                    .context = 64,  // B x T = 4096
                    .log_every = 25,
                    .eval_every = 250,
                    .embed_dim = 64,
                    .hidden = 256,
                    .optimizers = {"adam"},
                    .adam_lr = 3e-3,
                    .gpt_options = {.block_size = 64, .embed_dim = 128, .heads = 4, .layers = 4},
                    .gpt_steps = 1000},
       .gpt = true,
       .seed_offsets = {0, 1, 2}},
      Device::cpu(), seed);
  o.images.device = o.language.device = Device::cpu();  // the FP8 GEMMs run on the CPU only
  return o;
}

namespace {

// Did `reuse` run the model in the same configuration as `o` (its variants aside)?
bool same_runs(const E8Options& o, const E8Options& r) {
  const E1Options &a = o.images, &b = r.images;
  const E5Options &l = o.language, &k = r.language;
  return o.seed == r.seed && o.seed_offsets == r.seed_offsets && a.train_examples == b.train_examples &&
         a.test_examples == b.test_examples && a.mlp_steps == b.mlp_steps && a.cnn_steps == b.cnn_steps &&
         a.batch == b.batch && a.lr == b.lr && a.log_every == b.log_every && a.eval_every == b.eval_every &&
         l.steps == k.steps && l.gpt_steps == k.gpt_steps && l.batch == k.batch && l.context == k.context &&
         l.train_chars == k.train_chars;
}

}  // namespace

E8Result run_e8(const E8Options& o, std::shared_ptr<const ImageData> images, std::shared_ptr<const TextData> text,
                const Progress& progress, const E8Result* reuse, std::string_view tag) {
  MG_CHECK(!o.seed_offsets.empty() && !o.variant_ids.empty(), "repro E8: needs at least one seed and one variant");
  E8Result result{.options = o};
  std::vector<E8Model> models;
  if (images) models.push_back({.name = "MLP"});
  if (images && o.cnn) models.push_back({.name = "CNN"});
  if (text && o.lstm) models.push_back({.name = "char LSTM", .text = true});
  if (text && o.gpt) models.push_back({.name = "tiny GPT", .text = true});
  const bool reusable = reuse != nullptr && same_runs(o, reuse->options);
  for (E8Model& m : models) {
    const E8Model* earlier = nullptr;
    if (reusable)
      for (const E8Model& candidate : reuse->models)
        if (candidate.name == m.name) earlier = &candidate;
    for (const Variant& v : variants(o.variant_ids)) {
      if (const std::vector<RunResult>* taken = earlier ? e8_runs_of(*earlier, v.id) : nullptr) {
        m.runs.push_back(*taken);
        tell(progress, "{} {}: {}, taken from an earlier experiment of this call", tag, m.name, legend(v));
        continue;
      }
      std::vector<RunResult> runs;
      for (std::uint64_t offset : o.seed_offsets) {
        runs.push_back(run(e8_run_config(o, m.name, images, text, v, o.seed + offset)));
        const RunResult& r = runs.back();
        tell(progress, "{} {}: {} seed {} {} {}{} ({:.1f} s)", tag, m.name, legend(v), o.seed + offset,
             m.text ? "validation bits/char" : "test accuracy", score_cell(m, r.*e8_metric(m)),
             r.diverged ? ", diverged" : "", r.seconds);
      }
      m.runs.push_back(std::move(runs));
    }
    result.models.push_back(std::move(m));
  }
  return result;
}

namespace {

// What ran: the models, their recipes, the variants and the seeds.
std::string setup_text(const E8Result& r) {
  const E8Options& o = r.options;
  std::string seeds;
  for (std::uint64_t offset : o.seed_offsets) seeds += fmt::format("{}{}", seeds.empty() ? "" : ", ", o.seed + offset);
  const E5Options& l = o.language;
  return fmt::format(
      "V5 mixed_bfloat16 and the four FP8 recipes (V8 fp8_delayed: E4M3 forward, E5M2 gradients, per-tensor scales "
      "from a 16-step amax history; V9 fp8_current: the same with each tensor's own amax; V10 fp8_block: E4M3 "
      "throughout, 1x128 tiles and 128x128 weight blocks; V11 mxfp8: E4M3 throughout, a power-of-two scale per 32 "
      "values, the spec's rounding). FP8 covers every nn::Linear: all three layers of the MLP, the CNN's two fully "
      "connected layers (its convolutions stay bf16), the LSTM's head (its recurrence stays bf16){}. MLP "
      "784-256-256-10 ({} steps) and CNN conv{}-pool-conv{}-pool-{}-10 ({} steps) as E1: SGD with momentum {:g}, lr "
      "{:g} decaying to {:g} (cosine), batch {}, the first {} Fashion-MNIST training images, accuracy on the first {} "
      "test images. Char LSTM (embedding {}, {} cells) on the first {} characters of the King James Bible, {} steps "
      "of Adam (lr {:g}) on {} windows of {} characters, validation on {} held-out characters.{} Seed{} {}: the "
      "variants of one seed share initial weights and batches, so differences are paired. Scores are measured in "
      "fp32 (the f32 weights, no FP8). The FP8 GEMMs run on the CPU (autograd/fp8.h has no GPU path yet).",
      o.gpt ? ", every projection of the tiny GPT" : "", o.images.mlp_steps, o.images.cnn.channels1,
      o.images.cnn.channels2, o.images.cnn.hidden, o.images.cnn_steps, o.images.momentum, o.images.lr,
      o.images.lr * o.images.min_lr_factor, o.images.batch, o.images.train_examples, o.images.test_examples,
      l.embed_dim, l.hidden, l.train_chars, l.steps, l.adam_lr, l.batch, l.context, l.validation_chars,
      o.gpt ? fmt::format(" Tiny GPT ({} layers, width {}, {} heads, context {}), {} steps of Adam (lr {:g}) on the "
                          "same text.",
                          l.gpt_options.layers, l.gpt_options.embed_dim, l.gpt_options.heads, l.gpt_options.block_size,
                          l.gpt_steps, l.gpt_lr)
            : " The tiny GPT runs in the full preset only.",
      o.seed_offsets.size() > 1 ? "s" : "", seeds);
}

// The table's rows of one model: each variant's score, its difference from V5 and its loss gap.
void add_rows(const E8Model& m, const E8Options& o, Table& table) {
  const std::vector<RunResult>* baseline = e8_runs_of(m, "V5");
  const double margin = baseline ? e8_parity_margin(m, o, *baseline) : kNaN;
  for (const std::vector<RunResult>& runs : m.runs) {
    const bool is_baseline = &runs == baseline;
    const PairedDifference d = baseline ? paired_difference(runs, *baseline, e8_metric(m)) : PairedDifference{};
    const bool compared = baseline && !is_baseline;
    const double early = compared ? e8_mean_gap(runs, *baseline, early_loss_gap) : kNaN;
    const double late = compared ? e8_mean_gap(runs, *baseline, late_loss_gap) : kNaN;
    const double baseline_loss = baseline ? e8_mean_score(*baseline, &RunResult::final_loss) : kNaN;
    table.rows.push_back({m.name, legend(runs.front().variant), score_cell(m, e8_mean_score(runs, e8_metric(m))),
                          compared ? difference_cell(m, d) : "-",
                          compared ? (std::fabs(d.mean) <= margin ? "yes" : "**no**") : "-",
                          compared ? fmt::format("{:+.4f}", early) : "-",
                          compared ? fmt::format("{:+.4f} ({:+.2f}%)", late, 100 * late / baseline_loss) : "-"});
  }
}

// A model's plots: its loss gaps to V5 over the steps (first seed), and its score over the evaluations.
void add_plots(const E8Model& m, Section& s) {
  const std::string tag = model_kind(m.name).name;
  const std::vector<RunResult>* baseline = e8_runs_of(m, "V5");
  std::vector<RunResult> first;
  for (const std::vector<RunResult>& runs : m.runs) first.push_back(runs.front());
  if (baseline)
    s.plots.push_back(loss_gap_plot({.name = "e8_loss_gap_" + tag,
                                     .title = "E8 " + m.name + ": training loss minus mixed_bfloat16's (same batch)"},
                                    first, baseline->front()));
  s.plots.push_back(
      m.text ? bpc_plot("e8_validation_bpc_" + tag, "E8 " + m.name + ": validation bits per character", first)
             : accuracy_plot("e8_accuracy_" + tag, "E8 " + m.name + ": test accuracy", first));
}

}  // namespace

Section e8_section(const E8Result& r, Report& report) {
  Section s = kE8Fp8Parity.section();
  s.csv_files = write_run_csvs(report, "E8", "e8", e8_run_groups(r));
  s.setup = setup_text(r);
  Table table{.caption = "Each model's final score (mean over the seeds), its paired difference from mixed_bfloat16 "
                         "(points of accuracy or bits/char; [95% interval] with two seeds or more), whether that is "
                         "within the parity margin, and the training-loss gap to mixed_bfloat16 over the first and the "
                         "last quarter of the run (nats; the last also relative to mixed_bfloat16's final training "
                         "loss).",
              .header = {"model", "variant", "score", "vs mixed_bfloat16", "at parity", "loss gap, first quarter",
                         "loss gap, last quarter"}};
  for (const E8Model& m : r.models) {
    add_rows(m, r.options, table);
    add_plots(m, s);
    s.verdict += (s.verdict.empty() ? "" : " ") + verdict_for(m, r.options);
  }
  s.tables.push_back(table);
  return s;
}

}  // namespace mg::tools::repro
