// E9's runs: the activations of a mixed_bfloat16 MLP and tiny GPT as E8 trains them, measured at
// their end, the synthetic sweep, and the loss-gap runs (E8's where it ran). The ways of scaling and
// the synthetic activations: e9_scalings.cpp; the report's section: e9_report.cpp.
#include "tools/repro/e9_granularity.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "tools/repro/linear_operands.h"
#include "tools/repro/run_tables.h"

namespace mg::tools::repro {

namespace {

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
    tell(progress, "E9 {}: flushed per tensor {}, MX {}", m.source, percent(m.effects[kE9PerTensor].flushed_share(), 3),
         percent(m.effects[kE9MxFloor].flushed_share(), 3));
  for (const std::string& model : o.gap_models) {
    const bool text_model = model != "MLP" && model != "CNN";
    if (text_model ? text != nullptr : images != nullptr)
      result.gaps.push_back(gap_runs(o, model, images, text, e8, result, progress));
  }
  return result;
}

bool e9_from_e8(const E9Result& r, const std::string& model, const std::string& id) {
  return std::find(r.from_e8.begin(), r.from_e8.end(), model + " " + id) != r.from_e8.end();
}

}  // namespace mg::tools::repro
