// The run that fuzz_checkpoint resumes from each input, and that make_corpus.cpp saves its seed
// checkpoints from: the model of tests/fixtures/checkpoint_v1_float16_master.safetensors (f16
// Linear(4, 3), ReLU, Linear(3, 2)) under float16_master, AdamW with f32 masters, a dynamic
// GradScaler and its ScaleMonitor, as mixgrad train builds them (train::Trainer), and the two data
// sources whose state a checkpoint's "extra.data.*" entries restore: a DataLoader over 6 examples and
// a TextBatcher over a short text. Everything is made the same way each time, from fixed seeds.
#pragma once

#include <memory>

#include "core/factory.h"
#include "core/generator.h"
#include "data/batches.h"
#include "data/text.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "train/trainer.h"

namespace mg::fuzz {

struct CheckpointRun {
  static constexpr std::int64_t kExamples = 6;

  Generator generator{5};  // the weights and the examples; nothing here draws from the default generator
  train::Trainer trainer{std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 3, true, generator),
                                                          std::make_shared<nn::ReLU>(),
                                                          std::make_shared<nn::Linear>(3, 2, true, generator)),
                         {.recipe = amp::Recipe::parse("float16_master"),
                          .optimizer = {.name = "adamw", .lr = 0.01},
                          .monitor = {.error_on_collapse = true}}};
  data::DataLoader loader{randn({kExamples, 4}, generator),
                          randint(0, 2, {kExamples}, generator),
                          {.batch_size = 4, .seed = 1}};
  data::TextCorpus corpus{"In the beginning God created the heaven and the earth."};
  data::TextBatcher text{corpus.train(), /*batch_size=*/2, /*context=*/8, /*seed=*/1};
};

}  // namespace mg::fuzz
