// `mixgrad repro`: run the papers' experiments and write a report with tables, CSVs and plots.
//
//   mixgrad repro --experiment all --preset quick --out repro-quick
//   mixgrad repro --experiment E4 --preset full --device cuda --out repro-full --seed 1
//
// Each experiment (E1..E7 of Mixed Precision Training, E8..E11 of the FP8 papers; experiment.h) trains
// the same model in several precision variants (variants.h) from one seed, and fills one section of
// DIR/report.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/repro/experiment.h"

namespace CLI {
class App;
}

namespace mg::tools::repro {

struct ReproOptions {
  std::string experiment = "all";  // E1..E11 or all
  std::string preset = "quick";  // quick | full
  std::string device = "cpu";  // cpu | cuda
  std::string out = "repro";  // the report's directory (created)
  std::uint64_t seed = 0;
  bool quiet = false;
};

// Every experiment, E1..E11, in order.
std::vector<Experiment> experiments();

// Registers the flags on `command` (the repro subcommand), with help texts and value checks.
void add_repro_flags(CLI::App& command, ReproOptions& options);

// Runs the experiments asked for and writes the report. Requires options checked by the flags
// (an unknown experiment or preset is an mg::Error); --device cuda without a GPU is an mg::Error
// before anything runs. Returns the path of report.md.
std::string run_repro(const ReproOptions& options);

}  // namespace mg::tools::repro
