// E9's section of the report: the tables of effects, the sweep and loss-gap plots, the CSVs, and the
// verdicts, from an E9Result (tools/repro/e9_granularity.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "tools/repro/e9_granularity.h"
#include "tools/repro/run_tables.h"

namespace mg::tools::repro {

constexpr Heading kE9Granularity{
    .id = "E9",
    .title = "Scaling granularity",
    .reference = "DeepSeek-V3 §3.3.2; OCP MX v1.0 §6.3",
    .claim = "Scaling a whole tensor to FP8's range by its largest value \"makes low-precision training highly "
             "sensitive to activation outliers\": the outliers set the scale and the other values lose their "
             "precision or flush to zero. DeepSeek-V3 scales per 1x128 tile of activations (and 128x128 block of "
             "weights) instead; the OCP MX formats per 32 values, with a power-of-two scale whose exponent the spec "
             "sets to floor(log2 amax) - emax, which saturates the top of a block's largest binade (Transformer "
             "Engine rounds the exponent up instead)."};

namespace {

// "0.120% / 0.000% / 3.1e-02": flushed, saturated, and the mean error of a value, for one way of scaling.
std::string effect_cell(const Fp8Effect& e) {
  return fmt::format("{} / {} / {:.1e}", percent(e.flushed_share(), 3), percent(e.saturated_share(), 3),
                     e.mean_element_error());
}

Table effects_table(const std::string& caption, const std::vector<E9Measure>& measures, const std::string& ratio) {
  Table table{.caption = caption, .header = {"tensor", ratio}};
  for (const E9Scaling& s : e9_scalings()) table.header.push_back(s.name + " (" + s.variants + ")");
  for (const E9Measure& m : measures) {
    std::vector<std::string> row{m.source, number(m.outlier_factor, 3)};
    for (const Fp8Effect& e : m.effects) row.push_back(effect_cell(e));
    table.rows.push_back(row);
  }
  return table;
}

// The shares of the synthetic sweep against the outlier factor, one curve per way of scaling.
Plot sweep_plot(const E9Result& r, const std::string& name, const std::string& what,
                const std::function<double(const Fp8Effect&)>& value) {
  Plot plot{.name = name,
            .title = "E9 synthetic activations (" + percent(r.options.outlier_share, 0) +
                     " of channels x factor): " + what,
            .x_label = "outlier factor",
            .y_label = what,
            .kind = PlotKind::points,
            .log_y = 10};
  for (const E9Measure& m : r.synthetic)
    plot.x_ticks.push_back({.at = std::log10(m.outlier_factor), .label = fmt::format("{:g}", m.outlier_factor)});
  for (std::size_t i = 0; i < e9_scalings().size(); ++i) {
    Series series{.name = e9_scalings()[i].name, .style = e9_scalings()[i].style};
    for (const E9Measure& m : r.synthetic) {
      series.x.push_back(std::log10(m.outlier_factor));
      // A share of exactly 0 has no place on a log axis: a floor below one value in the tensor stands in.
      series.y.push_back(std::max(value(m.effects[i]), 1e-7));
    }
    plot.series.push_back(series);
  }
  return plot;
}

const E9Measure* headline(const E9Result& r) {
  for (const E9Measure& m : r.synthetic)
    if (m.outlier_factor == r.options.headline_factor) return &m;
  return r.synthetic.empty() ? nullptr : &r.synthetic.back();
}

// Finer scaling does better than one scale per tensor when a typical value loses less (by a tenth at
// least) and no more values flush.
bool better_than_per_tensor(const E9Measure& m, std::size_t scaling) {
  const Fp8Effect &tensor = m.effects[kE9PerTensor], &e = m.effects[scaling];
  return e.mean_element_error() < 0.9 * tensor.mean_element_error() && e.flushed_share() <= tensor.flushed_share();
}

// "per tensor 0.050% / 0.000% / 2.4e-02, 1x128 tiles ..., MX (floor) ..., MX (round up) ...".
std::string effects_of(const E9Measure& m) {
  return fmt::format("per tensor {}, 1x128 tiles {}, MX (floor) {}, MX (round up) {}",
                     effect_cell(m.effects[kE9PerTensor]), effect_cell(m.effects[kE9Tiles]),
                     effect_cell(m.effects[kE9MxFloor]), effect_cell(m.effects[kE9MxRoundUp]));
}

// The synthetic sweep's verdict: from which outlier factor on finer scaling does better, the headline
// factor's numbers, and MX's two rules.
std::string synthetic_verdict(const E9Result& r) {
  const E9Measure* h = headline(r);
  if (!h) return "";
  const E9Measure* first = nullptr;  // the smallest factor where a finer scaling does better
  for (const E9Measure& m : r.synthetic)
    if (!first && (better_than_per_tensor(m, kE9Tiles) || better_than_per_tensor(m, kE9MxFloor))) first = &m;
  std::string text = fmt::format(
      "Synthetic activations (E4M3; of the non-zero values flushed / saturated / mean error of a value), x{:g}: {}. ",
      h->outlier_factor, effects_of(*h));
  if (!first)
    text += fmt::format("**Not reproduced** up to outliers x{:g}: no finer scaling lost markedly less than one scale "
                        "per tensor. ",
                        r.synthetic.back().outlier_factor);
  else if (first->outlier_factor <= h->outlier_factor)
    text += "**Reproduced:** finer scaling loses less of the values than one scale per tensor. ";
  else
    text += fmt::format("**Reproduced from outliers x{:g} on, not at x{:g}:** E4M3's 18 binades hold outliers "
                        "{:.1f} binades above the rest with little loss; at x{:g}: {}. ",
                        first->outlier_factor, h->outlier_factor, std::log2(h->outlier_factor), first->outlier_factor,
                        effects_of(*first));
  const E9Measure& last = r.synthetic.back();
  if (&last != first && last.outlier_factor > h->outlier_factor)
    text += fmt::format("At x{:g}: {}. ", last.outlier_factor, effects_of(last));
  const Fp8Effect &floor = h->effects[kE9MxFloor], &up = h->effects[kE9MxRoundUp];
  return text + fmt::format("MX's floor rule saturated {} of the values (the top of each block's largest binade), the "
                            "rounded-up exponent none, at the price of {} flushed instead of {}. ",
                            percent(floor.saturated_share(), 2), percent(up.flushed_share(), 3),
                            percent(floor.flushed_share(), 3));
}

std::string real_verdict(const E9Result& r) {
  std::string text;
  for (const E9Measure& m : r.real)
    if (m.source.ends_with("all layers"))
      text += fmt::format("{}'s real activations: channels at most {:.3g}x the median channel's amax; per tensor {}, "
                          "MX (floor) {}. ",
                          m.source.substr(0, m.source.find(',')), m.outlier_factor,
                          effect_cell(m.effects[kE9PerTensor]), effect_cell(m.effects[kE9MxFloor]));
  return text;
}

// Training: each model's late loss gaps, and what MX's rule costs (V11 floor against V15 rounded up).
std::string gap_verdict(const E9Result& r) {
  std::string text;
  for (const E8Model& m : r.gaps) {
    const RunResult& baseline = m.runs.front().front();
    text += m.name + ", training-loss gap to mixed_bfloat16 over the last quarter (nats):";
    for (std::size_t i = 1; i < m.runs.size(); ++i)
      text += fmt::format(" {} {:+.4f}{}", m.runs[i].front().variant.name, late_loss_gap(m.runs[i].front(), baseline),
                          i + 1 == m.runs.size() ? ". " : ",");
    const std::vector<RunResult>*floor = e8_runs_of(m, "V11"), *up = e8_runs_of(m, "V15");
    if (!floor || !up) continue;
    const double floor_gap = late_loss_gap(floor->front(), baseline), up_gap = late_loss_gap(up->front(), baseline);
    if (!(floor_gap <= up_gap + 0.01))
      text += fmt::format("**MX's floor rule costs the {} in training:** {:+.4f} against {:+.4f} with the exponent "
                          "rounded up. ",
                          m.name, floor_gap, up_gap);
  }
  return text;
}

std::string setup_text(const E9Result& r) {
  const E9Options& o = r.options;
  const E1Options& images = o.training.images;
  const E5Options& language = o.training.language;
  return fmt::format(
      "Every tensor is quantised to E4M3 as the recipes quantise a forward GEMM's input (along its rows of channels: "
      "the reduction), by kernels/fp8.h itself: per tensor (scale 448 / amax; fp8_delayed reaches that scale when the "
      "amax is steady), per 1x128 tile (fp8_block), per 32 values with the MX spec's power-of-two scale (mxfp8) and "
      "with Transformer Engine's rounded-up exponent. Real activations: the input of every nn::Linear in the logged "
      "steps among the last {} of a mixed_bfloat16 run of E8's MLP ({} steps, batch {}){}. Synthetic: {} rows x {} "
      "channels of standard normal values, {} of the channels multiplied by each factor. Loss gaps: E8's MLP and "
      "char LSTM in each recipe and in V15 (mxfp8 with the exponent rounded up); {}.",
      o.watched_steps, images.mlp_steps, images.batch,
      o.gpt ? fmt::format(", and of the tiny GPT ({} layers, width {}, {} steps)", language.gpt_options.layers,
                          language.gpt_options.embed_dim, language.gpt_steps)
            : "",
      o.synthetic_rows, o.synthetic_channels, percent(o.outlier_share, 0),
      r.from_e8.empty() ? "every run trained here" : "E8's runs where it had them, the rest trained here");
}

Table gap_table(const E9Result& r) {
  Table table{.caption = "What each way of scaling costs in training, against mixed_bfloat16 (same seed and batches).",
              .header = {"model", "variant", "score", "vs mixed_bfloat16", "loss gap, first quarter",
                         "loss gap, last quarter", "run"}};
  for (const E8Model& m : r.gaps) {
    const RunResult& baseline = m.runs.front().front();
    for (const std::vector<RunResult>& runs : m.runs) {
      const RunResult& run = runs.front();
      const bool compared = &runs != &m.runs.front();
      const double difference = m.text ? run.final_bpc - baseline.final_bpc
                                       : 100 * (run.final_accuracy - baseline.final_accuracy);
      table.rows.push_back(
          {m.name, legend(run.variant), m.text ? number(run.final_bpc, 4) : percent(run.final_accuracy),
           compared ? fmt::format(fmt::runtime(m.text ? "{:+.4f} bits/char" : "{:+.2f} points"), difference) : "-",
           compared ? fmt::format("{:+.4f}", early_loss_gap(run, baseline)) : "-",
           compared ? fmt::format("{:+.4f}", late_loss_gap(run, baseline)) : "-",
           e9_from_e8(r, m.name, run.variant.id) ? "E8's" : "here"});
    }
  }
  return table;
}

std::vector<std::string> write_csvs(const E9Result& r, Report& report) {
  Rows rows;
  for (const auto& [kind, measures] : {std::pair{"synthetic", &r.synthetic}, std::pair{"real", &r.real}})
    for (const E9Measure& m : *measures)
      for (std::size_t i = 0; i < m.effects.size(); ++i) {
        const Fp8Effect& e = m.effects[i];
        rows.push_back({kind, m.source, fmt::format("{:.6g}", m.outlier_factor), e9_scalings()[i].name,
                        std::to_string(e.values), std::to_string(e.nonzero), fmt::format("{:.6g}", e.flushed_share()),
                        fmt::format("{:.6g}", e.saturated_share()), fmt::format("{:.6g}", e.subnormal_share()),
                        fmt::format("{:.6g}", e.mean_element_error()), fmt::format("{:.6g}", e.relative_error())});
      }
  std::vector<std::string> files{
      report.write_csv("e9_activations.csv",
                       {"kind", "tensor", "outlier_factor", "scaling", "values", "nonzero", "flushed", "saturated",
                        "subnormal", "mean_element_error", "normwise_error"},
                       rows)};
  // The runs trained here: the measured one, and each gap run E8 did not have.
  std::vector<RunGroup> groups;
  if (!r.measured.log.empty()) groups.push_back({.series = "MLP, activations measured", .runs = {&r.measured}});
  for (const E8Model& m : r.gaps) {
    RunGroup group{.series = m.name, .runs = {}};
    for (const std::vector<RunResult>& runs : m.runs)
      if (!e9_from_e8(r, m.name, runs.front().variant.id) && !(m.name == "MLP" && runs.front().variant.id == "V5"))
        group.runs.push_back(&runs.front());
    if (!group.runs.empty()) groups.push_back(group);
  }
  if (!groups.empty())
    for (const std::string& name : write_run_csvs(report, "E9", "e9", groups)) files.push_back(name);
  return files;
}

}  // namespace

Section e9_section(const E9Result& r, Report& report) {
  Section s = kE9Granularity.section();
  s.setup = setup_text(r);
  const std::string cells =
      "Each cell: of the non-zero values, the share flushed to zero / the share saturated (clamped "
      "to 448) / the mean of |x - q| / |x| (1 for a value flushed). The CSV has the normwise "
      "||x - q|| / ||x|| too, which the largest values dominate.";
  s.tables.push_back(effects_table("Synthetic activations. " + cells, r.synthetic, "outlier factor"));
  if (!r.real.empty())
    s.tables.push_back(effects_table("Real activations (the inputs of the Linear layers, merged over the steps "
                                     "watched). 'outliers': the largest channel amax over the median channel amax. " +
                                         cells,
                                     r.real, "outliers"));
  if (!r.gaps.empty()) s.tables.push_back(gap_table(r));
  s.csv_files = write_csvs(r, report);
  s.plots.push_back(sweep_plot(r, "e9_flushed", "share of non-zero values flushed to zero (none: drawn at 1e-7)",
                               [](const Fp8Effect& e) { return e.flushed_share(); }));
  s.plots.push_back(sweep_plot(r, "e9_error", "mean |x - q| / |x| of the non-zero values",
                               [](const Fp8Effect& e) { return e.mean_element_error(); }));
  for (const E8Model& m : r.gaps) {
    std::vector<RunResult> first;
    for (const std::vector<RunResult>& runs : m.runs) first.push_back(runs.front());
    s.plots.push_back(loss_gap_plot({.name = m.name == "MLP" ? "e9_loss_gap_mlp" : "e9_loss_gap_lstm",
                                     .title = "E9 " + m.name + ": training loss minus mixed_bfloat16's (same batch)"},
                                    first, first.front()));
  }
  s.verdict = synthetic_verdict(r) + real_verdict(r) + gap_verdict(r);
  return s;
}

}  // namespace mg::tools::repro
