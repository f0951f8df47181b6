// Shared by the suites that train a small model with train::Trainer (test_train_trainer,
// test_precision_inspector): the model and its batches.
#pragma once

#include <memory>
#include <vector>

#include "tests/testing.h"

namespace mg::testing {

// Layers "0" Flatten, "1" Linear(6, 16), "2" ReLU, "3" Linear(16, 4).
inline std::shared_ptr<nn::Module> small_mlp() {
  Generator generator(5);
  return nn::mlp({6, 16, 4}, generator);
}

struct Batch {
  Tensor x, y;
};

// `count` batches of 8 inputs uniform in [-spread, spread] and labels in [0, 4).
inline std::vector<Batch> batches(int count, double spread = 2.0) {
  Generator generator(9);
  std::vector<Batch> all;
  for (int i = 0; i < count; ++i)
    all.push_back({uniform({8, 6}, -spread, spread, generator), randint(0, 4, {8}, generator)});
  return all;
}

}  // namespace mg::testing
