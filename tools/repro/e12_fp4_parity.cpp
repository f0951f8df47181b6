#include "tools/repro/e12_fp4_parity.h"

#include <fmt/format.h>

#include <cmath>

#include "tools/repro/run_tables.h"

namespace mg::tools::repro {

constexpr Heading kE12Fp4Parity{
    .id = "E12",
    .title = "FP4 parity",
    .reference = "NVIDIA 2025, Pretraining Large Language Models with NVFP4",
    .claim = "A 12B-parameter model pretrained on 10T tokens with NVFP4 GEMMs (E2M1 values, an E4M3 scale per 16 and "
             "an f32 scale per tensor, 16x16 weight blocks, a random Hadamard transform on the weight gradient, "
             "stochastically rounded gradients, a few last layers in bf16) matched its FP8 twin downstream "
             "(MMLU-Pro 62.58% against 62.62%), with a training loss within 1.5% of FP8's; MXFP4 (a power-of-two "
             "scale per 32) needed 36% more tokens to reach NVFP4's loss."};

namespace {

// "86.27%" or "2.143"; a difference in points or bits/char.
std::string score_cell(const E8Model& m, double value) { return m.text ? number(value, 4) : percent(value); }
std::string difference_cell(const E8Model& m, double d) {
  return m.text ? fmt::format("{:+.4f}", d) : fmt::format("{:+.2f}", 100 * d);
}

// One model's verdict: does NVFP4 track FP8, and does it beat MXFP4?
std::string verdict_for(const E8Model& m, const E8Options& o) {
  const std::vector<RunResult>*base = e8_runs_of(m, "V5"), *fp8 = e8_runs_of(m, "V9");
  const std::vector<RunResult>*nv = e8_runs_of(m, "V16"), *mx = e8_runs_of(m, "V17");
  if (!base || !fp8 || !nv || !mx) return fmt::format("{}: V5, V9, V16 and V17 are needed for a verdict.", m.name);
  const double margin = e8_parity_margin(m, o, *base);
  const double d_fp8 = paired_difference(*fp8, *base, e8_metric(m)).mean;
  const double d_nv = paired_difference(*nv, *base, e8_metric(m)).mean;
  const double d_mx = paired_difference(*mx, *base, e8_metric(m)).mean;
  const double g_fp8 = e8_mean_gap(*fp8, *base, late_loss_gap), g_nv = e8_mean_gap(*nv, *base, late_loss_gap),
               g_mx = e8_mean_gap(*mx, *base, late_loss_gap);
  const bool tracks = std::fabs(d_nv - d_fp8) <= margin;
  const bool beats = g_nv < g_mx;
  std::string text = fmt::format(
      "{}: against mixed_bfloat16 ({}), fp8_current {}, nvfp4 {}, mxfp4 {} ({}; margin {}); training-loss gap over "
      "the last quarter of the run: fp8_current {:+.4f}, nvfp4 {:+.4f}, mxfp4 {:+.4f} nats. ",
      m.name, score_cell(m, e8_mean_score(*base, e8_metric(m))), difference_cell(m, d_fp8), difference_cell(m, d_nv),
      difference_cell(m, d_mx), m.text ? "bits/char" : "points", m.text ? number(margin, 3) : number(100 * margin, 3),
      g_fp8, g_nv, g_mx);
  text += tracks && beats ? "**Reproduced:** NVFP4 tracks FP8 and its loss stays below MXFP4's."
          : tracks        ? "**NVFP4 tracks FP8; it did not beat MXFP4 here** (MXFP4's loss gap is not larger)."
          : beats         ? "**Not reproduced in full:** NVFP4's loss stays below MXFP4's, but its score is "
                            "further from FP8's than the margin."
                          : "**Not reproduced:** NVFP4 neither tracks FP8 nor beats MXFP4 here.";
  return text;
}

std::string setup_text(const E12Result& r) {
  const E8Options& o = r.options;
  return fmt::format(
      "E8's models, data and optimizers (MLP {} steps, CNN {} steps, batch {}, the first {} Fashion-MNIST training "
      "images, accuracy on the first {} test images{}), in V5 mixed_bfloat16 (the baseline), V9 fp8_current, V16 "
      "nvfp4 and V17 mxfp4. The FP4 recipes keep the model's last Linear (the head) in bf16, so FP4 covers the MLP's "
      "first two layers, the CNN's first fully connected layer{}; not the char LSTM, whose only Linear is its head. "
      "The FP4 GEMMs decode into bf16 exactly and run on the CPU's bf16 microkernel, the numbers an FP4 Tensor Core "
      "computes. Seed {}; the variants of a seed share initial weights and batches.",
      o.images.mlp_steps, o.images.cnn_steps, o.images.batch, o.images.train_examples, o.images.test_examples,
      o.gpt ? fmt::format("; tiny GPT {} steps of Adam on the King James Bible", o.language.gpt_steps) : "",
      o.gpt ? " and every projection of the tiny GPT" : "", o.seed);
}

}  // namespace

E12Options e12_options(Preset preset, Device device, std::uint64_t seed) {
  E12Options o = preset_options<E12Options>(preset, {}, device, seed);
  const E12Options defaults;
  o.training = e8_options(preset, device, seed);
  o.training.lstm = defaults.training.lstm;
  o.training.variant_ids = defaults.training.variant_ids;
  return o;
}

E12Result run_e12(const E12Options& o, std::shared_ptr<const ImageData> images, std::shared_ptr<const TextData> text,
                  const E8Result* e8, const Progress& progress) {
  return run_e8(o.training, std::move(images), std::move(text), progress, e8, "E12");
}

Section e12_section(const E12Result& r, Report& report) {
  Section s = kE12Fp4Parity.section();
  s.csv_files = write_run_csvs(report, "E12", "e12", e8_run_groups(r));
  s.setup = setup_text(r);
  Table table{.caption = "Each model's final score (mean over the seeds), its paired difference from mixed_bfloat16 "
                         "(points of accuracy or bits/char), and the training-loss gap to mixed_bfloat16 over the last "
                         "quarter of the run (nats).",
              .header = {"model", "variant", "score", "vs mixed_bfloat16", "loss gap, last quarter"}};
  for (const E8Model& m : r.models) {
    const std::vector<RunResult>* base = e8_runs_of(m, "V5");
    std::vector<RunResult> first;
    for (const std::vector<RunResult>& runs : m.runs) {
      first.push_back(runs.front());
      const bool compared = base && &runs != base;
      table.rows.push_back({m.name, legend(runs.front().variant), score_cell(m, e8_mean_score(runs, e8_metric(m))),
                            compared ? difference_cell(m, paired_difference(runs, *base, e8_metric(m)).mean) : "-",
                            compared ? fmt::format("{:+.4f}", e8_mean_gap(runs, *base, late_loss_gap)) : "-"});
    }
    const std::string tag = model_kind(m.name).name;
    if (base)
      s.plots.push_back(loss_gap_plot({.name = fmt::format("e12_loss_gap_{}", tag),
                                       .title = fmt::format("E12 {}: training loss minus mixed_bfloat16's", m.name)},
                                      first, base->front()));
    s.verdict += fmt::format("{}{}", s.verdict.empty() ? "" : " ", verdict_for(m, r.options));
  }
  s.tables.push_back(table);
  return s;
}

}  // namespace mg::tools::repro
