// E5, the paper's Figure 5 (bigLSTM): a language model needs loss scaling.
//
// A character-level LSTM on the King James Bible, the loss the mean cross entropy over batch x
// time as in the paper, trained with Adagrad (the paper's optimizer for bigLSTM) and with Adam, in
// V0 fp32, V2 float16_master without scaling and V3 with the paper's S = 128. The mean over B x T
// positions puts a 1 / (B T) factor on every logit gradient (softmax - one-hot) / (B T): with
// B T = 4096, a character the model gives probability below 4096 x 2^-25 (about 1.2e-4) has a
// gradient that rounds to zero in f16, and a class whose every logit gradient flushes gets no
// gradient at all in its row of the head.
// Measured at every logged step (not merged over the run): the training-loss gap to fp32 on the
// same batch (Figure 5 is a training curve), the fraction of logit-gradient and of gate-gradient
// values that are zero in f16 (what cross entropy hands back and what the LSTM's gates receive,
// loss scale included), and the rows of the head whose weight gradient is entirely zero; validation
// bits per character at the evaluations.
// With --device cuda (or a forced options.gpt) the tiny GPT runs the same variants with Adam.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/repro/experiment.h"

namespace mg::tools::repro {

struct E5Options {
  std::int64_t train_chars = 2000000, validation_chars = 10000;
  std::int64_t steps = 600, batch = 128, context = 32;  // B x T = 4096 positions per step
  std::int64_t log_every = 10, eval_every = 100;
  std::int64_t embed_dim = 32, hidden = 64;
  // The optimizers, each with its rate: Adagrad as the paper's bigLSTM; the full preset adds Adam,
  // as later practice (the quick one has no time for both).
  std::vector<std::string> optimizers{"adagrad"};
  double adagrad_lr = 0.05, adam_lr = 3e-3;
  std::vector<std::string> variant_ids{"V0", "V2", "V3"};
  double static_scale = 128;  // V3's S: the paper's value for bigLSTM
  bool gpt = false;  // the tiny GPT too (on by default with --device cuda)
  nn::GptOptions gpt_options{.block_size = 64, .embed_dim = 128, .heads = 4, .layers = 4};  // vocab from the text
  std::int64_t gpt_steps = 1000;
  double gpt_lr = 1e-3;
  std::uint64_t seed = 0;
  Device device = Device::cpu();
};

// The preset's sizes for a device (the tiny GPT on a GPU only), run from `seed`.
E5Options e5_options(Preset preset, Device device, std::uint64_t seed);

// One model trained with one optimizer in every variant.
struct E5Model {
  std::string name;  // "char LSTM, Adagrad"
  std::string optimizer;  // "adagrad"
  std::vector<RunResult> runs{};  // one per variant, options.variant_ids order
  // Where the LSTM's gate gradient is in StepLog::activation_zero_in_f16_by_entry (-1: not found, the GPT).
  int gate_entry = -1;
};

struct E5Result {
  E5Options options;
  std::vector<E5Model> models{};  // the LSTM with each optimizer, then the GPT when options.gpt
};

// The mean over the logged steps of the fraction of logit-gradient values zero in f16.
double logit_flush_fraction(const RunResult& run);

// One run of E5 in variant `v`: the char LSTM with `optimizer`, or with gpt the tiny GPT (Adam). E3
// records the histograms of an fp32 LSTM run through it.
RunConfig e5_run_config(const E5Options& options, std::shared_ptr<const TextData> text, const Variant& v,
                        const std::string& optimizer = "adam", bool gpt = false);

E5Result run_e5(const E5Options& options, std::shared_ptr<const TextData> text, const Progress& progress = {});

// The training-loss gap of `run` to `fp32` (same batches), step by step: loss - fp32's loss.
std::vector<double> loss_gap(const RunResult& run, const RunResult& fp32);

// Writes e5_runs.csv and e5_steps.csv, and returns the section.
Section e5_section(const E5Result& result, Report& report);

extern const Heading kE5LanguageModel;

}  // namespace mg::tools::repro
