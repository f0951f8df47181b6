// Shared by the repro suites (test_repro, test_repro_report): the data every case trains on,
// loaded once, and small option sets and lookups.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "data/text.h"
#include "tests/testing.h"
#include "tools/repro/e2_master_weights.h"
#include "tools/repro/e4_loss_scaling.h"

namespace mg::testing::repro {

using namespace mg::tools::repro;
namespace fs = std::filesystem;

// The data of every test case: loaded once (reading and standardizing takes a moment).
inline std::shared_ptr<const ImageData> small_fashion() {
  static auto data = load_fashion_mnist_subset(4000, 1000);
  return data;
}

// For the cases that assert no accuracy: few test images, so the final evaluation costs little.
inline std::shared_ptr<const ImageData> tiny_fashion() {
  static auto data = load_fashion_mnist_subset(2000, 100);
  return data;
}

// A character corpus that needs no package: sentences from a small vocabulary, in a fixed
// pseudo-random order (an LCG), so the model has something to learn and every run sees the same text.
inline std::shared_ptr<const TextData> small_text() {
  static auto text = [] {
    const char* words[] = {"the ",    "lord ",  "said ", "unto ", "moses, ", "and ",   "it ", "was ",      "so. ",
                           "Behold ", "light ", "of ",   "day; ", "night ",  "came: ", "in ", "beginning "};
    std::string corpus;
    std::uint32_t state = 12345;
    while (corpus.size() < 60000) {
      state = state * 1664525u + 1013904223u;
      corpus += words[(state >> 16) % 17];
    }
    return text_subset(data::TextCorpus(corpus, "synthetic"), 60000, 6000);
  }();
  return text;
}

inline E2Options small_e2() {
  E2Options o;
  o.steps = 300;
  o.batch = 32;
  o.log_every = 10;
  o.eval_every = 50;
  o.variant_ids = {"V0", "V1", "V2"};
  return o;
}

inline E4Options small_e4() {
  E4Options o;
  o.steps = 120;
  o.batch = 32;
  o.log_every = 20;
  o.ks = {0, 16};
  o.variant_ids = {"V0", "V2", "V3", "V4"};
  o.organic = false;
  return o;
}

inline const RunResult& by_id(const std::vector<RunResult>& runs, const std::string& id) {
  for (const RunResult& r : runs)
    if (r.variant.id == id) return r;
  FAIL("no run of variant " << id);
  return runs.front();
}

inline std::string read(const fs::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

inline bool have_gnuplot() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

}  // namespace mg::testing::repro
