// `mixgrad repro`: run the papers' experiments and write a report with tables, CSVs and plots.
//
//   mixgrad repro --experiment all --preset quick --out repro-quick
//   mixgrad repro --experiment E4 --preset full --device cuda --out repro-full --seed 1
//
// Each experiment (E1..E7 of Mixed Precision Training, E8..E11 of the FP8 papers; experiment.h) trains
// the same model in several precision variants (variants.h) from one seed, and fills one section of
// DIR/report.md.
//
// Never lose a run: each experiment finished leaves DIR/EN.manifest.json (manifest.h), and a second
// call with the same --out skips the experiments complete there (same preset, device, seed and
// program version, their files in place) unless --rerun. SIGINT, SIGTERM or SIGUSR1 abandon the
// experiment under way at its runs' next step (stopping.h), keep those finished, say so in one line
// and end the process by the signal (train/stop_signals.h); a second signal ends it at once.
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
  std::string experiment = "all";  // E1..E11, a list of them separated by commas ("E4,E5"), or all
  std::string preset = "quick";  // quick | full
  std::string device = "cpu";  // cpu | cuda
  std::string out = "repro";  // the report's directory (created)
  std::uint64_t seed = 0;
  bool quiet = false;
  bool rerun = false;  // run the experiments complete in `out` again rather than skip them
};

// Every experiment, E1..E11, in order.
std::vector<Experiment> experiments();

// Registers the flags on `command` (the repro subcommand), with help texts and value checks.
void add_repro_flags(CLI::App& command, ReproOptions& options);

// Runs the experiments asked for, in E1..E11's order, and writes the report. Requires options
// checked by the flags (an unknown experiment or preset is an mg::Error); --device cuda without a GPU
// is an mg::Error before anything runs. Returns the path of report.md. A signal (SIGINT, SIGTERM,
// SIGUSR1) ends the process, by that signal, once what was finished is kept.
std::string run_repro(const ReproOptions& options);
// The same, choosing among `all` rather than experiments(): how tests run experiments of their own.
std::string run_repro(const ReproOptions& options, std::vector<Experiment> all);

}  // namespace mg::tools::repro
