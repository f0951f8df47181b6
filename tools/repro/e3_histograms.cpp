#include "tools/repro/e3_histograms.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "tools/repro/e3_long_run.h"
#include "tools/repro/run_tables.h"

namespace mg::tools::repro {

constexpr Heading kE3Histograms{
    .id = "E3",
    .title = "Gradient histograms",
    .reference = "Figures 2b and 3",
    .claim = "Gradients of an FP32 run span many binades, and part of them lies below FP16's range: about 5% of the "
             "weight-gradient values of a Mandarin speech model have exponents below -24 (Figure 2b), and in SSD "
             "67% of the activation-gradient values are zero while many non-zero ones lie below 2^-24 (Figure 3)."};

namespace {

using amp::GradientStats;

// A format's ranges on the x axis of log2|x| (bin e holds 2^e <= |x| < 2^(e+1)): below its smallest
// subnormal, subnormal, normal up to its largest value, past it. For FP8 the axis is of the scaled
// values, which is where the format's ranges are fixed.
struct Ranges {
  int lost, normal;
  double overflow;
};
Ranges ranges_of(DType format) {  // from the format's row of MG_DTYPES (core/dtype.h)
  const DTypeInfo d = dtype_info(format);
  return {static_cast<int>(std::log2(d.min_subnormal)), static_cast<int>(std::log2(d.min_normal)), std::log2(d.max)};
}

// "1 Linear, 2 ReLU, ..., 5 Linear": the layers counted, in forward order, and their values per step.
std::string layers_counted(const E3Model& m) {
  std::vector<std::string> names;
  std::int64_t values = 0;
  for (auto layer = m.layers.rbegin(); layer != m.layers.rend(); ++layer) {
    names.push_back(layer->label());
    values += numel(layer->shape);
  }
  return fmt::format("{}: the outputs of {} ({} values a step)", m.model, fmt::join(names, ", "), values);
}

// ---- tables

std::vector<std::string> layer_row(const std::string& kind, const std::string& layer, const GradientStats& s) {
  return {kind,
          layer,
          fmt::format("{}", s.count),
          percent(s.fraction(s.zero), 1),
          percent(s.fraction(s.f16_flushed), 1),
          percent(fraction_below(s, -24), 1),
          percent(s.fraction(s.f16_subnormal), 1),
          percent(s.fraction(s.f16_overflow), 2)};
}

GradientStats merged(const std::vector<GradientStats>& all) {
  GradientStats total;
  for (const GradientStats& s : all) total.merge(s);
  return total;
}

// Over every weight, and over every layer output: the figures the paper quotes.
struct Totals {
  GradientStats weights, activations;
};
Totals totals(const E3Model& m) {
  GradientStats activations;
  for (const E3Layer& layer : m.layers) activations.merge(m.run.histograms.activations[layer.index]);
  return {merged(m.run.histograms.weights), activations};
}

// The exponent bin holding the median non-zero value (NaN when there is none).
double median_exponent(const GradientStats& stats) {
  std::int64_t nonzero = 0;
  for (std::int64_t n : stats.histogram) nonzero += n;
  std::int64_t seen = 0;
  for (int k = 0; k < GradientStats::kBins; ++k)
    if ((seen += stats.histogram[static_cast<std::size_t>(k)]) * 2 >= nonzero && nonzero > 0)
      return GradientStats::kMinExponent + k;
  return std::nan("");
}

// How many exponent bins hold at least 0.1% of the values: the width of the distribution in binades.
int binades_spanned(const GradientStats& stats) {
  int bins = 0;
  for (std::int64_t n : stats.histogram) bins += stats.fraction(n) >= 0.001;
  return bins;
}

}  // namespace

double fraction_below(const GradientStats& stats, int exponent) {
  std::int64_t below = 0;
  for (int k = 0; k < GradientStats::kBins && GradientStats::kMinExponent + k < exponent; ++k)
    below += stats.histogram[static_cast<std::size_t>(k)];
  return stats.fraction(below);
}

E3Options e3_options(Preset preset, Device device, std::uint64_t seed) {
  E3Options o{.images = e1_options(preset, device, seed), .language = e5_options(preset, device, seed)};
  // Quick: the first half of E5's fp32 run; recording every 20th step makes the whole of it cost
  // more than the quick preset's budget allows.
  if (preset == Preset::Quick) o.language.steps = std::min<std::int64_t>(o.language.steps, 300);
  if (preset == Preset::Full) {
    o.record_every = 100;
    o.long_run_steps = 30000;  // 64 epochs of the 60000 images at batch 128
    o.checkpoint_every = 250;
  }
  return o;
}

E3Result run_e3(const E3Options& o, std::shared_ptr<const ImageData> images, std::shared_ptr<const TextData> text,
                const Progress& progress) {
  MG_CHECK(!o.text || text, "repro E3: options.text asks for the LSTM, but no text was given");
  MG_CHECK(o.record_every >= 1 && o.checkpoint_every >= 1 && o.long_run_steps >= 0,
           "repro E3: record_every and "
           "checkpoint_every must be >= 1 and long_run_steps >= 0, got {}, {} and {}",
           o.record_every, o.checkpoint_every, o.long_run_steps);
  E3Result result{.options = o};
  const Variant fp32 = variant("V0");
  auto record = [&](const std::string& model, RunConfig config) {
    config.log_every = o.record_every;  // recording observes: the trajectory is E1's or E5's
    config.eval_every = 0;
    config.record_histograms = true;
    E3Model m{.model = model, .run = run(config)};
    m.layers = in_backward_order(e3_layer_outputs(config), m.run.histograms, model);
    const Totals t = totals(result.models.emplace_back(std::move(m)));
    tell(progress,
         "E3 {} fp32: weight gradients below 2^-24 {}, layer-output gradients below 2^-24 {}, zero {} "
         "({:.1f} s)",
         model, percent(fraction_below(t.weights, -24), 2), percent(fraction_below(t.activations, -24), 2),
         percent(t.activations.fraction(t.activations.zero), 1), result.models.back().run.seconds);
  };
  const E1Options& e1 = o.images;
  record("MLP", e1_run_config(e1, images, mlp_784_256_256_10, e1.mlp_steps, fp32, e1.seed));
  record("CNN", e1_run_config(e1, images, cnn_of(e1.cnn), e1.cnn_steps, fp32, e1.seed));
  if (o.text) record("char LSTM", e5_run_config(o.language, text, fp32, o.language.optimizers.front()));
  if (o.long_run_steps > 0) {
    run_e3_long(o, images, result);
    tell(progress,
         "E3 MLP long run ({} steps): f16 flushes {} of the weight-gradient values at the last checkpoint "
         "({:.1f} s)",
         o.long_run_steps, percent(result.checkpoints.back().all_flushed, 2), result.long_run.seconds);
  }
  return result;
}

namespace {

// What ran, and what counts as an activation gradient.
std::string setup_text(const E3Result& r) {
  const E3Options& o = r.options;
  const E1Options& e1 = o.images;
  std::vector<std::string> counted;
  for (const E3Model& m : r.models) counted.push_back(layers_counted(m));
  return fmt::format(
      "The fp32 (V0) runs of E1 (MLP {} steps, CNN {} steps) and of E5 (the character LSTM, {} steps), run again with "
      "the same configuration and seed, recording every gradient at every {}th step. Activation gradients: those a "
      "framework materialises between layers, what a PyTorch backward hook on each module is handed as its output's "
      "gradient; a layer's input gradient is the previous layer's output gradient, counted once, and the first "
      "layer's input (the images, the tokens) gets none. Counted: {}{}. Nothing inside a layer is counted: not a "
      "convolution's im2col buffer or its GEMM rows (the CNN counts each convolution's output, before its ReLU), "
      "not the LSTM's gates or its c state, which only h leaves the layer through (the LSTM counts its h "
      "sequence). Layers are listed in the order backward meets them, the logits first; a pre-activation's "
      "gradient holds the exact zeros of the ReLU after it. 'Zero in f16 only': non-zero in f32 but |g| <= 2^-25, "
      "so rounding to f16 makes it 0. 'Below 2^-24': non-zero values smaller than f16's smallest subnormal.{}",
      e1.mlp_steps, e1.cnn_steps, o.language.steps, o.record_every, fmt::join(counted, "; "),
      o.text ? "" : " (The LSTM was not run.)",
      r.checkpoints.empty()
          ? ""
          : fmt::format(" Long run: the MLP with E1's recipe (SGD with momentum {:g}, lr {:g} decaying to {:g} by a "
                        "cosine, batch {}, the first {} training images) for {} steps, each weight's gradient "
                        "recorded every {} steps; it ends at {} test accuracy.",
                        e1.momentum, e1.lr, e1.lr * e1.min_lr_factor, e1.batch, e1.train_examples, o.long_run_steps,
                        o.checkpoint_every, percent(r.long_run.final_accuracy)));
}

// One row per model: over all its weights, and over all its layer outputs.
Table summary_table(const E3Result& r) {
  Table summary{.caption = "Over all the weights, and over all the layer outputs, of each model (the paper: ~5% of a "
                           "speech model's weight-gradient values below 2^-24; 67% of SSD's activation-gradient "
                           "values zero):",
                .header = {"model", "weight gradients below 2^-24", "weights zero in f16 only",
                           "activation gradients zero in f32", "activations zero in f16 only",
                           "activations below 2^-24", "activations f16-subnormal"}};
  for (const E3Model& m : r.models) {
    const Totals t = totals(m);
    summary.rows.push_back(
        {m.model, percent(fraction_below(t.weights, -24), 2), percent(t.weights.fraction(t.weights.f16_flushed), 2),
         percent(t.activations.fraction(t.activations.zero), 1),
         percent(t.activations.fraction(t.activations.f16_flushed), 2), percent(fraction_below(t.activations, -24), 2),
         percent(t.activations.fraction(t.activations.f16_subnormal), 2)});
  }
  return summary;
}

// One model's part: its table per layer and its two histogram plots into `s`, its rows of
// e3_histograms.csv into `bins` and of e3_layers.csv into `layers`.
void add_model(const E3Model& m, Section& s, Rows& bins, Rows& layers) {
  const GradientHistograms& h = m.run.histograms;
  Table table{.caption = fmt::format("{}: per layer, over {} recorded steps", m.model, m.run.log.size()),
              .header = {"gradient", "of the weight / of the layer's output", "values", "zero in f32",
                         "zero in f16 only", "below 2^-24", "f16 subnormal", "f16 overflow"}};
  Plot weights{.name = "e3_weights_" + model_kind(m.model).name,
               .title = "E3 " + m.model + " weight gradients (fp32), with f16's ranges",
               .x_label = "log2 |g|",
               .y_label = "fraction of values",
               .kind = PlotKind::histogram,
               .log_y = 10,
               .x_min = GradientStats::kMinExponent,
               .x_max = kGradientAxisEnd,
               .x_ticks = gradient_exponent_ticks(),
               .bands = format_bands(DType::F16)};
  Plot activations = weights;
  activations.name = "e3_activations_" + weights.name.substr(std::string("e3_weights_").size());
  activations.title = "E3 " + m.model + " layer-output gradients (fp32), with f16's ranges";
  auto add = [&](const std::string& kind, const std::string& layer, const GradientStats& stats, Plot& plot) {
    table.rows.push_back(layer_row(kind, layer, stats));
    plot.series.push_back(histogram_series(layer, stats));
    for (int k = 0; k < GradientStats::kBins; ++k)
      bins.push_back({m.model, kind, layer, std::to_string(GradientStats::kMinExponent + k),
                      std::to_string(stats.histogram[static_cast<std::size_t>(k)]), std::to_string(stats.count)});
  };
  for (std::size_t i = 0; i < h.weights.size(); ++i) add("weight", h.weight_names[i], h.weights[i], weights);
  for (const E3Layer& layer : m.layers) add("activation", layer.label(), h.activations[layer.index], activations);
  const Totals t = totals(m);
  for (const auto& row :
       {layer_row("all weights", "-", t.weights), layer_row("all layer outputs", "-", t.activations)}) {
    std::vector<std::string> cells{m.model};
    cells.insert(cells.end(), row.begin(), row.end());
    layers.push_back(cells);
  }
  s.tables.push_back(table);
  s.plots.push_back(weights);
  s.plots.push_back(activations);
}

// The verdict on the histograms (the width of the distributions, Figure 2b's and Figure 3's tails,
// the exact zeros), with the long run's sentence (may be empty) after Figure 2b's.
std::string verdict_text(const E3Result& r, const std::string& long_run) {
  int narrowest = GradientStats::kBins;
  // Per model: median exponents and widths, and the figures the verdict quotes.
  std::vector<std::string> shapes, weight_tails, activation_tails, activation_zeros, weight_tail_models,
      activation_tail_models;
  for (const E3Model& m : r.models) {
    const Totals t = totals(m);
    const double weight_tail = fraction_below(t.weights, -24), activation_tail = fraction_below(t.activations, -24);
    shapes.push_back(fmt::format("{}: weight gradients around 2^{} over {} binades, layer-output gradients around 2^{} "
                                 "over {}",
                                 m.model, median_exponent(t.weights), binades_spanned(t.weights),
                                 median_exponent(t.activations), binades_spanned(t.activations)));
    weight_tails.push_back(fmt::format("{} {}", m.model, percent(weight_tail, 2)));
    activation_tails.push_back(fmt::format("{} {}", m.model, percent(activation_tail, 2)));
    activation_zeros.push_back(fmt::format("{} {}", m.model, percent(t.activations.fraction(t.activations.zero), 1)));
    // Within a factor 2 of the speech model's ~5%; and a tail f16 would lose that is worth scaling for.
    if (weight_tail >= 0.025) weight_tail_models.push_back(m.model);
    if (activation_tail >= 0.01) activation_tail_models.push_back(m.model);
    narrowest = std::min({narrowest, binades_spanned(t.weights), binades_spanned(t.activations)});
  }
  const bool spread = narrowest >= 15;
  auto models_or_none = [](const std::vector<std::string>& models) {
    return models.empty() ? std::string("none") : fmt::format("{}", fmt::join(models, ", "));
  };
  return fmt::format(
      "Medians and widths (binades holding at least 0.1% of the values): {}. Every distribution spans {} binades or "
      "more: {}. Figure 2b, weight-gradient values below 2^-24: {} (the speech model: ~5%); within a factor 2 of it: "
      "{}, so **{}**.{} Figure 3, layer-output gradient values below 2^-24: {}; 1% or more (what unscaled f16 "
      "loses; E4 and E5 measure the cost): {}, so **{}**. Exact zeros in f32: {} of the layer-output gradient values "
      "(SSD: 67%): in the MLP and the CNN they are where ReLU or max pooling passed no gradient, nothing f16 can "
      "lose.",
      fmt::join(shapes, "; "), narrowest, spread ? "**reproduced** (the paper's 'many binades')" : "**not reproduced**",
      fmt::join(weight_tails, ", "), models_or_none(weight_tail_models),
      weight_tail_models.empty() ? "not reproduced in size" : "reproduced", long_run, fmt::join(activation_tails, ", "),
      models_or_none(activation_tail_models),
      activation_tail_models.empty() ? "not reproduced at this scale" : "reproduced",
      fmt::join(activation_zeros, ", "));
}

}  // namespace

Section e3_section(const E3Result& r, Report& report) {
  Section s = kE3Histograms.section();
  s.setup = setup_text(r);
  s.tables.push_back(summary_table(r));
  Rows bins, layers;
  for (const E3Model& m : r.models) add_model(m, s, bins, layers);
  s.csv_files = {report.write_csv("e3_histograms.csv",
                                  {"model", "gradient", "layer", "exponent", "values_in_bin", "values"}, bins),
                 report.write_csv("e3_layers.csv",
                                  {"model", "gradient", "layer", "values", "zero", "zero_in_f16_only", "below_2^-24",
                                   "f16_subnormal", "f16_overflow"},
                                  layers)};
  // The long run adds its table, plot and CSV after the histograms', and a sentence to the verdict.
  const std::string long_run = r.checkpoints.empty() ? "" : fmt::format(" {}", e3_long_run_part(r, report, s));
  s.verdict = verdict_text(r, long_run);
  return s;
}

std::vector<Tick> gradient_exponent_ticks() {
  std::vector<Tick> ticks;
  for (int e = GradientStats::kMinExponent; e <= GradientStats::kMaxExponent; e += 8)
    ticks.push_back(Tick{.at = static_cast<double>(e), .label = std::to_string(e)});
  ticks.front().label = "≤ " + ticks.front().label;
  ticks.back().label = "≥ " + ticks.back().label;
  return ticks;
}

Series histogram_series(const std::string& name, const GradientStats& stats) {
  Series series{.name = name};
  for (int k = 0; k < GradientStats::kBins; ++k) {
    series.x.push_back(GradientStats::kMinExponent + k + 0.5);  // histeps draws a bin around its centre
    series.y.push_back(stats.fraction(stats.histogram[static_cast<std::size_t>(k)]));
  }
  return series;
}

std::vector<Band> format_bands(DType format) {
  const auto [lost, normal, overflow] = ranges_of(format);
  const std::string name(dtype_name(format));
  std::vector<Band> all{Band{.from = GradientStats::kMinExponent,
                             .to = static_cast<double>(std::max(lost, GradientStats::kMinExponent)),
                             .label = fmt::format("lost in {} (< 2^{})", name, lost),
                             .color = "#d62728"},
                        Band{.from = static_cast<double>(std::max(lost, GradientStats::kMinExponent)),
                             .to = static_cast<double>(std::max(normal, GradientStats::kMinExponent)),
                             .label = name + " subnormal",
                             .color = "#ff7f0e"},
                        Band{.from = static_cast<double>(std::max(normal, GradientStats::kMinExponent)),
                             .to = std::min(overflow, static_cast<double>(kGradientAxisEnd)),
                             .label = name + " normal",
                             .color = "#2ca02c"},
                        Band{.from = std::min(overflow, static_cast<double>(kGradientAxisEnd)),
                             .to = kGradientAxisEnd,
                             .label = "inf",
                             .color = "#7f7f7f"}};
  std::erase_if(all, [](const Band& b) { return b.to <= b.from; });  // bf16's ends lie past the axis
  return all;
}

}  // namespace mg::tools::repro
