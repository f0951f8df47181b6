#include "tools/repro/e3_long_run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "tools/repro/run_tables.h"

namespace mg::tools::repro {

namespace {

// The paper's share of a speech model's weight-gradient values below 2^-24 (Figure 2b).
constexpr double kFigure2bShare = 0.05;

}  // namespace

// The MLP with E1's recipe for o.long_run_steps, every weight's gradient recorded at each checkpoint.
void run_e3_long(const E3Options& o, std::shared_ptr<const ImageData> images, E3Result& result) {
  const E1Options& e1 = o.images;
  RunConfig config = e1_run_config(e1, std::move(images), mlp_784_256_256_10, o.long_run_steps, variant("V0"), e1.seed);
  config.log_every = o.checkpoint_every;
  config.eval_every = 0;
  config.record_weight_gradients = true;
  result.long_run = run(config);
  Generator generator(e1.seed);
  for (const auto& [name, parameter] : config.make_model(generator)->named_parameters())
    if (parameter.dim() >= 2) result.long_run_weight_values.push_back(parameter.numel());  // the runner's weights
  const std::vector<std::int64_t>& values = result.long_run_weight_values;
  MG_CHECK(values.size() == result.long_run.weight_names.size(), "repro E3: the long run has {} weights, its model {}",
           result.long_run.weight_names.size(), values.size());
  const double total = static_cast<double>(std::accumulate(values.begin(), values.end(), std::int64_t{0}));
  for (const StepLog& log : result.long_run.log) {
    E3Checkpoint c{.step = log.step, .lr = log.lr, .loss = log.loss, .zero = log.weight_grad_zero_fraction};
    for (std::size_t w = 0; w < values.size(); ++w) {
      // zero once in f16 (exact zeros included) minus exact zeros: what rounding to f16 flushes
      c.flushed.push_back(log.weight_grad_zero_in_f16_fraction[w] - log.weight_grad_zero_fraction[w]);
      c.all_zero += c.zero[w] * static_cast<double>(values[w]) / total;
      c.all_flushed += c.flushed[w] * static_cast<double>(values[w]) / total;
    }
    result.checkpoints.push_back(std::move(c));
  }
}

// The long run's table, plot and e3_weights_over_training.csv, added to `s`; returns the verdict's
// sentence about it.
std::string e3_long_run_part(const E3Result& r, const Report& report, Section& s) {
  const std::vector<std::string>& names = r.long_run.weight_names;
  const std::vector<E3Checkpoint>& checkpoints = r.checkpoints;
  struct Curve {
    std::string name;
    std::int64_t values;
    std::function<double(const E3Checkpoint&)> zero, flushed;
  };
  std::vector<Curve> curves;
  for (std::size_t w = 0; w < names.size(); ++w)
    curves.push_back({names[w], r.long_run_weight_values[w], [w](const E3Checkpoint& c) { return c.zero[w]; },
                      [w](const E3Checkpoint& c) { return c.flushed[w]; }});
  curves.push_back({"all weights",
                    std::accumulate(r.long_run_weight_values.begin(), r.long_run_weight_values.end(), std::int64_t{0}),
                    [](const E3Checkpoint& c) { return c.all_zero; },
                    [](const E3Checkpoint& c) { return c.all_flushed; }});
  const E3Checkpoint &first = checkpoints.front(), &middle = checkpoints[checkpoints.size() / 2],
                     &last = checkpoints.back();
  Table table{.caption = fmt::format("MLP long run: per weight, the share of its gradient's values that f16 flushes to "
                                     "zero (non-zero in f32, |g| <= 2^-25; a lower bound of the share below 2^-24), "
                                     "at {} checkpoints:",
                                     checkpoints.size()),
              .header = {"weight", "values", fmt::format("step {}", first.step), fmt::format("step {}", middle.step),
                         fmt::format("step {} (last)", last.step), "most (at step)", "reaches 5% at step"}};
  Plot plot{.name = "e3_weights_over_training",
            .title = "E3 MLP long run (fp32): weight-gradient values f16 flushes to zero",
            .x_label = "step",
            .y_label = "% of the values flushed to zero in f16"};
  Rows rows;
  std::vector<std::string> ends, reached;
  for (const Curve& curve : curves) {
    Series series{.name = curve.name};
    const E3Checkpoint* most = &first;
    for (const E3Checkpoint& c : checkpoints) {
      series.x.push_back(static_cast<double>(c.step));
      series.y.push_back(100 * curve.flushed(c));
      if (curve.flushed(c) > curve.flushed(*most)) most = &c;
      rows.push_back({std::to_string(c.step), number(c.lr, 4), number(c.loss, 4), curve.name,
                      std::to_string(curve.values), fmt::format("{:.6g}", curve.zero(c)),
                      fmt::format("{:.6g}", curve.flushed(c))});
    }
    const std::optional<std::int64_t> reach = first_step_reaching(checkpoints, curve.flushed, kFigure2bShare);
    table.rows.push_back({curve.name, std::to_string(curve.values), percent(curve.flushed(first), 2),
                          percent(curve.flushed(middle), 2), percent(curve.flushed(last), 2),
                          fmt::format("{} ({})", percent(curve.flushed(*most), 2), most->step),
                          reach ? std::to_string(*reach) : "never"});
    plot.series.push_back(std::move(series));
    ends.push_back(fmt::format("{} {}", curve.name, percent(curve.flushed(last), 2)));
    if (reach) reached.push_back(fmt::format("{} at step {}", curve.name, *reach));
  }
  plot.series.push_back(Series{.name = "5% (the paper's speech model)",
                               .x = {static_cast<double>(first.step), static_cast<double>(last.step)},
                               .y = {100 * kFigure2bShare, 100 * kFigure2bShare},
                               .style = kNoVariantStyle});
  s.tables.push_back(table);
  s.plots.push_back(plot);
  s.csv_files.push_back(report.write_csv("e3_weights_over_training.csv",
                                         {"step", "lr", "loss", "weight", "values", "zero", "flushed_in_f16"}, rows));
  double most_overall = 0;
  for (const E3Checkpoint& c : checkpoints) most_overall = std::max(most_overall, c.all_flushed);
  const bool in_size = most_overall >= kFigure2bShare / 2;  // within a factor 2, as the histograms are judged
  // How far training had got: the paper's figure is of a model still learning, not of one that has
  // fit its training set (where every gradient shrinks).
  const auto all_reach = first_step_reaching(checkpoints, curves.back().flushed, kFigure2bShare);
  std::string loss_then;
  for (const E3Checkpoint& c : checkpoints)
    if (all_reach && c.step == *all_reach)
      loss_then = fmt::format("the training loss was {} at step {} and ", number(c.loss), c.step);
  return fmt::format("Over the MLP's {}-step run, the share of weight-gradient values f16 flushes to zero ends at {}; "
                     "it reaches 5% {}; over all weights it is at most {}, so Figure 2b's ~5% is **{}** "
                     "({}is {} over the last 10% of the run{}).",
                     r.options.long_run_steps, fmt::join(ends, ", "),
                     reached.empty() ? std::string("in no layer at any checkpoint")
                                     : fmt::format("for {}", fmt::join(reached, ", ")),
                     percent(most_overall, 2), in_size ? "reached as training converges" : "not reached", loss_then,
                     number(r.long_run.final_loss),
                     r.long_run.final_loss < 0.01 ? fmt::format(": the MLP has fit its {} training images and its "
                                                                "gradients shrink with its loss, a regime past the "
                                                                "paper's snapshot of a model still learning",
                                                                r.options.images.train_examples)
                                                  : "");
}

std::optional<std::int64_t> first_step_reaching(const std::vector<E3Checkpoint>& checkpoints,
                                                const std::function<double(const E3Checkpoint&)>& value,
                                                double threshold) {
  for (const E3Checkpoint& c : checkpoints)
    if (value(c) >= threshold) return c.step;
  return std::nullopt;
}

}  // namespace mg::tools::repro
