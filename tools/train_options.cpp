#include "tools/train_options.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <tuple>

#include "amp/recipe.h"
#include "core/error.h"
#include "core/warning.h"
#include "kernels/threads.h"
#include "tools/flag_checks.h"
#include "tools/run_setup.h"
#include "train/stop_signals.h"
#include "train/trainer.h"  // default_lr

namespace mg::tools {

void add_train_flags(CLI::App& c, TrainOptions& o) {
  // A flag given twice takes its last value, so a script's defaults can be overridden by the
  // arguments it passes on (scripts/run --optimizer sgd).
  c.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  c.add_option("--data", o.data,
               "Data set: fashion-mnist (/usr/share/datasets/fashion-mnist) or text (the King "
               "James Bible, or --text-file)")
      ->check(CLI::IsMember({"fashion-mnist", "text"}))
      ->capture_default_str();
  c.add_option("--model", o.model, "Model: " + models_help())
      ->check(CLI::IsMember(model_names()))
      ->capture_default_str();
  c.add_option("--precision", o.precision,
               "Precision recipe: fp32, mixed_float16, mixed_bfloat16, float16_master, "
               "float16_pure, bfloat16_pure, or FP8: fp8_delayed, fp8_current, fp8_block, mxfp8 (amp/recipe.h)")
      ->check(CLI::IsMember(amp::Recipe::names()))
      ->capture_default_str();
  c.add_option("--device", o.device, "Device: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  c.add_option("--threads", o.threads,
               "CPU threads for the CPU kernels (default: MG_NUM_THREADS, else every core "
               "this process may use); results are the same bits on any count (kernels/threads.h)")
      ->check(whole_number_in(1, 1024));
  c.add_flag("--tf32", o.tf32,
             "With --device cuda: run the f32 GEMMs on Tensor Cores in TF32 (operands rounded to "
             "10 mantissa bits, sums in f32; about 7x the f32 rate of an H100), as PyTorch's allow_tf32. Off: fp32 "
             "means fp32");
  auto* epochs = c.add_option("--epochs", o.epochs,
                              "Train for this many epochs in all (fashion-mnist; the default "
                              "when no length is given is 1 epoch)")
                     ->check(whole_number_in(1));
  auto* steps = c.add_option("--steps", o.steps,
                             fmt::format("Train until this many steps in all, counting the steps "
                                         "of a resumed checkpoint (text: default {})",
                                         kDefaultTextSteps))
                    ->check(whole_number_in(1));
  epochs->excludes(steps);
  c.add_option("--batch", o.batch, "Batch size (default 128 for images, 32 for text)")->check(whole_number_in(1));
  c.add_option("--context", o.context, "Text: characters per training window (2 to 4096)")
      ->check(whole_number_in(2, 4096))
      ->capture_default_str();
  c.add_option("--optimizer", o.optimizer, "Optimizer: sgd (with momentum), adam, adamw or adagrad")
      ->check(CLI::IsMember({"sgd", "adam", "adamw", "adagrad"}))
      ->capture_default_str();
  c.add_option_function<double>(
       "--lr", [&o](const double& lr) { o.lr = lr; },
       fmt::format("Learning rate, a finite number >= 0 (default {} for sgd, {} for adam and adamw, "
                   "{} for adagrad; 0 runs forward and backward but leaves the weights as they are)",
                   kTrainSgdLr, train::default_lr("adam"), train::default_lr("adagrad")))
      ->check(finite_number_in(0, std::numeric_limits<double>::max(), "a finite learning rate >= 0"));
  c.add_option("--momentum", o.momentum, "SGD momentum, in [0, 0.999]")
      ->check(finite_number_in(0, 0.999, "a momentum in [0, 0.999]"))
      ->capture_default_str();
  c.add_option("--update-rounding", o.update_rounding,
               "How float16_pure and bfloat16_pure store each weight update, having no f32 master: nearest "
               "(updates below half an ulp are lost), stochastic (unbiased; words from --seed) or kahan (a "
               "16-bit compensation buffer, 2 bytes a parameter)")
      ->check(CLI::IsMember({"nearest", "stochastic", "kahan"}))
      ->capture_default_str();
  c.add_option("--state-dtype", o.state_dtype,
               "Adam's and AdamW's moments: in the parameter's dtype (bf16 under bfloat16_pure), or f32 (12 bytes a "
               "bf16 parameter instead of 8)")
      ->check(CLI::IsMember({"parameter", "f32"}))
      ->capture_default_str();
  c.add_option("--fp4-hadamard", o.fp4_hadamard,
               "nvfp4 and mxfp4: the 16x16 Hadamard transform on both operands of the weight-gradient GEMM, with "
               "random signs (from --seed), all signs +1, or off")
      ->check(CLI::IsMember({"random", "deterministic", "off"}))
      ->capture_default_str();
  c.add_option("--fp4-gradient-rounding", o.fp4_gradient_rounding,
               "nvfp4 and mxfp4: how the output gradient is rounded to FP4 (stochastically, from --seed, or to "
               "nearest; every other operand is rounded to nearest)")
      ->check(CLI::IsMember({"stochastic", "nearest"}))
      ->capture_default_str();
  c.add_option("--fp4-weight-blocks", o.fp4_weight_blocks,
               "nvfp4: one scale per 16x16 weight block (2d: W and W^T quantise alike) or per 1x16 (1d)")
      ->check(CLI::IsMember({"2d", "1d"}))
      ->capture_default_str();
  c.add_option("--bf16-last-layers", o.bf16_last_layers,
               "FP8 and FP4 recipes: how many Linear layers, counted from the model's last, stay in bf16 (default: "
               "the recipe's, 1 for nvfp4 and mxfp4, the head; 0 for the FP8 recipes)")
      ->check(whole_number_in(0));
  c.add_option("--seed", o.seed, "Seed of the initialization, the shuffling and dropout")
      ->check(seed_value())
      ->capture_default_str();
  c.add_option("--subset", o.subset, "Train on the first N examples only (characters, for text)")
      ->check(whole_number_in(1));
  c.add_option("--test-subset", o.test_subset,
               "Score on the first N test images only (validation characters, for text; default: all)")
      ->check(whole_number_in(2));
  c.add_option("--text-file", o.text_file, "Text: train on this plain-text file instead of the King James Bible")
      ->check(CLI::ExistingFile);
  c.add_option("--log", o.log, "Write one CSV row per step: step, loss, lr, scale, skipped, seconds");
  c.add_option("--save", o.save,
               "Write a checkpoint (safetensors) at the end, and when a signal of --stop-signals stops the run");
  auto* save_every = c.add_option("--save-every", o.save_every,
                                  "Also write a checkpoint every N steps, and at the end, into --checkpoint-dir as "
                                  "step-<S>.safetensors (resume with --resume DIR)")
                         ->check(whole_number_in(1));
  c.add_option("--keep", o.keep,
               "With --save-every: keep the newest K checkpoints (0: all); an older one is deleted only once a "
               "newer one is complete")
      ->check(whole_number_in(0))
      ->needs(save_every)
      ->capture_default_str();
  c.add_option("--checkpoint-dir", o.checkpoint_dir,
               "With --save-every: the directory of the checkpoints (created; its parent must exist)")
      ->needs(save_every)
      ->capture_default_str();
  c.add_option("--resume", o.resume,
               "Continue from this checkpoint (same data, model, precision and optimizer), or from the newest "
               "readable checkpoint of a --checkpoint-dir")
      ->check(CLI::ExistingPath);
  c.add_option("--stop-signals", o.stop_signals,
               "Signals that stop the run cleanly: the step finishes, the checkpoint is written (--save, else "
               "--save-every's), a line says how to resume, and the program ends as the signal would have "
               "(status 128 + signal); a second signal ends it at once. Names separated by commas; '' for none")
      ->capture_default_str();
  c.add_option("--summary", o.summary, "Write a JSON summary of the run");
  c.add_flag("--quiet", o.quiet, "No progress output, only the closing line");
  c.add_option("--graph", o.graph,
               "Draw the first training step in FILE as Graphviz DOT (ops with their layer scopes, tensors coloured "
               "by dtype, autocast's casts, saved bytes, loss scale, masters), and in FILE's name with .svg when "
               "the `dot` program (graphviz) is installed; docs/step-graph/ shows two");
  c.add_option("--profile", o.profile,
               "Profile every step after the first, op by op (train/op_profile.h): at the end, a table of each op's "
               "calls, time and bytes per step in forward, backward and update, and the first three profiled steps "
               "as a Chrome trace in FILE (e.g. profile.json; open it in ui.perfetto.dev or chrome://tracing). On a "
               "GPU the ops are timed by CUDA events, read once a step: one host wait a step, so the run is slower");
  c.add_option("--inspect", o.inspect,
               fmt::format("Inspect the run's precision: every --inspect-every steps (default {}), per layer, the "
                           "activations, their gradients, the weights, their gradients and the updates: amax and the "
                           "shares zero, flushed to zero, subnormal and overflowing in f16, bf16, E4M3 and E5M2, one "
                           "CSV row per layer, kind and step into this file, with heatmaps and histograms (PNG) "
                           "beside it; a skipped step's first inf/NaN op and layer are named "
                           "(train/precision_inspector.h)",
                           kDefaultInspectEvery));
  c.add_option("--inspect-every", o.inspect_every,
               "With --inspect: steps between inspections (the first step, then "
               "every N-th)")
      ->check(whole_number_in(1));
  c.add_option("--bucket-kb", o.bucket_kb,
               "Under mpirun (data-parallel): KiB of gradients per all-reduce bucket; "
               "each bucket is sent as soon as backward has its gradients")
      ->check(whole_number_in(1, 1 << 20))
      ->capture_default_str();
  c.add_option("--allreduce-dtype", o.allreduce_dtype,
               "Under mpirun (data-parallel): the gradients' dtype on the "
               "wire: f32, or f16 / bf16 for half the bytes (summed in f32, rounded to it)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->capture_default_str();
}

std::string describe(const TrainOptions& o) {
  return fmt::format(
      "--data {} --model {} --precision {} --device {} --tf32 {} --epochs {} --steps {} --batch {} "
      "--context {} --optimizer {} --lr {} --momentum {} --update-rounding {} --seed {} --subset {} "
      "--test-subset {} --text-file '{}' --resume '{}' --bucket-kb {} --allreduce-dtype {} --state-dtype {} "
      "--fp4-hadamard {} --fp4-gradient-rounding {} --fp4-weight-blocks {} --bf16-last-layers {}",
      o.data, o.model, o.precision, o.device, o.tf32, o.epochs, o.steps, o.batch, o.context, o.optimizer,
      o.lr.value_or(0), o.momentum, o.update_rounding, o.seed, o.subset, o.test_subset, o.text_file, o.resume,
      o.bucket_kb, o.allreduce_dtype, o.state_dtype, o.fp4_hadamard, o.fp4_gradient_rounding, o.fp4_weight_blocks,
      o.bf16_last_layers.value_or(-1));
}

amp::Recipe recipe_for(const TrainOptions& o) {
  amp::Recipe recipe = amp::Recipe::parse(o.precision);
  if (!recipe.fp8) return recipe;
  recipe.fp8->seed = o.seed;
  if (o.bf16_last_layers) recipe.fp8->bf16_last_layers = static_cast<int>(*o.bf16_last_layers);
  recipe.fp8->hadamard = o.fp4_hadamard == "random"          ? HadamardMode::Random
                         : o.fp4_hadamard == "deterministic" ? HadamardMode::Deterministic
                                                             : HadamardMode::Off;
  recipe.fp8->stochastic_gradients = o.fp4_gradient_rounding == "stochastic";
  recipe.fp8->weight_blocks_2d = o.fp4_weight_blocks == "2d";
  return recipe;
}

void finalize(TrainOptions& o) {
  const bool images = o.data == "fashion-mnist";
  MG_CHECK(images == (model_kind(o.model).data == ModelData::Images),
           "mixgrad train: --model {} does not fit --data {}; use {}", o.model, o.data, models_help());
  MG_CHECK(images || o.epochs == 0, "mixgrad train: --epochs needs fashion-mnist; train text with --steps N");
  if (o.epochs == 0 && o.steps == 0) (images ? o.epochs : o.steps) = images ? 1 : kDefaultTextSteps;
  MG_CHECK(o.text_file.empty() || !images, "mixgrad train: --text-file needs --data text");
  MG_CHECK(
      images || o.test_subset == 0 || o.test_subset > o.context,
      "mixgrad train --test-subset {}: text is scored in windows of --context + 1 = {} characters; give at least {}",
      o.test_subset, o.context + 1, o.context + 1);
  MG_CHECK(!o.tf32 || o.device == "cuda", "mixgrad train: --tf32 changes only the f32 GEMMs of a GPU (the CPU "
                                          "multiplies in f32); add --device cuda, or drop --tf32");
  if (optim::parse_update_rounding(o.update_rounding) != optim::UpdateRounding::Nearest) {
    const amp::Recipe recipe = amp::Recipe::parse(o.precision);
    MG_CHECK(!recipe.master_weights && is_low_precision(recipe.parameter_dtype),
             "mixgrad train: --update-rounding {} rounds updates into 16-bit weights, which only float16_pure and "
             "bfloat16_pure train without f32 copies; --precision {} updates {}. Add --precision bfloat16_pure, or "
             "drop --update-rounding",
             o.update_rounding, o.precision,
             recipe.master_weights ? "f32 master weights" : fmt::format("{} weights", recipe.parameter_dtype));
  }
  const amp::Recipe recipe = amp::Recipe::parse(o.precision);
  const bool fp4 = recipe.fp8 && is_fp4(recipe.fp8->scaling);
  for (const auto& [flag, value, fallback] :
       {std::tuple<const char*, const std::string&, const char*>{"--fp4-hadamard", o.fp4_hadamard, "random"},
        {"--fp4-gradient-rounding", o.fp4_gradient_rounding, "stochastic"},
        {"--fp4-weight-blocks", o.fp4_weight_blocks, "2d"}})
    MG_CHECK(fp4 || value == fallback,
             "mixgrad train: {} {} changes an ingredient of the FP4 recipes, and --precision {} has none; add "
             "--precision nvfp4 or mxfp4, or drop {}",
             flag, value, o.precision, flag);
  MG_CHECK(o.fp4_weight_blocks == "2d" || recipe.name != "mxfp4",
           "mixgrad train: --fp4-weight-blocks 1d is NVFP4's switch; MXFP4's weights always have 1x32 blocks. Drop it, "
           "or use --precision nvfp4");
  // The char LSTM's only nn::Linear is its head (its recurrence is one op of its own): the FP4 recipes keep
  // the head in bf16, so nothing would run in FP4 (amp::Recipe::prepare refuses it too, after loading).
  MG_CHECK(!fp4 || o.model != "lstm" || o.bf16_last_layers.value_or(1) == 0,
           "mixgrad train: --precision {} runs the GEMMs of nn::Linear layers in FP4 but the last, and the char LSTM's "
           "only Linear is its head (its recurrence runs as one op in bf16): nothing would run in FP4. Use --model "
           "gpt, or add --bf16-last-layers 0 to put the head in FP4",
           o.precision);
  MG_CHECK(!o.bf16_last_layers || recipe.fp8,
           "mixgrad train: --bf16-last-layers keeps Linear layers out of FP8 or FP4, and --precision {} runs none in "
           "them; add an FP8 or FP4 --precision, or drop it",
           o.precision);
  MG_CHECK(o.state_dtype == "parameter" || o.optimizer == "adam" || o.optimizer == "adamw",
           "mixgrad train: --state-dtype {} sets the dtype of Adam's moments, and --optimizer {} has none; add "
           "--optimizer adam or adamw, or drop --state-dtype",
           o.state_dtype, o.optimizer);
  if (o.threads > 0) mg::set_num_threads(static_cast<int>(o.threads));
  if (o.device == "cuda") {
    check_device_available(Device::cuda(), "mixgrad train --device cuda");
    if (cuda_emulated())
      warn(
          "mixgrad train --device cuda: cuda:0 is the CUDA emulator of this build (-DMG_CUDA=EMULATE), which "
          "runs the GPU kernels on the CPU to check them: a step takes hundreds of times as long as with --device cpu");
  }
  if (!o.stop_signals.empty()) train::parse_signals(o.stop_signals);  // an unknown name is refused here
  // Each file (and the directory of --save-every) goes into a directory that must exist already.
  MG_CHECK(o.inspect_every == 0 || !o.inspect.empty(),
           "mixgrad train: --inspect-every needs --inspect FILE, the CSV the inspector writes (its plots go beside "
           "it)");
  if (!o.inspect.empty() && o.inspect_every == 0) o.inspect_every = kDefaultInspectEvery;
  std::vector<std::string> outputs{o.log, o.save, o.summary, o.inspect};
  if (o.save_every > 0) {
    std::string directory = o.checkpoint_dir;
    while (directory.size() > 1 && directory.back() == '/') directory.pop_back();
    outputs.push_back(directory);
  }
  for (const std::string& path : outputs) {
    if (path.empty()) continue;
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    MG_CHECK(parent.empty() || std::filesystem::is_directory(parent),
             "mixgrad train: cannot write {}: the directory {} does not exist", path, parent.string());
  }
  if (!o.profile.empty()) {  // --profile: the trace's file
    const std::filesystem::path trace(o.profile);
    MG_CHECK(!std::filesystem::is_directory(trace),
             "mixgrad train: --profile {} is a directory; name the trace file to write (e.g. profile.json)", o.profile);
    MG_CHECK(trace.parent_path().empty() || std::filesystem::is_directory(trace.parent_path()),
             "mixgrad train: cannot write {}: the directory {} does not exist", o.profile,
             trace.parent_path().string());
  }
  if (!o.graph.empty()) {  // --graph: the DOT file, and its .svg beside it
    const std::filesystem::path graph(o.graph);
    MG_CHECK(graph.extension() != ".svg" && !std::filesystem::is_directory(graph),
             "mixgrad train: --graph {} must name the DOT file to write (e.g. step.dot); the SVG goes beside it",
             o.graph);
    MG_CHECK(graph.parent_path().empty() || std::filesystem::is_directory(graph.parent_path()),
             "mixgrad train: cannot write {}: the directory {} does not exist", o.graph, graph.parent_path().string());
  }
  if (o.batch == 0) o.batch = images ? 128 : 32;
  if (!o.lr) o.lr = o.optimizer == "sgd" ? kTrainSgdLr : train::default_lr(o.optimizer);
}

}  // namespace mg::tools
