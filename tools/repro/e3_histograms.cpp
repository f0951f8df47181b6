#include "tools/repro/e3_histograms.h"

#include <fmt/format.h>

#include <cmath>

#include "tools/repro/run_tables.h"

namespace mg::tools::repro {

namespace {

using amp::GradientStats;

// The x axis of log2|g| ends a bin past the last one (which holds 2^16 and up), so that the "inf"
// band is wide enough for its label.
constexpr int kAxisEnd = GradientStats::kMaxExponent + 2;

// f16's ranges on the x axis of log2|g| (bin e holds 2^e <= |g| < 2^(e+1)).
std::vector<Band> f16_bands() {
  return {Band{.from = GradientStats::kMinExponent, .to = -24, .label = "lost in f16 (< 2^-24)", .color = "#d62728"},
          Band{.from = -24, .to = -14, .label = "f16 subnormal", .color = "#ff7f0e"},
          Band{.from = -14, .to = 16, .label = "f16 normal", .color = "#2ca02c"},
          Band{.from = 16, .to = kAxisEnd, .label = "inf", .color = "#7f7f7f"}};
}

// Every 8 binades, so that -24 (f16's smallest subnormal) and 16 (its overflow) get a tick; the
// end bins take in everything beyond them, and their labels say so.
std::vector<Tick> exponent_ticks() {
  std::vector<Tick> ticks;
  for (int e = GradientStats::kMinExponent; e <= GradientStats::kMaxExponent; e += 8)
    ticks.push_back(Tick{.at = static_cast<double>(e), .label = std::to_string(e)});
  ticks.front().label = "≤ " + ticks.front().label;
  ticks.back().label = "≥ " + ticks.back().label;
  return ticks;
}

// The histogram as a curve: x = the bin's lower exponent, y = its share of all values (zeros
// included in the denominator, so the curve sums to the non-zero fraction).
Series histogram_series(const std::string& name, const GradientStats& stats) {
  Series series{.name = name};
  for (int k = 0; k < GradientStats::kBins; ++k) {
    series.x.push_back(GradientStats::kMinExponent + k + 0.5);  // histeps draws a bin around its centre
    series.y.push_back(stats.fraction(stats.histogram[static_cast<std::size_t>(k)]));
  }
  return series;
}

// The same gradient values seen twice: an op that passes its output gradient on unchanged (a bias
// add hands it to its matmul) gives two backward entries with identical statistics.
bool same_values(const GradientStats& a, const GradientStats& b) {
  return a.count == b.count && a.zero == b.zero && a.nonfinite == b.nonfinite && a.histogram == b.histogram;
}

// Which activation entries are layer outputs to count: not pure data movement (a reshape's output
// gradient is its input's, again), and not a repeat of the entry backward visited just before.
std::vector<bool> counted_activations(const GradientHistograms& h) {
  std::vector<bool> counted(h.activations.size(), true);
  for (std::size_t i = 0; i < h.activations.size(); ++i) {
    for (Op op : {Op::Reshape, Op::Permute, Op::Slice})  // (transpose records a permute)
      if (h.activation_names[i].rfind(op_name(op), 0) == 0) counted[i] = false;
    if (i > 0 && same_values(h.activations[i], h.activations[i - 1])) counted[i] = false;
  }
  return counted;
}

std::vector<std::string> layer_row(const std::string& kind, const std::string& layer, const GradientStats& s) {
  return {kind, layer, fmt::format("{}", s.count), percent(s.fraction(s.zero), 1), percent(s.fraction(s.f16_flushed), 1),
          percent(fraction_below(s, -24), 1), percent(s.fraction(s.f16_subnormal), 1),
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
Totals totals(const RunResult& run) {
  GradientStats activations;
  const GradientHistograms& h = run.histograms;
  const std::vector<bool> counted = counted_activations(h);
  for (std::size_t i = 0; i < h.activations.size(); ++i)
    if (counted[i]) activations.merge(h.activations[i]);
  return {merged(h.weights), activations};
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
  E3Options o{.images = e1_options(preset), .language = e5_options(preset, device)};
  o.images.seed = o.language.seed = seed;
  o.images.device = device;
  if (preset == Preset::Full) o.record_every = 100;
  return o;
}

E3Result run_e3(const E3Options& o, std::shared_ptr<const ImageData> images, std::shared_ptr<const TextData> text,
                const std::function<void(const std::string&)>& progress) {
  MG_CHECK(!o.text || text, "repro E3: options.text asks for the LSTM, but no text was given");
  MG_CHECK(o.record_every >= 1, "repro E3: record_every must be >= 1, got {}", o.record_every);
  E3Result result{.options = o};
  const Variant fp32 = variant("V0");
  auto record = [&](const std::string& model, RunConfig config) {
    config.log_every = o.record_every;  // recording observes: the trajectory is E1's or E5's
    config.eval_every = 0;
    config.record_histograms = true;
    result.models.push_back(E3Model{.model = model, .run = run(config)});
    if (progress) {
      const Totals t = totals(result.models.back().run);
      progress(fmt::format("E3 {} fp32: weight gradients below 2^-24 {}, activation gradients zero {} ({:.1f} s)", model,
                           percent(fraction_below(t.weights, -24), 2), percent(t.activations.fraction(t.activations.zero), 1),
                           result.models.back().run.seconds));
    }
  };
  const E1Options& e1 = o.images;
  record("MLP", e1_run_config(e1, images, mlp_784_256_256_10, e1.mlp_steps, fp32, e1.seed));
  record("CNN", e1_run_config(e1, images, cnn_of(e1.cnn), e1.cnn_steps, fp32, e1.seed));
  if (o.text) record("char LSTM", e5_run_config(o.language, text, fp32));
  return result;
}

Section e3_section(const E3Result& r, Report& report) {
  const E3Options& o = r.options;
  Rows bins, layers;
  Section s = e3_experiment().section();
  const E1Options& e1 = o.images;
  const E5Options& e5 = o.language;
  s.setup = fmt::format("The fp32 (V0) runs of E1 (MLP {} steps, CNN {} steps) and of E5 (the character LSTM, {} steps), "
                        "run again with the same configuration and seed, recording every gradient at every {}th step. "
                        "Activation gradients: each op's output gradient in the backward pass, counted once: reshapes, "
                        "casts and ops that pass their output gradient on unchanged (a bias add to its matmul) are left "
                        "out, their values being another op's; the others are numbered in the order backward meets "
                        "them, #1 nearest the loss. The gradient of a ReLU's input (the op before it, usually a bias "
                        "add) holds ReLU's exact zeros. 'Zero in f16 only': non-zero in f32 but "
                        "|g| <= 2^-25, so rounding to f16 makes it 0. 'Below 2^-24': non-zero values smaller than f16's "
                        "smallest subnormal.{}", e1.mlp_steps, e1.cnn_steps, e5.steps, o.record_every,
                        o.text ? "" : " (The LSTM was not run.)");
  Table summary{.caption = "Over all the weights, and over all the layer outputs, of each model (the paper: ~5% of a "
                           "speech model's weight-gradient values below 2^-24; 67% of SSD's activation-gradient "
                           "values zero):",
                .header = {"model", "weight gradients below 2^-24", "weights zero in f16 only",
                           "activation gradients zero in f32", "activations zero in f16 only",
                           "activations below 2^-24", "activations f16-subnormal"}};
  double worst_weight_tail = 0, worst_activation_tail = 0, most_activation_zeros = 0;
  int narrowest = GradientStats::kBins;
  std::string shapes;  // per model: median exponents and widths
  for (const E3Model& m : r.models) {
    const GradientHistograms& h = m.run.histograms;
    Table table{.caption = fmt::format("{}: per layer, over {} recorded steps", m.model, m.run.log.size()),
                .header = {"gradient", "of the weight / of the op's output", "values", "zero in f32",
                           "zero in f16 only", "below 2^-24", "f16 subnormal", "f16 overflow"}};
    Plot weights{.name = "e3_weights_" + std::string(m.model == "char LSTM" ? "lstm" : m.model == "MLP" ? "mlp" : "cnn"),
                 .title = "E3 " + m.model + " weight gradients (fp32), with f16's ranges", .x_label = "log2 |g|",
                 .y_label = "fraction of values", .kind = PlotKind::histogram, .log_y = 10,
                 .x_min = GradientStats::kMinExponent, .x_max = kAxisEnd, .x_ticks = exponent_ticks(),
                 .bands = f16_bands()};
    Plot activations = weights;
    activations.name = "e3_activations_" + weights.name.substr(std::string("e3_weights_").size());
    activations.title = "E3 " + m.model + " activation gradients (fp32), with f16's ranges";
    for (std::size_t i = 0; i < h.weights.size(); ++i) {
      table.rows.push_back(layer_row("weight", h.weight_names[i], h.weights[i]));
      weights.series.push_back(histogram_series(h.weight_names[i], h.weights[i]));
    }
    const std::vector<bool> counted = counted_activations(h);
    int number = 0;  // in backward order: an MLP's layers share their op names and shapes
    for (std::size_t i = 0; i < h.activations.size(); ++i) {
      if (!counted[i]) continue;
      const std::string name = fmt::format("#{} {}", ++number, h.activation_names[i]);
      table.rows.push_back(layer_row("activation", name, h.activations[i]));
      activations.series.push_back(histogram_series(name, h.activations[i]));
    }
    for (std::size_t i = 0; i < h.weights.size(); ++i)
      for (int k = 0; k < GradientStats::kBins; ++k)
        bins.push_back({m.model, "weight", h.weight_names[i], std::to_string(GradientStats::kMinExponent + k),
                        std::to_string(h.weights[i].histogram[static_cast<std::size_t>(k)]), std::to_string(h.weights[i].count)});
    for (std::size_t i = 0; i < h.activations.size(); ++i)
      for (int k = 0; k < GradientStats::kBins; ++k)
        bins.push_back({m.model, "activation", h.activation_names[i], std::to_string(GradientStats::kMinExponent + k),
                        std::to_string(h.activations[i].histogram[static_cast<std::size_t>(k)]),
                        std::to_string(h.activations[i].count)});
    const Totals t = totals(m.run);
    for (const auto& row : {layer_row("all weights", "-", t.weights), layer_row("all layer outputs", "-", t.activations)}) {
      std::vector<std::string> cells{m.model};
      cells.insert(cells.end(), row.begin(), row.end());
      layers.push_back(cells);
    }
    summary.rows.push_back({m.model, percent(fraction_below(t.weights, -24), 2), percent(t.weights.fraction(t.weights.f16_flushed), 2),
                            percent(t.activations.fraction(t.activations.zero), 1),
                            percent(t.activations.fraction(t.activations.f16_flushed), 2),
                            percent(fraction_below(t.activations, -24), 2),
                            percent(t.activations.fraction(t.activations.f16_subnormal), 2)});
    shapes += fmt::format("{}{}: weight gradients around 2^{} over {} binades, activation gradients around 2^{} over "
                          "{}", shapes.empty() ? "" : "; ", m.model, median_exponent(t.weights),
                          binades_spanned(t.weights), median_exponent(t.activations), binades_spanned(t.activations));
    worst_weight_tail = std::max(worst_weight_tail, fraction_below(t.weights, -24));
    worst_activation_tail = std::max(worst_activation_tail, fraction_below(t.activations, -24));
    most_activation_zeros = std::max(most_activation_zeros, t.activations.fraction(t.activations.zero));
    narrowest = std::min({narrowest, binades_spanned(t.weights), binades_spanned(t.activations)});
    s.tables.push_back(table);
    s.plots.push_back(weights);
    s.plots.push_back(activations);
  }
  s.tables.insert(s.tables.begin(), summary);
  s.csv_files = {report.write_csv("e3_histograms.csv", {"model", "gradient", "layer", "exponent", "values_in_bin",
                                                        "values"}, bins),
                 report.write_csv("e3_layers.csv", {"model", "gradient", "layer", "values", "zero", "zero_in_f16_only",
                                                    "below_2^-24", "f16_subnormal", "f16_overflow"}, layers)};
  // Three checks against the paper's numbers: the spread, Figure 2b's weight tail, Figure 3's tail.
  const bool spread = narrowest >= 15;
  const bool weight_tail = worst_weight_tail >= 0.025;     // within a factor 2 of the speech model's ~5%
  const bool activation_tail = worst_activation_tail >= 0.01;
  s.verdict = fmt::format(
      "Medians and widths (binades holding at least 0.1% of the values): {}. Every distribution spans {} binades or "
      "more: {}. Figure 2b: at most {} of a model's weight-gradient values lie below 2^-24, against the speech "
      "model's ~5%: {}. Figure 3: up to {} of a model's activation-gradient values lie below 2^-24: {}. Exact zeros "
      "in f32 reach {} of a model's activation-gradient values (SSD: 67%): in the MLP and the CNN they are where "
      "ReLU or max pooling passed no gradient, nothing f16 can lose.",
      shapes, narrowest, spread ? "**reproduced** (the paper's 'many binades')" : "**not reproduced**",
      percent(worst_weight_tail, 2), weight_tail ? "**reproduced**" : "**not reproduced in size**",
      percent(worst_activation_tail, 2),
      activation_tail ? "**reproduced** (these are what unscaled f16 loses; E4 and E5 measure the cost)"
                      : "**not reproduced** at this scale",
      percent(most_activation_zeros, 1));
  return s;
}

Experiment e3_experiment() {
  return Experiment{
      .id = "E3",
      .title = "Gradient histograms",
      .reference = "Figures 2b and 3",
      .claim = "Gradients of an FP32 run span many binades, and part of them lies below FP16's range: about 5% of the "
               "weight-gradient values of a Mandarin speech model have exponents below -24 (Figure 2b), and in SSD "
               "67% of the activation-gradient values are zero while many non-zero ones lie below 2^-24 (Figure 3).",
      .run = [](Context& context, Report& report) {
        const E3Options options = e3_options(context.preset, context.device, context.seed);
        auto images = context.fashion_mnist(options.images.train_examples, options.images.test_examples);
        auto text = options.text ? context.kjv(options.language.train_chars, options.language.validation_chars) : nullptr;
        return e3_section(run_e3(options, images, text, context.progress_sink()),
                          report);
      }};
}

}  // namespace mg::tools::repro
