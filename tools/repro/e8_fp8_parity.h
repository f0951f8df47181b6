// E8, Micikevicius et al. 2022 ("FP8 Formats for Deep Learning", arXiv 2209.05433): FP8 training
// matches 16-bit training.
//
// The models of E1 and E5 trained in V5 mixed_bfloat16 (the 16-bit baseline the FP8 recipes are built
// on: amp/recipe.h) and under each FP8 recipe, V8 fp8_delayed, V9 fp8_current, V10 fp8_block and V11
// mxfp8, with everything else unchanged, as the paper left its hyper-parameters. Each FP8 recipe runs
// every nn::Linear's three GEMMs in FP8: all the MLP's layers, the CNN's two fully connected ones (its
// convolutions stay bf16), the char LSTM's head (its recurrence stays bf16), every projection of the
// tiny GPT. Measured, seed by seed (runs of one seed share initial weights and batches): the paired
// difference of the final score from V5's (test accuracy, or validation bits per character) with its
// 95% interval over the seeds, and the training-loss gap to V5 on the same batch at every logged step
// (the paper's Figure 1 shows loss curves). A recipe is at parity when its mean difference is within
// a margin: for accuracy E1's (the largest of 0.5 points, one standard error on the test images and
// V5's spread over seeds), for bits/char the larger of 0.02 and V5's spread.
// The FP8 GEMMs run on the CPU only (autograd/fp8.h), so E8..E11 run there whatever --device says.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tools/repro/e1_parity.h"
#include "tools/repro/e5_language_model.h"
#include "tools/repro/experiment.h"
#include "tools/repro/run_tables.h"

namespace mg::tools::repro {

struct E8Options {
  E1Options images{};  // the MLP and the CNN, E1's recipe and sizes (its variants and seeds unused)
  // The char LSTM, E5's model and data, shorter and with Adam (Adagrad's 600 steps cost too much here);
  // the tiny GPT's options too, when `gpt`.
  E5Options language{.steps = 150, .log_every = 10, .eval_every = 50, .optimizers = {"adam"}, .adam_lr = 1e-2};
  bool cnn = true, lstm = true;  // the CNN (with images) and the char LSTM (with text): E12 and E13 leave them out
  bool gpt = false;  // the tiny GPT too
  std::vector<std::string> variant_ids{"V5", "V8", "V9", "V10", "V11"};  // V5 first: the baseline
  std::vector<std::uint64_t> seed_offsets{0};  // every variant runs with seed + each of these
  double bpc_margin = 0.02;  // bits/char within which a recipe is at parity (about 1.4% in perplexity)
  std::uint64_t seed = 0;
  Device device = Device::cpu();
};

// The preset's sizes from `seed`. The runs are on the CPU whatever `device` (the FP8 GEMMs are CPU-only).
E8Options e8_options(Preset preset, Device device, std::uint64_t seed);

// One model in every variant and seed.
struct E8Model {
  std::string name;  // "MLP", "CNN", "char LSTM", "tiny GPT"
  bool text = false;  // scored by validation bits/char (else test accuracy)
  std::vector<std::vector<RunResult>> runs{};  // [variant][seed], options.variant_ids by options.seed_offsets
};

struct E8Result {
  E8Options options;
  std::vector<E8Model> models{};  // MLP, CNN, char LSTM, and the tiny GPT when options.gpt
};

// What a model is scored by: test accuracy, or validation bits/char for text.
double RunResult::*e8_metric(const E8Model& model);

// The mean of a score over a variant's runs (one per seed); NaN for none.
double e8_mean_score(const std::vector<RunResult>& runs, double RunResult::*metric);
// The parity margin of a model: for accuracy E1's (0.5 points, one standard error, the baseline's spread
// over seeds), for bits/char the larger of bpc_margin and the spread.
double e8_parity_margin(const E8Model& model, const E8Options& options, const std::vector<RunResult>& baseline);
// The mean over the seeds of a loss gap (early_loss_gap or late_loss_gap) of a variant's runs to the baseline's.
double e8_mean_gap(const std::vector<RunResult>& runs, const std::vector<RunResult>& baseline,
                   double (*gap)(const RunResult&, const RunResult&));

// The CSV groups of a result: one per model and seed, the first seed's with its steps (E8, E12).
std::vector<RunGroup> e8_run_groups(const E8Result& result);

// The runs of variant `id` over the seeds, or nullptr.
const std::vector<RunResult>* e8_runs_of(const E8Model& model, const std::string& id);

// The mean of `run`'s training loss minus `baseline`'s (same batches) over the first or the last
// quarter of the logged steps: the cost of a precision early in training, and once the curves have
// flattened. NaN when the run diverged.
double early_loss_gap(const RunResult& run, const RunResult& baseline);
double late_loss_gap(const RunResult& run, const RunResult& baseline);

// The run of `model` ("MLP", "CNN", "char LSTM", "tiny GPT") in `v` from `seed`, as E8 trains it (E9
// trains more variants the same way).
RunConfig e8_run_config(const E8Options& options, const std::string& model, std::shared_ptr<const ImageData> images,
                        std::shared_ptr<const TextData> text, const Variant& v, std::uint64_t seed);

// The training loss of each run but `baseline` minus baseline's at every logged step (same batches),
// one curve per variant, into `plot` (its name, titles): the paper's Figure 1 as a difference.
Plot loss_gap_plot(Plot plot, const std::vector<RunResult>& runs, const RunResult& baseline);

// Runs of a model, variant and seeds that `reuse` holds (E8's, for E12; E12's, for E13) are taken from it
// when it ran the same options but variants; `tag` begins each progress line.
E8Result run_e8(const E8Options& options, std::shared_ptr<const ImageData> images, std::shared_ptr<const TextData> text,
                const Progress& progress = {}, const E8Result* reuse = nullptr, std::string_view tag = "E8");

// Writes e8_runs.csv and e8_steps.csv, and returns the section.
Section e8_section(const E8Result& result, Report& report);

extern const Heading kE8Fp8Parity;

}  // namespace mg::tools::repro
