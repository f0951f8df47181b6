#include "tools/repro/e9_granularity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <span>

#include "tools/repro/linear_operands.h"
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

// The way of scaling whose effects the verdict compares: per tensor, and the finest (MX, the spec).
constexpr std::size_t kPerTensor = 0, kTiles = 1, kMxFloor = 2, kMxRoundUp = 3;

Fp8Options forward_options(Fp8Scaling scaling, MxScaleRule rule = MxScaleRule::Floor) {
  return Fp8Options{.scaling = scaling, .backward_format = DType::E4M3, .mx_rule = rule};
}

// Collects the Linear inputs of the watched steps, per layer, as the effects of every way of scaling.
class ActivationEffects {
 public:
  explicit ActivationEffects(std::int64_t from_step) : from_step_(from_step) {}

  // RunConfig::watch_logged_step: a LinearOperands on the steps from `from_step` on.
  std::function<std::shared_ptr<void>(const nn::Module&, std::int64_t)> watcher() {
    return [this](const nn::Module& model, std::int64_t step) -> std::shared_ptr<void> {
      if (step <= from_step_) return nullptr;
      return std::make_shared<LinearOperands>(
          model, [this](const LinearOperand& x) { add(x); }, nullptr);
    };
  }

  // One E9Measure per layer, in the order the forward met them, then all layers merged.
  std::vector<E9Measure> measures(const std::string& model) const {
    std::vector<E9Measure> result;
    E9Measure all{.source = model + ", all layers",
                  .outlier_factor = 0,
                  .effects = std::vector<Fp8Effect>(e9_scalings().size())};
    for (const std::string& layer : order_) {
      const Slot& slot = slots_.at(layer);
      result.push_back({.source = fmt::format("{} layer {} input [., {}]", model, layer, slot.channels),
                        .outlier_factor = slot.outlier_ratio,
                        .effects = slot.effects});
      for (std::size_t i = 0; i < slot.effects.size(); ++i) all.effects[i].merge(slot.effects[i]);
      all.outlier_factor = std::max(all.outlier_factor, slot.outlier_ratio);
    }
    result.push_back(all);
    return result;
  }

 private:
  struct Slot {
    std::int64_t channels = 0;
    double outlier_ratio = 0;  // the largest over the steps watched
    std::vector<Fp8Effect> effects;
  };
  void add(const LinearOperand& x) {
    auto [slot, fresh] = slots_.try_emplace(x.layer);
    if (fresh) order_.push_back(x.layer);
    const E9Measure m = measure_scalings(x.layer, x.values);
    slot->second.channels = x.values.size(1);
    slot->second.outlier_ratio = std::max(slot->second.outlier_ratio, m.outlier_factor);
    if (slot->second.effects.empty()) slot->second.effects.resize(m.effects.size());
    for (std::size_t i = 0; i < m.effects.size(); ++i) slot->second.effects[i].merge(m.effects[i]);
  }
  std::int64_t from_step_;
  std::vector<std::string> order_;
  std::map<std::string, Slot> slots_;
};

// The run of `model` in variant `id` from E8's result (its first seed), or nullptr.
const RunResult* e8_run(const E8Result* e8, const std::string& model, const std::string& id) {
  if (!e8) return nullptr;
  for (const E8Model& m : e8->models)
    if (m.name == model)
      if (const std::vector<RunResult>* runs = e8_runs_of(m, id)) return &runs->front();
  return nullptr;
}

// The tiny GPT's activations: a mixed_bfloat16 run as E8 trains it, watched at its end.
std::vector<E9Measure> gpt_measures(const E9Options& o, std::shared_ptr<const TextData> text) {
  RunConfig c = e8_run_config(o.training, "tiny GPT", nullptr, std::move(text), variant("V5"), o.seed);
  ActivationEffects effects(c.steps - o.watched_steps);
  c.watch_logged_step = effects.watcher();
  run(c);
  return effects.measures("tiny GPT");
}

// The MLP's mixed_bfloat16 run as E8 trains it, its activations measured at its end.
void measure_mlp(const E9Options& o, std::shared_ptr<const ImageData> images, E9Result& result) {
  RunConfig c = e8_run_config(o.training, "MLP", std::move(images), nullptr, variant("V5"), o.seed);
  ActivationEffects effects(c.steps - o.watched_steps);
  c.watch_logged_step = effects.watcher();
  result.measured = run(c);
  result.real = effects.measures("MLP");
}

// One model's gap runs: E8's where it has them, the measured MLP run as the MLP's V5, the rest trained.
E8Model gap_runs(const E9Options& o, const std::string& model, std::shared_ptr<const ImageData> images,
                 std::shared_ptr<const TextData> text, const E8Result* e8, E9Result& result, const Progress& progress) {
  E8Model gaps{.name = model, .text = model != "MLP" && model != "CNN"};
  for (const Variant& v : variants(o.gap_variant_ids)) {
    if (const RunResult* taken = e8_run(e8, model, v.id)) {
      result.from_e8.push_back(model + " " + v.id);
      gaps.runs.push_back({*taken});
    } else if (model == "MLP" && v.id == "V5") {
      gaps.runs.push_back({result.measured});
    } else {
      gaps.runs.push_back({run(e8_run_config(o.training, model, images, text, v, o.seed))});
      tell(progress, "E9 {}: {} trained, late loss gap {:+.4f}", model, legend(v),
           late_loss_gap(gaps.runs.back().front(), gaps.runs.front().front()));
    }
  }
  return gaps;
}

}  // namespace

const std::vector<E9Scaling>& e9_scalings() {
  static const std::vector<E9Scaling> all{
      {"per tensor", "V8, V9", forward_options(Fp8Scaling::Current), variant_style(variant("V8"))},
      {"1x128 tiles", "V10", forward_options(Fp8Scaling::Block), variant_style(variant("V10"))},
      {"MX, floor (spec)", "V11", forward_options(Fp8Scaling::Mx, MxScaleRule::Floor), variant_style(variant("V11"))},
      {"MX, round up (TE)", "V15", forward_options(Fp8Scaling::Mx, MxScaleRule::RoundUp),
       variant_style(variant("V15"))},
  };
  return all;
}

Tensor outlier_activations(std::int64_t rows, std::int64_t channels, double share, double factor, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor x = Tensor::empty({rows, channels});
  std::span<float> values(x.data<float>(), static_cast<std::size_t>(x.numel()));
  for (float& v : values) v = normal(random);
  std::vector<std::int64_t> order(static_cast<std::size_t>(channels));
  for (std::int64_t c = 0; c < channels; ++c) order[static_cast<std::size_t>(c)] = c;
  std::shuffle(order.begin(), order.end(), random);
  const auto outliers = static_cast<std::size_t>(
      share > 0 ? std::max<double>(1, std::round(share * static_cast<double>(channels))) : 0);
  for (std::size_t i = 0; i < outliers; ++i)
    for (std::int64_t r = 0; r < rows; ++r) values[static_cast<std::size_t>(r * channels + order[i])] *= factor;
  return x;
}

double channel_outlier_ratio(const Tensor& x) {
  const Tensor values = x.to(DType::F32);
  const std::int64_t rows = values.size(0), channels = values.size(1);
  std::vector<float> amax(static_cast<std::size_t>(channels), 0.0f);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < channels; ++c)
      amax[static_cast<std::size_t>(c)] = std::max(amax[static_cast<std::size_t>(c)],
                                                   std::fabs(values.data<float>()[r * channels + c]));
  const float largest = *std::max_element(amax.begin(), amax.end());
  std::nth_element(amax.begin(), amax.begin() + channels / 2, amax.end());
  const float median = amax[static_cast<std::size_t>(channels / 2)];
  return median > 0 ? largest / median : std::numeric_limits<double>::infinity();
}

E9Measure measure_scalings(const std::string& source, const Tensor& x) {
  E9Measure m{.source = source, .outlier_factor = channel_outlier_ratio(x)};
  for (const E9Scaling& scaling : e9_scalings()) m.effects.push_back(fp8_effect_of(x, Fp8Role::Input, scaling.options));
  return m;
}

E9Options e9_options(Preset preset, Device /*the runs stay on the CPU*/, std::uint64_t seed) {
  return preset_options<E9Options>(preset,
                                   {.training = e8_options(Preset::Full, Device::cpu(), seed),
                                    .watched_steps = 200,
                                    .gpt = true,
                                    .synthetic_rows = 2048,
                                    .synthetic_channels = 4096},
                                   Device::cpu(), seed);
}

E9Result run_e9(const E9Options& o, std::shared_ptr<const ImageData> images, std::shared_ptr<const TextData> text,
                const E8Result* e8, const Progress& progress) {
  MG_CHECK(!o.gap_variant_ids.empty() && o.gap_variant_ids.front() == "V5",
           "repro E9: the loss-gap variants must start with V5, the baseline");
  E9Result result{.options = o};
  for (const double factor : o.outlier_factors) {
    result.synthetic.push_back(
        measure_scalings(fmt::format("synthetic, {} of channels x{:g}", percent(o.outlier_share, 0), factor),
                         outlier_activations(o.synthetic_rows, o.synthetic_channels, o.outlier_share, factor, o.seed)));
    result.synthetic.back().outlier_factor = factor;  // the factor applied, not the channels' measured ratio
  }
  if (images) measure_mlp(o, images, result);
  if (text && o.gpt)
    for (E9Measure& m : gpt_measures(o, text)) result.real.push_back(std::move(m));
  for (const E9Measure& m : result.real)
    tell(progress, "E9 {}: flushed per tensor {}, MX {}", m.source, percent(m.effects[kPerTensor].flushed_share(), 3),
         percent(m.effects[kMxFloor].flushed_share(), 3));
  for (const std::string& model : o.gap_models) {
    const bool text_model = model != "MLP" && model != "CNN";
    if (text_model ? text != nullptr : images != nullptr)
      result.gaps.push_back(gap_runs(o, model, images, text, e8, result, progress));
  }
  return result;
}

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
  const Fp8Effect &tensor = m.effects[kPerTensor], &e = m.effects[scaling];
  return e.mean_element_error() < 0.9 * tensor.mean_element_error() && e.flushed_share() <= tensor.flushed_share();
}

// "per tensor 0.050% / 0.000% / 2.4e-02, 1x128 tiles ..., MX (floor) ..., MX (round up) ...".
std::string effects_of(const E9Measure& m) {
  return fmt::format("per tensor {}, 1x128 tiles {}, MX (floor) {}, MX (round up) {}",
                     effect_cell(m.effects[kPerTensor]), effect_cell(m.effects[kTiles]),
                     effect_cell(m.effects[kMxFloor]), effect_cell(m.effects[kMxRoundUp]));
}

// The synthetic sweep's verdict: from which outlier factor on finer scaling does better, the headline
// factor's numbers, and MX's two rules.
std::string synthetic_verdict(const E9Result& r) {
  const E9Measure* h = headline(r);
  if (!h) return "";
  const E9Measure* first = nullptr;  // the smallest factor where a finer scaling does better
  for (const E9Measure& m : r.synthetic)
    if (!first && (better_than_per_tensor(m, kTiles) || better_than_per_tensor(m, kMxFloor))) first = &m;
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
  const Fp8Effect &floor = h->effects[kMxFloor], &up = h->effects[kMxRoundUp];
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
                          m.source.substr(0, m.source.find(',')), m.outlier_factor, effect_cell(m.effects[kPerTensor]),
                          effect_cell(m.effects[kMxFloor]));
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

bool e9_from_e8(const E9Result& r, const std::string& model, const std::string& id) {
  return std::find(r.from_e8.begin(), r.from_e8.end(), model + " " + id) != r.from_e8.end();
}

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
