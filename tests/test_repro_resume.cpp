// `mixgrad repro` never loses a run: each experiment finished leaves a manifest (tools/repro/manifest.h),
// a second call with the same --out skips what is complete there, and a signal stops a call keeping
// what it finished (tools/repro/stopping.h).
//
// The manifest's rules run in-process on two experiments that train nothing (each writes a CSV that
// says how many times it ran, and a plot), so that they take a second; the signal and the resume that
// follows run the mixgrad program on two real experiments of the quick preset (E7 and E10, about a
// minute in all on 2 cores), stopped at a step it announces (MG_TEST_PAUSE, core/test_pause.h).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/warning.h"
#include "tests/program_runner.h"
#include "tests/repro_fixtures.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"
#include "tools/repro/manifest.h"
#include "tools/repro/repro.h"

using namespace mg;
using namespace mg::tools::repro;
using namespace mg::testing::repro;
using mg::testing::Spawned;
using mg::testing::TempDir;
using nlohmann::json;

namespace {

// E1 and E2 as experiments that train nothing: each counts its runs in `runs`, writes eN_runs.csv with
// that count, and one plot, eN_plot. The one named by `fails` throws an mg::Error once its CSV is written.
std::vector<Experiment> counting_experiments(std::map<std::string, int>& runs, const std::string& fails = "") {
  auto make = [&runs, fails](const Heading& heading, std::string stem) {
    auto run = [&runs, fails, heading, stem](Context&, Report& report) {
      const std::string id(heading.id);
      const int count = ++runs[id];
      Section section = heading.section();
      section.setup = "nothing trained";
      section.tables = {Table{.caption = "numbers", .header = {"run", "value"}, .rows = {{"1", "0.5"}}}};
      section.verdict = "made by hand";
      section.csv_files = {report.write_csv(stem + "_runs.csv", {"experiment", "run"}, {{id, std::to_string(count)}})};
      MG_CHECK(id != fails, "{} failed half-way", id);
      section.plots = {Plot{.name = stem + "_plot",
                            .title = "a plot",
                            .series = {Series{.name = "V0", .x = {1, 2, 3}, .y = {1, 2, 4}}}}};
      return section;
    };
    return Experiment{heading, run};
  };
  return {make(Heading{"E1", "First", "Table 0", "a claim"}, "e1"),
          make(Heading{"E2", "Second", "Table 0", "a claim"}, "e2")};
}

// report.md from its summary table on: what follows the opening paragraph.
std::string after_preamble(const std::string& md) {
  const std::size_t at = md.find("| experiment | paper | verdict |");
  REQUIRE(at != std::string::npos);
  return md.substr(at);
}

std::filesystem::file_time_type modified(const fs::path& path) { return fs::last_write_time(path); }

RunIdentity identity_of(const std::string& experiment, std::uint64_t seed = 0) {
  return {.experiment = experiment, .preset = "quick", .device = "cpu", .seed = seed, .program = program_version()};
}

json read_json(const fs::path& path) { return json::parse(read(path)); }

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream file(path);
  file << text;
}

// The warnings given while `fn` runs.
template <class Fn>
std::vector<std::string> warnings_during(Fn&& fn) {
  std::vector<std::string> warnings;
  const WarningHandler previous = set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
  fn();
  set_warning_handler(previous);
  return warnings;
}

}  // namespace

TEST_CASE("a second call skips the experiments complete in --out: nothing runs or is rewritten; --rerun runs them") {
  TempDir tmp;
  const ReproOptions options{.out = tmp / "out", .quiet = true};
  const fs::path out = options.out;
  std::map<std::string, int> runs;
  run_repro(options, counting_experiments(runs));
  CHECK(runs == std::map<std::string, int>{{"E1", 1}, {"E2", 1}});
  for (const char* name : {"E1.manifest.json", "E2.manifest.json"}) CHECK_MESSAGE(fs::exists(out / name), name);
  const json manifest = read_json(out / "E1.manifest.json");
  CHECK(manifest["experiment"] == "E1");
  CHECK(manifest["seed"] == 0);
  CHECK(manifest["version"] == "0.1.0");
  CHECK(manifest["commit"] == program_version().commit);
  CHECK(manifest["section"]["verdict"] == "made by hand");
  CHECK(manifest["files"].size() == (have_gnuplot() ? 4 : 3));  // the CSV, the plot's .dat and .gp, its PNG
  const std::string first = read(out / "report.md");
  std::map<std::string, std::filesystem::file_time_type> times;
  for (const char* name : {"e1_runs.csv", "e1_plot.dat", "e1_plot.gp", "e2_runs.csv", "E1.manifest.json"})
    times[name] = modified(out / name);

  run_repro(options, counting_experiments(runs));
  CHECK(runs == std::map<std::string, int>{{"E1", 1}, {"E2", 1}});  // nothing ran again
  for (const auto& [name, time] : times) CHECK_MESSAGE(modified(out / name) == time, name);
  CHECK(read(out / "e1_runs.csv") == "experiment,run\nE1,1\n");
  const std::string second = read(out / "report.md");
  CHECK(after_preamble(second) == after_preamble(first));
  CHECK(first.find("from an earlier call") == std::string::npos);
  CHECK(second.find("E1 and E2 were complete in this folder from an earlier call") != std::string::npos);
  if (have_gnuplot()) CHECK(second.find("![a plot](e1_plot.png)") != std::string::npos);

  // One experiment asked for, whatever the others: only it is skipped, and the report has only it.
  run_repro(ReproOptions{.experiment = "E2", .out = options.out, .quiet = true}, counting_experiments(runs));
  CHECK(runs["E2"] == 1);
  CHECK(read(out / "report.md").find("E2 was complete in this folder") != std::string::npos);

  ReproOptions rerun = options;
  rerun.rerun = true;
  run_repro(rerun, counting_experiments(runs));
  CHECK(runs == std::map<std::string, int>{{"E1", 2}, {"E2", 2}});
  CHECK(read(out / "e1_runs.csv") == "experiment,run\nE1,2\n");
  CHECK(read(out / "report.md").find("from an earlier call") == std::string::npos);
}

TEST_CASE("another seed, preset or program version, or a file missing, runs the experiment again and says why") {
  TempDir tmp;
  const ReproOptions options{.experiment = "E1", .out = tmp / "out", .quiet = true};
  const fs::path out = options.out;
  std::map<std::string, int> runs;
  run_repro(options, counting_experiments(runs));
  CHECK(find_earlier_run(options.out, identity_of("E1")).state == EarlierRun::State::complete);
  CHECK(find_earlier_run(options.out, identity_of("E2")).state == EarlierRun::State::none);

  const EarlierRun other_seed = find_earlier_run(options.out, identity_of("E1", 1));
  CHECK(other_seed.state == EarlierRun::State::different);
  CHECK(other_seed.why == "seed 0, not 1");
  RunIdentity full = identity_of("E1");
  full.preset = "full";
  CHECK(find_earlier_run(options.out, full).why == "preset quick, not full");
  ReproOptions seed_1 = options;
  seed_1.seed = 1;
  run_repro(seed_1, counting_experiments(runs));
  CHECK(runs["E1"] == 2);
  CHECK(read_json(out / "E1.manifest.json")["seed"] == 1);
  run_repro(seed_1, counting_experiments(runs));
  CHECK(runs["E1"] == 2);

  // A manifest of another build of the program.
  json manifest = read_json(out / "E1.manifest.json");
  manifest["commit"] = "0123456789ab";
  write_text(out / "E1.manifest.json", manifest.dump());
  const EarlierRun other_program = find_earlier_run(options.out, identity_of("E1", 1));
  CHECK(other_program.state == EarlierRun::State::different);
  CHECK(other_program.why == fmt::format("mixgrad 0.1.0 (git 0123456789ab), not {}", program_version().text()));
  run_repro(seed_1, counting_experiments(runs));
  CHECK(runs["E1"] == 3);

  // A call that fails (or is stopped) half-way through an experiment has rewritten some of its files:
  // the manifest of the earlier run is gone, so that they never pass for that run's.
  ReproOptions seed_2 = options;
  seed_2.seed = 2;
  mg::testing::check_error([&] { run_repro(seed_2, counting_experiments(runs, "E1")); }, "E1 failed half-way");
  CHECK(read(out / "e1_runs.csv") == "experiment,run\nE1,4\n");
  CHECK(!fs::exists(out / "E1.manifest.json"));
  CHECK(find_earlier_run(options.out, identity_of("E1", 1)).state == EarlierRun::State::none);
  run_repro(seed_1, counting_experiments(runs));
  CHECK(runs["E1"] == 5);

  // A file the section shows, gone: the experiment is not complete.
  for (const char* name : {"e1_runs.csv", "e1_plot.dat", "e1_plot.gp"}) {
    INFO(name);
    fs::remove(out / name);
    const EarlierRun missing = find_earlier_run(options.out, identity_of("E1", 1));
    CHECK(missing.state == EarlierRun::State::incomplete);
    CHECK(missing.why == fmt::format("{} is missing", name));
    const int before = runs["E1"];
    run_repro(seed_1, counting_experiments(runs));
    CHECK(runs["E1"] == before + 1);
    CHECK(fs::exists(out / name));
  }
}

TEST_CASE("a damaged manifest runs its experiment again with a warning, never a crash") {
  TempDir tmp;
  const ReproOptions options{.experiment = "E1", .out = tmp / "out", .quiet = true};
  const fs::path path = fs::path(options.out) / "E1.manifest.json";
  std::map<std::string, int> runs;
  run_repro(options, counting_experiments(runs));
  const json good = read_json(path);
  auto with = [&](const std::function<void(json&)>& change) {
    json manifest = good;
    change(manifest);
    return manifest.dump();
  };
  const std::map<std::string, std::string> damaged{
      {"empty", ""},
      {"cut short", good.dump().substr(0, good.dump().size() / 2)},
      {"not an object", "[1, 2, 3]"},
      {"nested too deep", std::string(100000, '[') + std::string(100000, ']')},
      {"no seed", with([](json& m) { m.erase("seed"); })},
      {"a negative seed", with([](json& m) { m["seed"] = -1; })},
      {"a seed in words", with([](json& m) { m["seed"] = "zero"; })},
      {"no section", with([](json& m) { m.erase("section"); })},
      {"another format", with([](json& m) { m["format"] = "mixgrad repro manifest 99"; })},
      {"a row short of its header", with([](json& m) { m["section"]["tables"][0]["rows"][0] = {"1"}; })},
      {"a CSV outside the folder", with([](json& m) { m["section"]["csv_files"][0] = "../e1_runs.csv"; })},
      {"another experiment's section", with([](json& m) { m["section"]["id"] = "E2"; })},
  };
  for (const auto& [what, text] : damaged) {
    INFO(what);
    write_text(path, text);
    CHECK(find_earlier_run(options.out, identity_of("E1")).state == EarlierRun::State::damaged);
    const int before = runs["E1"];
    const std::vector<std::string> warnings = warnings_during([&] { run_repro(options, counting_experiments(runs)); });
    CHECK(runs["E1"] == before + 1);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("mixgrad repro: E1.manifest.json in " + options.out + " is damaged (") == 0);
    CHECK(warnings[0].find("E1 runs again") != std::string::npos);
    CHECK(warnings[0].size() < 400);  // a line, whatever the file held
    CHECK(find_earlier_run(options.out, identity_of("E1")).state == EarlierRun::State::complete);  // a new one
  }
}

TEST_CASE("a manifest keeps the section as the report shows it: report.md made from it again is the same") {
  TempDir tmp;
  Section section{
      .id = "E4",
      .title = "Loss scaling",
      .reference = "Table 2",
      .claim = "a \"claim\", with | and ünïcode",
      .setup = "what ran",
      .tables = {Table{.caption = "", .header = {"a", "b"}, .rows = {{"1", "2"}, {"3", "4"}}},
                 Table{.caption = "second", .header = {"c"}, .rows = {}}},
      .verdict = "reproduced",
      .plots = {Plot{.name = "e4_a", .title = "drawn", .series = {Series{.name = "V0", .x = {1}, .y = {1}}}},
                Plot{.name = "e4_b", .title = "not drawn"}},
      .csv_files = {"e4_runs.csv"}};
  const std::map<std::string, std::string> not_drawn{{"e4_b", "gnuplot failed"}};
  const fs::path out = tmp.path / "out";
  fs::create_directories(out);
  for (const char* name : {"e4_runs.csv", "e4_a.dat", "e4_a.gp", "e4_a.png", "e4_b.dat", "e4_b.gp"})
    write_text(out / name, "x");  // no e4_b.png: it was not drawn
  write_manifest(out.string(), Manifest{.identity = identity_of("E4"),
                                        .seconds = 12.5,
                                        .finished = "now",
                                        .section = section,
                                        .not_drawn = not_drawn});
  CHECK(!fs::exists(out / fmt::format("E4.manifest.json.tmp.{}", ::getpid())));  // renamed into place
  EarlierRun earlier = find_earlier_run(out.string(), identity_of("E4"));
  REQUIRE(earlier.state == EarlierRun::State::complete);
  const Manifest& m = *earlier.manifest;
  CHECK(m.seconds == 12.5);
  CHECK(m.not_drawn == not_drawn);
  CHECK(m.section.claim == section.claim);
  CHECK(m.section.tables.size() == 2);
  CHECK(m.section.tables[0].rows == section.tables[0].rows);
  CHECK(m.section.tables[1].caption == "second");
  CHECK(m.section.plots.size() == 2);
  CHECK(m.section.plots[1].title == "not drawn");
  CHECK(m.section.plots[0].series.empty());  // the data stays in e4_a.dat
  CHECK(m.section.csv_files == section.csv_files);

  Report report(out.string());
  report.add_made_earlier(m.section, m.not_drawn);
  const std::string md = read(report.write("preamble"));
  CHECK(md.find("![drawn](e4_a.png)") != std::string::npos);
  CHECK(md.find("*Plot not drawn (gnuplot failed): not drawn") != std::string::npos);
  CHECK(md.find("| 3 | 4 |") != std::string::npos);
  CHECK(md.find("**Verdict.** reproduced") != std::string::npos);
  CHECK(read(out / "e4_a.gp") == "x");  // no plot was made again

  fs::remove(out / "e4_a.png");  // a drawn plot's PNG, gone
  CHECK(find_earlier_run(out.string(), identity_of("E4")).why == "e4_a.png is missing");
}

TEST_CASE("--experiment takes a list, run in E1..E14's order; an unknown one is refused before anything runs") {
  TempDir tmp;
  std::map<std::string, int> runs;
  run_repro(ReproOptions{.experiment = "E2,E1", .out = tmp / "out", .quiet = true}, counting_experiments(runs));
  CHECK(runs == std::map<std::string, int>{{"E1", 1}, {"E2", 1}});
  const std::string md = read(tmp.path / "out" / "report.md");
  CHECK(md.find("## E1") < md.find("## E2"));
  mg::testing::check_error(
      [&] {
        run_repro(ReproOptions{.experiment = "E1,E12", .out = tmp / "x", .quiet = true}, counting_experiments(runs));
      },
      "unknown experiment 'E12'");
  CHECK(runs == std::map<std::string, int>{{"E1", 1}, {"E2", 1}});
}

TEST_CASE("SIGTERM during an experiment keeps those finished; the same command again skips them and ends the rest") {
  TempDir tmp;
  const std::string out = tmp / "out";
  const std::string command = fmt::format("{} repro --experiment E7,E10 --out {}", MG_CLI_PATH, out);
  {
    // Held after the first step of E10's first run (E7 is complete by then), then SIGTERM.
    Spawned run(fmt::format("MG_TEST_PAUSE=repro-step:E10:1 exec {}", command));
    const int pid = run.wait_for_pause();
    REQUIRE(pid > 0);
    CHECK(run.output().find("E7 (FP32 accumulation, §3.3): running") != std::string::npos);
    CHECK(fs::exists(tmp.path / "out" / "E7.manifest.json"));
    kill(pid, SIGTERM);
    // The run ends before its next step. One that went on would pause again, after the next run's first
    // step: that is a failure, not a wait for ever.
    const int paused_again = run.wait_for_pause();
    if (paused_again > 0) kill(paused_again, SIGKILL);
    CHECK(paused_again == 0);
    const mg::testing::Finished done = run.finish();
    CHECK(done.signal == SIGTERM);  // a calling script sees 143 and stops too
    CHECK(done.output.find(fmt::format("mixgrad repro: SIGTERM: stopped during E10 (FP8 accumulation); E7 is complete "
                                       "in {}; run the same command again to go on (complete experiments are skipped)",
                                       out)) != std::string::npos);
    CHECK(done.output.find("mixgrad repro: wrote") == std::string::npos);
  }
  const fs::path dir = out;
  const std::string stopped = read(dir / "report.md");
  CHECK(stopped.find("## E7") != std::string::npos);
  CHECK(stopped.find("## E10") == std::string::npos);
  CHECK(stopped.find("**Incomplete:** 1 of 2 experiments so far.") != std::string::npos);
  CHECK(!fs::exists(dir / "E10.manifest.json"));
  const auto e7_csv = modified(dir / "e7_runs.csv");

  const mg::testing::Run again = mg::testing::run_command(command);
  REQUIRE(again.status == 0);
  CHECK(again.output.find(fmt::format("E7 (FP32 accumulation): complete in {} (E7.manifest.json, same preset, device, "
                                      "seed and version); skipped",
                                      out)) != std::string::npos);
  CHECK(again.output.find("E10 (FP8 accumulation, DeepSeek-V3 §3.3.2): running\n") != std::string::npos);
  CHECK(modified(dir / "e7_runs.csv") == e7_csv);
  CHECK(fs::exists(dir / "E10.manifest.json"));
  const std::string resumed = read(dir / "report.md");
  CHECK(resumed.find("## E7") != std::string::npos);
  CHECK(resumed.find("## E10") != std::string::npos);
  CHECK(resumed.find("Incomplete") == std::string::npos);
  CHECK(resumed.find("E7 was complete in this folder from an earlier call") != std::string::npos);

  // Everything complete: nothing runs, and report.md says the same but for its opening paragraph.
  const auto e10_csv = modified(dir / "e10_runs.csv");
  const mg::testing::Run third = mg::testing::run_command(command);
  REQUIRE(third.status == 0);
  CHECK(third.output.find("running") == std::string::npos);
  CHECK(modified(dir / "e10_runs.csv") == e10_csv);
  const std::string last = read(dir / "report.md");
  CHECK(after_preamble(last) == after_preamble(resumed));
  CHECK(last.find("E7 and E10 were complete in this folder") != std::string::npos);
}
