// E5, the paper's Figure 5 (bigLSTM): a language model needs loss scaling.
//
// A character-level LSTM on the King James Bible, the loss the mean cross entropy over batch x
// time as in the paper, Adam, in V0 fp32, V2 float16_master without scaling, V3 with the paper's
// S = 128, V4 with the dynamic GradScaler and V5 mixed_bfloat16. The mean over B x T positions puts
// a 1 / (B T) factor on every logit gradient (softmax - one-hot) / (B T): with B T = 2048, a
// character the model gives probability below 2048 x 2^-25 (about 6e-5) has a gradient that
// rounds to zero in f16. Measured: validation bits per character over the run, and the fraction of logit-gradient
// values that are zero once rounded to f16 (what cross entropy hands back, loss scale included).
// With --device cuda (or a forced options.gpt) the tiny GPT runs the same variants too.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tools/repro/experiment.h"

namespace mg::tools::repro {

struct E5Options {
  std::int64_t train_chars = 2000000, validation_chars = 10000;
  std::int64_t steps = 200, batch = 64, context = 32;  // B x T = 2048 positions per step
  std::int64_t log_every = 10, eval_every = 50;
  std::int64_t embed_dim = 32, hidden = 128;
  double lr = 2e-3;  // Adam
  std::vector<std::string> variant_ids{"V0", "V2", "V3", "V4", "V5"};
  double static_scale = 128;  // V3's S: the paper's value for bigLSTM
  bool gpt = false;           // the tiny GPT too (on by default with --device cuda)
  nn::GptOptions gpt_options{.block_size = 64, .embed_dim = 128, .heads = 4, .layers = 4};  // vocab from the text
  std::int64_t gpt_steps = 1000;
  double gpt_lr = 1e-3;
  std::uint64_t seed = 0;
  Device device = Device::cpu();
};

// The preset's sizes for a device; seed is the caller's to set.
E5Options e5_options(Preset preset, Device device);

struct E5Result {
  E5Options options;
  std::vector<RunResult> lstm{}, gpt{};  // one per variant; gpt empty unless options.gpt
};

// The mean over the logged steps of the fraction of logit-gradient values zero in f16.
double logit_flush_fraction(const RunResult& run);

// One run of E5 in variant `v`: the char LSTM, or with gpt the tiny GPT. E3 records the histograms
// of the same fp32 LSTM run through it.
RunConfig e5_run_config(const E5Options& options, std::shared_ptr<const TextData> text, const Variant& v,
                        bool gpt = false);

E5Result run_e5(const E5Options& options, std::shared_ptr<const TextData> text,
                const std::function<void(const std::string&)>& progress = {});

// Writes e5_runs.csv and e5_steps.csv, and returns the section.
Section e5_section(const E5Result& result, Report& report);

Experiment e5_experiment();

}  // namespace mg::tools::repro
