// RunResults as CSV rows and plots over the steps: the common shape of every experiment's raw
// numbers; and the cells its tables share (a variant's legend, the paper's note on it).
//
// step CSV: experiment,series,variant,variant_name,loss_multiplier,step,loss,lr,scale,skipped,
//           lost_update_fraction,activation_zero_fraction,activation_zero_in_f16_fraction,
//           logit_zero_in_f16_fraction,test_accuracy,validation_bpc,test_loss
//           (+ one weight_zero:<name> and weight_zero_in_f16:<name> column per weight when asked)
// run CSV:  experiment,series,variant,variant_name,description,loss_multiplier,final_accuracy,
//           final_bpc,final_test_loss,final_loss,lost_update_fraction,skipped_steps,final_scale,diverged,seconds,
//           train_seconds,items_per_second,peak_bytes,state_bytes,activation_bytes
// Empty cells are values not measured (NaN).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tools/repro/report.h"
#include "tools/repro/runner.h"

namespace mg::tools::repro {

using Rows = std::vector<std::vector<std::string>>;

// with_weights: add the per-weight columns of `weight_names` (every run appended must have them).
std::vector<std::string> step_csv_header(const std::vector<std::string>& weight_names = {});
void append_step_rows(Rows& rows, const std::string& experiment, const std::string& series, const RunResult& run,
                      bool with_weights = false);

std::vector<std::string> run_csv_header();
void append_run_row(Rows& rows, const std::string& experiment, const std::string& series, const RunResult& run);

// Runs that share one series name in the CSVs ("MLP", "constant lr 0.001", "k = 4").
struct RunGroup {
  std::string series;
  std::vector<const RunResult*> runs;
  bool steps = true;  // their logged steps go to the step CSV too
};
RunGroup group_of(std::string series, const std::vector<RunResult>& runs, bool steps = true);
// An experiment's CSVs: STEM_runs.csv, a row per run, and STEM_steps.csv, a row per logged step of
// the groups with steps (not written when no group has them), for experiment `id` ("E1"). Returns
// the names written. with_weights: the per-weight columns of the first run's weights.
std::vector<std::string> write_run_csvs(const Report& report, const std::string& id, const std::string& stem,
                                        const std::vector<RunGroup>& groups, bool with_weights = false);

// An empty curve of `variant`: named by it ("V2 float16_master"), in its line style.
Series variant_series(const Variant& variant);
// One curve per run, x = step: `value` of every logged step (NaN ones are gaps), named by the variant.
Series step_series(const RunResult& run, const std::function<double(const StepLog&)>& value);

// Plots over the steps, one curve per run, x = step: `value` at every logged step (the name, title,
// y axis and kind as `plot` has them), the test accuracy in % and the validation bits per
// character (text runs) at every evaluated step.
Plot step_plot(Plot plot, const std::vector<RunResult>& runs, const std::function<double(const StepLog&)>& value);
Plot accuracy_plot(std::string name, std::string title, const std::vector<RunResult>& runs);
Plot bpc_plot(std::string name, std::string title, const std::vector<RunResult>& runs);
// The loss scale of each run over the steps (a step line on a log axis), with every skipped step
// marked by a point: the scale trajectory of a GradScaler.
Plot scale_plot(const std::string& name, const std::string& title, const std::vector<const RunResult*>& runs);
// The runs whose variant scales the loss (V3, V4): the ones a scale plot shows.
std::vector<const RunResult*> with_loss_scaling(const std::vector<RunResult>& runs);
// The run of variant `id` in `runs`, or nullptr.
const RunResult* find_run(const std::vector<RunResult>& runs, const std::string& id);
// "V2 float16_master"
std::string legend(const Variant& variant);
// The line style of a variant's curves (Series::style), in every plot: its number for V0..V7 (V2: 2),
// one more from V8 on (kNoVariantStyle, grey, is no variant's).
int variant_style(const Variant& variant);

// What the paper says about one variant, for a table's last column.
struct PaperNote {
  std::string_view variant;  // "V2"
  std::string_view note;  // "parity with fp32"
};
// The note on `variant_id` among `notes`, or "-" when the paper says nothing about it.
std::string paper_note(std::span<const PaperNote> notes, std::string_view variant_id);

}  // namespace mg::tools::repro
