// The flags of `mixgrad train`, their defaults, and the checks made before any work starts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace mg::amp {
struct Recipe;
}

namespace mg::tools {

// mixgrad train's SGD learning rate when --lr is not given: 0.05, five times optim::SgdOptions' 0.01,
// so that its small models (the MLP, the CNN, the character LSTM and GPT) learn in the few hundred
// steps of a first run. The other optimizers take their own defaults (train::default_lr).
inline constexpr double kTrainSgdLr = 0.05;

// The length of a text run that names none (about 4 minutes of the LSTM on one CPU core).
inline constexpr std::int64_t kDefaultTextSteps = 1000;
// Steps between inspections when --inspect is given without --inspect-every.
inline constexpr std::int64_t kDefaultInspectEvery = 100;

struct TrainOptions {
  std::string data = "fashion-mnist";  // fashion-mnist | text
  std::string model = "mlp";  // a name of tools::model_kinds() (tools/run_setup.h) that fits `data`
  std::string precision = "fp32";  // an amp::Recipe name
  std::string device = "cpu";  // cpu | cuda
  std::int64_t threads = 0;  // CPU kernels' threads (mg::set_num_threads); 0: MG_NUM_THREADS or every core
  bool tf32 = false;  // cuda: f32 GEMMs on Tensor Cores in TF32 (kernels::set_allow_tf32)
  std::int64_t epochs = 0;  // total epochs (fashion-mnist); 0: use --steps
  std::int64_t steps = 0;  // total steps, counting those before --resume; 0: use --epochs
      // (neither: 1 epoch of images, kDefaultTextSteps of text)
  std::int64_t batch = 0;  // 0: 128 for images, 32 for text
  std::int64_t context = 64;  // text: characters per training window
  std::string optimizer = "sgd";  // sgd | adam | adamw | adagrad
  std::optional<double> lr;  // unset: kTrainSgdLr for sgd, the optimizer's own default otherwise
  double momentum = 0.9;  // sgd only
  std::string update_rounding = "nearest";  // nearest | stochastic | kahan: the pure recipes' updates
  std::string state_dtype = "parameter";  // parameter | f32: adam's and adamw's moments
  // The FP4 recipes' ingredients (nvfp4, mxfp4; autograd/fp4.h), each a switch for ablations.
  std::string fp4_hadamard = "random";  // random | deterministic | off: on the weight gradient's operands
  std::string fp4_gradient_rounding = "stochastic";  // stochastic | nearest: dy's
  std::string fp4_weight_blocks = "2d";  // 2d | 1d: NVFP4's 16x16 weight blocks, or 1x16
  std::optional<std::int64_t> bf16_last_layers;  // unset: the recipe's (the head)
  std::uint64_t seed = 0;
  std::int64_t subset = 0;  // train on the first N examples (characters, for text); 0: all
  std::int64_t test_subset = 0;  // score on the first N test images (validation characters, for text); 0: all
  std::string text_file;  // text: a plain-text file instead of the King James Bible
  std::string log;  // CSV: one row per step
  std::string save;  // checkpoint written at the end, and when a signal stops the run
  std::int64_t save_every = 0;  // steps between checkpoints into checkpoint_dir; 0: none
  std::int64_t keep = 2;  // the newest checkpoints of checkpoint_dir kept; 0: all
  std::string checkpoint_dir = "checkpoints";  // where --save-every writes step-<S>.safetensors
  std::string resume;  // checkpoint to continue from: a file, or a checkpoint_dir (its newest)
  std::string stop_signals = "INT,TERM,USR1";  // signals that stop the run cleanly; empty: none
  std::string summary;  // JSON summary of the run
  bool quiet = false;  // no progress output, only the closing line
  std::string graph;  // the first step drawn as Graphviz DOT here (and its .svg when `dot` is installed)
  // The op profile (train/op_profile.h): a table per op and phase at the end, the Chrome trace here.
  std::string profile;  // "": no profile
  // The precision inspector (train/precision_inspector.h): every inspect_every steps, per layer, the
  // shares flushed / subnormal / overflowing in f16, bf16, E4M3, E5M2, written to the CSV `inspect`
  // with plots beside it. --inspect alone inspects every kDefaultInspectEvery steps.
  std::string inspect;  // "": no inspector at all
  std::int64_t inspect_every = 0;
  // Data-parallel runs (under mpirun, train/data_parallel.h): --batch is the global batch.
  std::int64_t bucket_kb = 256;  // gradient bytes per all-reduce bucket, in KiB
  std::string allreduce_dtype = "f32";  // f32 | f16 | bf16: the gradients' dtype on the wire
  // Not a flag: the words the program was started with, for the line that says how to resume.
  std::vector<std::string> command_line;
};

// Registers every flag on `command` (the train subcommand), with its help text and value checks.
void add_train_flags(CLI::App& command, TrainOptions& options);
// The checks that span several flags (a model that fits the data, --epochs or --steps, files
// that must exist); fills the defaults that depend on other flags. Throws mg::Error.
void finalize(TrainOptions& options);
// The recipe of --precision with the flags that adjust it (the FP4 switches, --seed for its streams).
amp::Recipe recipe_for(const TrainOptions& options);
// Every flag that shapes a run, with its value, in one line: the ranks of a data-parallel job check
// that they were all given the same (dist::check_same_on_every_rank).
std::string describe(const TrainOptions& options);

}  // namespace mg::tools
