// mixgrad: the command-line program.
//
//   mixgrad train --data fashion-mnist --model cnn --precision mixed_float16 --epochs 2
//   mixgrad train --help            every flag, with its default
//   mixgrad repro --experiment all --preset quick --out repro-quick   the paper's experiments, as a report
//
// Bad flags are refused before any work starts, and an mg::Error during the run (a missing data
// file, a checkpoint that does not fit, a run that diverged) ends it: either way one `error: ...`
// line on stderr and exit status 1. Under mpirun (data-parallel training) an error on any rank ends
// every rank: `error (rank R of N): ...`, and mpirun exits with a non-zero status.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <string>

#include "core/error.h"
#include "core/output_file.h"
#include "dist/process_group.h"
#include "tools/repro/repro.h"
#include "tools/train.h"

namespace {

// One `error:` line and status 1. In a data-parallel job (under mpirun) the error may be this rank's
// alone while the others wait for it in a collective: it ends the whole job (dist::abort_job).
int fail(const std::string& message) {
  if (mg::dist::launched_world_size() > 1) mg::dist::abort_job(message);
  fmt::print(stderr, "error: {}\n", message);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mixgrad: mixed-precision training in C++ (Micikevicius et al., ICLR 2018)"};
  app.require_subcommand(1);
  mg::tools::TrainOptions options;
  CLI::App* train = app.add_subcommand("train", "Train a model on Fashion-MNIST or text in a precision recipe");
  mg::tools::add_train_flags(*train, options);
  mg::tools::repro::ReproOptions repro_options;
  CLI::App* repro = app.add_subcommand("repro",
                                       "Reproduce the paper's experiments: a report with tables, CSVs and plots");
  mg::tools::repro::add_repro_flags(*repro, repro_options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);  // --help: the text, exit status 0
  } catch (const CLI::ParseError& error) {
    // One line, as for every other bad value: the flag, the value and what is allowed.
    const std::string command = app.get_subcommands().empty() ? "mixgrad"
                                                              : "mixgrad " + app.get_subcommands().front()->get_name();
    fmt::print(stderr, "error: mixgrad: {}; see {} --help\n", error.what(), command);
    return 1;
  }

  try {
    if (repro->parsed()) {
      const std::string report = mg::tools::repro::run_repro(repro_options);
      fmt::print("mixgrad repro: wrote {}\n", report);
      return 0;
    }
    options.command_line.assign(argv, argv + argc);
    mg::tools::finalize(options);
    const mg::tools::TrainSummary summary = mg::tools::train(options);
    if (!options.summary.empty() && summary.rank == 0) {
      mg::write_file(options.summary, summary.to_json(), "mixgrad train: the summary (--summary)");
    }
    if (summary.rank == 0) fmt::print("{}\n", summary.to_line());
  } catch (const mg::Error& error) {
    return fail(error.what());
  } catch (const std::exception& error) {  // out of memory, a file system error: still one line, status 1
    return fail(std::string("mixgrad: ") + error.what());
  }
  return 0;
}
