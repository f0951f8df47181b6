#include "tools/repro/run_tables.h"

#include <fmt/format.h>

#include <cmath>

namespace mg::tools::repro {

namespace {

std::string cell(double value) {
  return std::isfinite(value) ? fmt::format("{:.9g}", value) : (std::isnan(value) ? "" : fmt::format("{}", value));
}

// x = step, y = factor x `value` at every step that has one (the evaluated steps).
Series evaluation_series(const RunResult& run, std::optional<double> StepLog::*value, double factor) {
  Series series = variant_series(run.variant);
  for (const StepLog& s : run.log)
    if (s.*value) {
      series.x.push_back(static_cast<double>(s.step));
      series.y.push_back(factor * *(s.*value));
    }
  return series;
}

Plot over_steps(Plot plot, const std::vector<RunResult>& runs, const std::function<Series(const RunResult&)>& curve) {
  plot.x_label = "step";
  for (const RunResult& run : runs) plot.series.push_back(curve(run));
  return plot;
}

}  // namespace

std::string legend(const Variant& variant) { return variant.id + " " + variant.name; }

int variant_style(const Variant& variant) {
  const int number = std::stoi(variant.id.substr(1));
  return number < kNoVariantStyle ? number : number + 1;  // V8 on: past the grey that is no variant's
}

Series variant_series(const Variant& variant) {
  return Series{.name = legend(variant), .style = variant_style(variant)};
}

std::string paper_note(std::span<const PaperNote> notes, std::string_view variant_id) {
  for (const PaperNote& n : notes)
    if (n.variant == variant_id) return std::string(n.note);
  return "-";
}

const RunResult* find_run(const std::vector<RunResult>& runs, const std::string& id) {
  for (const RunResult& r : runs)
    if (r.variant.id == id) return &r;
  return nullptr;
}

std::vector<std::string> step_csv_header(const std::vector<std::string>& weight_names) {
  std::vector<std::string> header{"experiment",
                                  "series",
                                  "variant",
                                  "variant_name",
                                  "loss_multiplier",
                                  "step",
                                  "loss",
                                  "lr",
                                  "scale",
                                  "skipped",
                                  "lost_update_fraction",
                                  "activation_zero_fraction",
                                  "activation_zero_in_f16_fraction",
                                  "logit_zero_in_f16_fraction",
                                  "test_accuracy",
                                  "validation_bpc",
                                  "test_loss"};
  for (const std::string& name : weight_names) header.push_back("weight_zero:" + name);
  for (const std::string& name : weight_names) header.push_back("weight_zero_in_f16:" + name);
  return header;
}

void append_step_rows(Rows& rows, const std::string& experiment, const std::string& series, const RunResult& run,
                      bool with_weights) {
  for (const StepLog& s : run.log) {
    std::vector<std::string> row{experiment,
                                 series,
                                 run.variant.id,
                                 run.variant.name,
                                 cell(run.loss_multiplier),
                                 std::to_string(s.step),
                                 cell(s.loss),
                                 cell(s.lr),
                                 cell(s.scale),
                                 s.skipped ? "1" : "0",
                                 cell(s.lost_update_fraction),
                                 cell(s.activation_zero_fraction),
                                 cell(s.activation_zero_in_f16_fraction),
                                 cell(s.logit_zero_in_f16_fraction),
                                 s.test_accuracy ? cell(*s.test_accuracy) : "",
                                 s.validation_bpc ? cell(*s.validation_bpc) : "",
                                 s.test_loss ? cell(*s.test_loss) : ""};
    if (with_weights) {
      for (std::size_t w = 0; w < run.weight_names.size(); ++w)
        row.push_back(w < s.weight_grad_zero_fraction.size() ? cell(s.weight_grad_zero_fraction[w]) : "");
      for (std::size_t w = 0; w < run.weight_names.size(); ++w)
        row.push_back(w < s.weight_grad_zero_in_f16_fraction.size() ? cell(s.weight_grad_zero_in_f16_fraction[w]) : "");
    }
    rows.push_back(std::move(row));
  }
}

std::vector<std::string> run_csv_header() {
  return {"experiment",           "series",           "variant",     "variant_name",    "description",
          "loss_multiplier",      "final_accuracy",   "final_bpc",   "final_test_loss", "final_loss",
          "lost_update_fraction", "skipped_steps",    "final_scale", "diverged",        "seconds",
          "train_seconds",        "items_per_second", "peak_bytes",  "state_bytes",     "activation_bytes"};
}

void append_run_row(Rows& rows, const std::string& experiment, const std::string& series, const RunResult& run) {
  rows.push_back({experiment,
                  series,
                  run.variant.id,
                  run.variant.name,
                  run.variant.description,
                  cell(run.loss_multiplier),
                  cell(run.final_accuracy),
                  cell(run.final_bpc),
                  cell(run.final_test_loss),
                  cell(run.final_loss),
                  cell(run.lost_update_fraction),
                  std::to_string(run.skipped_steps),
                  cell(run.final_scale),
                  run.diverged ? "1" : "0",
                  fmt::format("{:.2f}", run.seconds),
                  fmt::format("{:.2f}", run.train_seconds),
                  fmt::format("{:.0f}", run.items_per_second),
                  std::to_string(run.peak_bytes),
                  std::to_string(run.state_bytes),
                  std::to_string(run.activation_bytes)});
}

RunGroup group_of(std::string series, const std::vector<RunResult>& runs, bool steps) {
  RunGroup group{.series = std::move(series), .runs = {}, .steps = steps};
  for (const RunResult& run : runs) group.runs.push_back(&run);
  return group;
}

std::vector<std::string> write_run_csvs(const Report& report, const std::string& id, const std::string& stem,
                                        const std::vector<RunGroup>& groups, bool with_weights) {
  Rows run_rows, step_rows;
  std::vector<std::string> weight_names;
  for (const RunGroup& group : groups)
    for (const RunResult* run : group.runs) {
      append_run_row(run_rows, id, group.series, *run);
      if (!group.steps) continue;
      if (with_weights && weight_names.empty()) weight_names = run->weight_names;
      append_step_rows(step_rows, id, group.series, *run, with_weights);
    }
  std::vector<std::string> written{report.write_csv(stem + "_runs.csv", run_csv_header(), run_rows)};
  if (!step_rows.empty())
    written.push_back(report.write_csv(stem + "_steps.csv", step_csv_header(weight_names), step_rows));
  return written;
}

Series step_series(const RunResult& run, const std::function<double(const StepLog&)>& value) {
  Series series = variant_series(run.variant);
  for (const StepLog& s : run.log) {
    series.x.push_back(static_cast<double>(s.step));
    series.y.push_back(value(s));
  }
  return series;
}

Plot step_plot(Plot plot, const std::vector<RunResult>& runs, const std::function<double(const StepLog&)>& value) {
  return over_steps(std::move(plot), runs, [&](const RunResult& run) { return step_series(run, value); });
}

Plot accuracy_plot(std::string name, std::string title, const std::vector<RunResult>& runs) {
  return over_steps(
      {.name = std::move(name), .title = std::move(title), .y_label = "test accuracy (%)", .kind = PlotKind::points},
      runs, [](const RunResult& run) { return evaluation_series(run, &StepLog::test_accuracy, 100); });
}

Plot bpc_plot(std::string name, std::string title, const std::vector<RunResult>& runs) {
  return over_steps(
      {.name = std::move(name), .title = std::move(title), .y_label = "bits per character", .kind = PlotKind::points},
      runs, [](const RunResult& run) { return evaluation_series(run, &StepLog::validation_bpc, 1); });
}

Plot scale_plot(const std::string& name, const std::string& title, const std::vector<const RunResult*>& runs) {
  Plot plot{.name = name, .title = title, .x_label = "step", .y_label = "loss scale", .log_y = 2};
  for (const RunResult* run : runs) {
    Series scale{.name = legend(run->variant) + " scale", .style = variant_style(run->variant)};
    auto scale_at = [&](std::int64_t step) {  // the scale step `step` used
      double value = run->scale_trajectory.empty() ? 1.0 : run->scale_trajectory.front().second;
      for (const auto& [from, s] : run->scale_trajectory)
        if (from <= step) value = s;
      return value;
    };
    for (const auto& [step, s] : run->scale_trajectory) {  // a staircase: hold each value until the next change
      if (!scale.x.empty()) {
        scale.x.push_back(static_cast<double>(step));
        scale.y.push_back(scale.y.back());
      }
      scale.x.push_back(static_cast<double>(step));
      scale.y.push_back(s);
    }
    if (!run->log.empty() && !scale.y.empty()) {  // held to the last step
      scale.x.push_back(static_cast<double>(run->log.back().step));
      scale.y.push_back(scale.y.back());
    }
    plot.series.push_back(std::move(scale));
    Series skipped{.name = legend(run->variant) + " skipped steps",
                   .markers = true,
                   .style = variant_style(run->variant)};
    for (std::int64_t step : run->skipped_at) {
      skipped.x.push_back(static_cast<double>(step));
      skipped.y.push_back(scale_at(step));
    }
    if (!skipped.x.empty()) plot.series.push_back(std::move(skipped));
  }
  return plot;
}

std::vector<const RunResult*> with_loss_scaling(const std::vector<RunResult>& runs) {
  std::vector<const RunResult*> scaled;
  for (const RunResult& run : runs)
    if (run.variant.recipe.loss_scaling != amp::LossScaling::None) scaled.push_back(&run);
  return scaled;
}

}  // namespace mg::tools::repro
