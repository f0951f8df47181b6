#include "tools/train_options.h"

#include <CLI/CLI.hpp>

#include <filesystem>

#include "amp/recipe.h"
#include "core/error.h"
#include "core/warning.h"

namespace mg::tools {

void add_train_flags(CLI::App& c, TrainOptions& o) {
  c.add_option("--data", o.data, "Data set: fashion-mnist (/usr/share/datasets/fashion-mnist) or text (the King "
               "James Bible, or --text-file)")->check(CLI::IsMember({"fashion-mnist", "text"}))->capture_default_str();
  c.add_option("--model", o.model, "Model: mlp (784-256-256-10) or cnn (two 3x3 convolutions) for fashion-mnist; "
               "lstm (char LSTM) or gpt (a tiny GPT) for text")
      ->check(CLI::IsMember({"mlp", "cnn", "lstm", "gpt"}))->capture_default_str();
  c.add_option("--precision", o.precision, "Precision recipe: fp32, mixed_float16, mixed_bfloat16, float16_master, "
               "float16_pure or bfloat16_pure (amp/recipe.h)")
      ->check(CLI::IsMember(amp::Recipe::names()))->capture_default_str();
  c.add_option("--device", o.device, "Device: cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  auto* epochs = c.add_option("--epochs", o.epochs, "Train for this many epochs in all (fashion-mnist)")
                     ->check(CLI::PositiveNumber);
  auto* steps = c.add_option("--steps", o.steps, "Train until this many steps in all, counting the steps of a "
                             "resumed checkpoint")->check(CLI::PositiveNumber);
  epochs->excludes(steps);
  c.add_option("--batch", o.batch, "Batch size (default 128 for images, 32 for text)")->check(CLI::PositiveNumber);
  c.add_option("--context", o.context, "Text: characters per training window")
      ->check(CLI::Range(2, 4096))->capture_default_str();
  c.add_option("--optimizer", o.optimizer, "Optimizer: sgd (with momentum), adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))->capture_default_str();
  c.add_option("--lr", o.lr, "Learning rate (default 0.05 for sgd, 1e-3 for adam and adamw)")
      ->check(CLI::PositiveNumber);
  c.add_option("--momentum", o.momentum, "SGD momentum")->check(CLI::Range(0.0, 0.999))->capture_default_str();
  c.add_option("--seed", o.seed, "Seed of the initialization, the shuffling and dropout")->capture_default_str();
  c.add_option("--subset", o.subset, "Train on the first N examples only (characters, for text)")
      ->check(CLI::PositiveNumber);
  c.add_option("--text-file", o.text_file, "Text: train on this plain-text file instead of the King James Bible")
      ->check(CLI::ExistingFile);
  c.add_option("--log", o.log, "Write one CSV row per step: step, loss, lr, scale, skipped, seconds");
  c.add_option("--save", o.save, "Write a checkpoint (safetensors) at the end");
  c.add_option("--resume", o.resume, "Continue from this checkpoint (same data, model, precision and optimizer)")
      ->check(CLI::ExistingFile);
  c.add_option("--summary", o.summary, "Write a JSON summary of the run");
  c.add_flag("--quiet", o.quiet, "No progress output, only the closing line");
}

void finalize(TrainOptions& o) {
  const bool images = o.data == "fashion-mnist";
  MG_CHECK(images == (o.model == "mlp" || o.model == "cnn"),
           "mixgrad train: --model {} does not fit --data {}; use mlp or cnn with fashion-mnist, lstm or gpt with text",
           o.model, o.data);
  MG_CHECK(o.epochs > 0 || o.steps > 0, "mixgrad train: say how long to train: --epochs N or --steps N");
  MG_CHECK(images || o.epochs == 0, "mixgrad train: --epochs needs fashion-mnist; train text with --steps N");
  MG_CHECK(o.text_file.empty() || !images, "mixgrad train: --text-file needs --data text");
  if (o.device == "cuda") {
    check_device_available(Device::cuda(), "mixgrad train --device cuda");
    if (cuda_emulated())
      warn("mixgrad train --device cuda: cuda:0 is the CUDA emulator of this build (-DMG_CUDA=EMULATE), which "
           "runs the GPU kernels on the CPU to check them: a step takes hundreds of times as long as with --device cpu");
  }
  for (const std::string* path : {&o.log, &o.save, &o.summary}) {
    if (path->empty()) continue;
    const std::filesystem::path parent = std::filesystem::path(*path).parent_path();
    MG_CHECK(parent.empty() || std::filesystem::is_directory(parent),
             "mixgrad train: cannot write {}: the directory {} does not exist", *path, parent.string());
  }
  if (o.batch == 0) o.batch = images ? 128 : 32;
  if (o.lr == 0) o.lr = o.optimizer == "sgd" ? 0.05 : 1e-3;
}

}  // namespace mg::tools
