#include "tools/repro/experiment.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

namespace mg::tools::repro {

std::shared_ptr<const ImageData> Context::fashion_mnist(std::int64_t train_examples, std::int64_t test_examples) {
  auto& slot = fashion_[{train_examples, test_examples}];
  if (!slot) slot = load_fashion_mnist_subset(train_examples, test_examples);
  return slot;
}

std::shared_ptr<const TextData> Context::kjv(std::int64_t train_chars, std::int64_t validation_chars) {
  if (!kjv_corpus_) kjv_corpus_ = std::make_shared<const data::TextCorpus>(data::kjv_corpus());
  return text_subset(*kjv_corpus_, train_chars, validation_chars);
}

void Context::progress(const std::string& line) const {
  static const auto start = std::chrono::steady_clock::now();
  if (quiet) return;
  fmt::print("[{:6.1f} s] {}\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), line);
  std::fflush(stdout);  // progress in a pipe or a log appears as it happens
}

}  // namespace mg::tools::repro
