// What `mixgrad repro` keeps of an experiment it finished, so that a second call with the same --out
// skips it: DIR/EN.manifest.json.
//
//   {"format": "mixgrad repro manifest 1", "experiment": "E4", "preset": "quick", "device": "cpu",
//    "seed": 0, "version": "0.1.0", "commit": "31a4d2a323fd", "seconds": 41.2,
//    "finished": "2026-11-28 01:40 UTC", "files": ["e4_sweep_runs.csv", ...], "section": {...}}
//
// It is written (atomically: a temporary file renamed into place) only once the experiment's CSVs,
// plots and section are all in DIR; a run stopped before that leaves none, and the experiment runs
// again. "section" is the report's section itself (tables, verdict, the plots' names and titles), so
// that report.md is made again without running the experiment or gnuplot: the plots' data is in their
// .dat files, not here. An experiment counts as complete when its manifest names the same experiment,
// preset, device, seed and program version (the project's version and its git commit), and every
// file it lists is still there.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tools/repro/report.h"

namespace mg::tools::repro {

// Which program made a report: the CMake project's version and the git commit it was built from.
struct ProgramVersion {
  std::string version{};  // "0.1.0"
  // "31a4d2a323fd"; "31a4d2a323fd-dirty" when the tracked files differed from that commit; "unknown"
  // for a build outside a git checkout (from a tarball).
  std::string commit{};
  std::string text() const;  // "0.1.0 (git 31a4d2a323fd)"
  bool operator==(const ProgramVersion&) const = default;
};

// This program's, found when it was built (tools/repro/program_version.cmake).
ProgramVersion program_version();

// What must be the same for an earlier run of an experiment to stand for this one.
struct RunIdentity {
  std::string experiment{};  // "E4"
  std::string preset{};  // quick | full
  std::string device{};  // cpu | cuda
  std::uint64_t seed = 0;
  ProgramVersion program{};
};

struct Manifest {
  RunIdentity identity{};
  double seconds = 0;  // how long the experiment took
  std::string finished{};  // when it finished: "2026-11-28 01:40 UTC"
  // As the report shows it. Read back, its plots have their name and title, no series: the data is in
  // NAME.dat. The files it needs in DIR (section_files) are listed in the manifest for its reader.
  Section section{};
  std::map<std::string, std::string> not_drawn{};  // the plots without a PNG, and why (Report::not_drawn)
};

// "E4.manifest.json".
std::string manifest_name(std::string_view experiment);

// The files in DIR that `section` shows or links: its CSVs and, per plot, NAME.dat, NAME.gp and,
// unless `not_drawn` names it, NAME.png.
std::vector<std::string> section_files(const Section& section, const std::map<std::string, std::string>& not_drawn);

// Writes DIR/EN.manifest.json: to DIR/EN.manifest.json.tmp.PID first, then renamed into place, so that
// a process ended mid-write leaves no half manifest (only the temporary file, which nothing reads).
// An mg::Error when it cannot be written.
void write_manifest(const std::string& directory, const Manifest& manifest);

// Removes DIR/EN.manifest.json, if there is one: before the experiment runs again, since the files it
// rewrites are no longer those the manifest vouched for (a call stopped or failed midway must not
// leave them looking complete). An mg::Error when it cannot be removed.
void remove_manifest(const std::string& directory, std::string_view experiment);

// What an earlier call into DIR left of an experiment.
struct EarlierRun {
  enum class State {
    none,  // no manifest: it never finished there
    damaged,  // a manifest that cannot be read: not JSON, a field missing or of the wrong type
    different,  // finished with another preset, device, seed or program version
    incomplete,  // a file the manifest lists is missing
    complete,  // the same run, finished, its files in place: it need not run again
  };
  State state = State::none;
  std::string why{};  // what is damaged, different or missing ("seed 1, not 0"); empty for none and complete
  std::optional<Manifest> manifest{};  // when complete
};

// Reads DIR/EN.manifest.json for identity.experiment and compares it with `identity`. Never throws
// for a bad manifest: that is a `damaged` answer.
EarlierRun find_earlier_run(const std::string& directory, const RunIdentity& identity);

}  // namespace mg::tools::repro
