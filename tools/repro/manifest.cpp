#include "tools/repro/manifest.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/output_file.h"
#include "data/untrusted_json.h"
#include "tools/repro/program_version.h"  // generated: MG_PROGRAM_VERSION, MG_PROGRAM_COMMIT

namespace mg::tools::repro {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The "format" a manifest opens with; a later layout would change it, and its manifests would not count.
constexpr const char* kFormat = "mixgrad repro manifest 1";
// A manifest nests 6 levels (the manifest, its section, the tables, a table, its rows, a row). The
// bound refuses a damaged file's deep nesting before anything walks it (data/untrusted_json.h).
constexpr int kMaxDepth = 8;

// Written in the order a reader looks for things (ordered_json keeps it); read back by name.
using ordered_json = nlohmann::ordered_json;

ordered_json table_json(const Table& t) { return {{"caption", t.caption}, {"header", t.header}, {"rows", t.rows}}; }

ordered_json section_json(const Section& s, const std::map<std::string, std::string>& not_drawn) {
  ordered_json tables = ordered_json::array(), plots = ordered_json::array();
  for (const Table& t : s.tables) tables.push_back(table_json(t));
  for (const Plot& p : s.plots) {
    ordered_json plot = {{"name", p.name}, {"title", p.title}};
    if (const auto why = not_drawn.find(p.name); why != not_drawn.end()) plot["not_drawn"] = why->second;
    plots.push_back(plot);
  }
  return {{"id", s.id},           {"title", s.title}, {"reference", s.reference},
          {"claim", s.claim},     {"setup", s.setup}, {"tables", tables},
          {"verdict", s.verdict}, {"plots", plots},   {"csv_files", s.csv_files}};
}

// The reading side: each helper names the field that is missing or of the wrong type.
const json& member(const json& object, const std::string& key) {
  MG_CHECK(object.is_object(), "expected an object holding '{}', got {}", key, data::quoted(object));
  const auto found = object.find(key);
  MG_CHECK(found != object.end(), "'{}' is missing", key);
  return *found;
}

std::string text_of(const json& object, const std::string& key) {
  const json& value = member(object, key);
  MG_CHECK(value.is_string(), "'{}' must be a string, got {}", key, data::quoted(value));
  return value.get<std::string>();
}

std::vector<std::string> texts_of(const json& value, const std::string& what) {
  MG_CHECK(value.is_array(), "'{}' must be an array of strings, got {}", what, data::quoted(value));
  std::vector<std::string> texts;
  for (const json& item : value) {
    MG_CHECK(item.is_string(), "'{}' must be an array of strings, got {}", what, data::quoted(item));
    texts.push_back(item.get<std::string>());
  }
  return texts;
}

// A file name in DIR, as the report links it: no folder, nothing that leads out of DIR.
std::string file_name(std::string name, const std::string& what) {
  MG_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos,
           "'{}' must be a file name in the report's folder, got {}", what, data::quoted(name));
  return name;
}

Table table_from(const json& j) {
  Table t{.caption = text_of(j, "caption"), .header = texts_of(member(j, "header"), "header")};
  const json& rows = member(j, "rows");
  MG_CHECK(rows.is_array(), "'rows' must be an array, got {}", data::quoted(rows));
  for (const json& row : rows) {
    t.rows.push_back(texts_of(row, "rows"));
    MG_CHECK(t.rows.back().size() == t.header.size(), "a row of table {} has {} cells, its header {}",
             data::quoted(t.caption), t.rows.back().size(), t.header.size());
  }
  return t;
}

Section section_from(const json& j, std::map<std::string, std::string>& not_drawn) {
  Section s{.id = text_of(j, "id"),
            .title = text_of(j, "title"),
            .reference = text_of(j, "reference"),
            .claim = text_of(j, "claim"),
            .setup = text_of(j, "setup"),
            .verdict = text_of(j, "verdict")};
  const json& tables = member(j, "tables");
  const json& plots = member(j, "plots");
  MG_CHECK(tables.is_array() && plots.is_array(), "'tables' and 'plots' must be arrays");
  for (const json& t : tables) s.tables.push_back(table_from(t));
  for (const json& p : plots) {
    s.plots.push_back(Plot{.name = file_name(text_of(p, "name"), "plots"), .title = text_of(p, "title")});
    if (p.contains("not_drawn")) not_drawn[s.plots.back().name] = text_of(p, "not_drawn");
  }
  for (const std::string& csv : texts_of(member(j, "csv_files"), "csv_files"))
    s.csv_files.push_back(file_name(csv, "csv_files"));
  return s;
}

Manifest manifest_from(const json& j) {
  MG_CHECK(text_of(j, "format") == kFormat, "'format' must be \"{}\", got {}", kFormat,
           data::quoted(member(j, "format")));
  const json& seed = member(j, "seed");
  MG_CHECK(seed.is_number_unsigned(), "'seed' must be a whole number from 0 to 2^64 - 1, got {}", data::quoted(seed));
  const json& seconds = member(j, "seconds");
  MG_CHECK(seconds.is_number(), "'seconds' must be a number, got {}", data::quoted(seconds));
  Manifest m{.identity = {.experiment = text_of(j, "experiment"),
                          .preset = text_of(j, "preset"),
                          .device = text_of(j, "device"),
                          .seed = seed.get<std::uint64_t>(),
                          .program = {.version = text_of(j, "version"), .commit = text_of(j, "commit")}},
             .seconds = seconds.get<double>(),
             .finished = text_of(j, "finished")};
  m.section = section_from(member(j, "section"), m.not_drawn);
  MG_CHECK(m.section.id == m.identity.experiment, "its section is {}'s, not {}'s", data::quoted(m.section.id),
           m.identity.experiment);
  return m;
}

// What differs between the run a manifest describes and the one asked for: "seed 1, not 0"; empty if nothing.
std::string differences(const RunIdentity& earlier, const RunIdentity& now) {
  std::vector<std::string> found;
  if (earlier.experiment != now.experiment)
    found.push_back(fmt::format("made for {}, not {}", earlier.experiment, now.experiment));
  if (earlier.preset != now.preset) found.push_back(fmt::format("preset {}, not {}", earlier.preset, now.preset));
  if (earlier.device != now.device) found.push_back(fmt::format("device {}, not {}", earlier.device, now.device));
  if (earlier.seed != now.seed) found.push_back(fmt::format("seed {}, not {}", earlier.seed, now.seed));
  if (earlier.program != now.program)
    found.push_back(fmt::format("mixgrad {}, not {}", earlier.program.text(), now.program.text()));
  return fmt::format("{}", fmt::join(found, "; "));
}

}  // namespace

std::string ProgramVersion::text() const { return fmt::format("{} (git {})", version, commit); }

ProgramVersion program_version() { return {MG_PROGRAM_VERSION, MG_PROGRAM_COMMIT}; }

std::string manifest_name(std::string_view experiment) { return fmt::format("{}.manifest.json", experiment); }

std::vector<std::string> section_files(const Section& section, const std::map<std::string, std::string>& not_drawn) {
  std::vector<std::string> files = section.csv_files;
  for (const Plot& plot : section.plots) {
    files.push_back(plot.name + ".dat");
    files.push_back(plot.name + ".gp");
    if (!not_drawn.contains(plot.name)) files.push_back(plot.name + ".png");
  }
  return files;
}

void write_manifest(const std::string& directory, const Manifest& m) {
  const RunIdentity& id = m.identity;
  const ordered_json manifest = {{"format", kFormat},
                                 {"experiment", id.experiment},
                                 {"preset", id.preset},
                                 {"device", id.device},
                                 {"seed", id.seed},
                                 {"version", id.program.version},
                                 {"commit", id.program.commit},
                                 {"seconds", m.seconds},
                                 {"finished", m.finished},
                                 {"files", section_files(m.section, m.not_drawn)},  // for a reader: not read back
                                 {"section", section_json(m.section, m.not_drawn)}};
  const fs::path path = fs::path(directory) / manifest_name(id.experiment);
  const std::string temporary = fmt::format("{}.tmp.{}", path.string(), ::getpid());
  write_file(temporary, manifest.dump(2) + "\n", "mixgrad repro: an experiment's manifest");
  MG_CHECK(std::rename(temporary.c_str(), path.c_str()) == 0, "mixgrad repro: cannot rename {} to {}", temporary,
           path.string());
}

void remove_manifest(const std::string& directory, std::string_view experiment) {
  const fs::path path = fs::path(directory) / manifest_name(experiment);
  std::error_code error;
  fs::remove(path, error);
  MG_CHECK(!error, "mixgrad repro: cannot remove {} before {} runs again: {}", path.string(), experiment,
           error.message());
}

EarlierRun find_earlier_run(const std::string& directory, const RunIdentity& identity) {
  const fs::path path = fs::path(directory) / manifest_name(identity.experiment);
  std::error_code error;
  if (!fs::exists(path, error)) return {};
  Manifest manifest;
  try {
    std::ifstream file(path);
    MG_CHECK(file.is_open(), "it cannot be opened");
    std::stringstream text;
    text << file.rdbuf();
    const auto bounded = [](int depth, json::parse_event_t, json&) {
      MG_CHECK(depth <= kMaxDepth, "brackets nest deeper than {}", kMaxDepth);
      return true;
    };
    manifest = manifest_from(json::parse(text.str(), bounded));
  } catch (const json::exception& e) {
    return {.state = EarlierRun::State::damaged, .why = data::cut_message(e.what())};
  } catch (const Error& e) {
    return {.state = EarlierRun::State::damaged, .why = e.what()};
  }
  if (const std::string differ = differences(manifest.identity, identity); !differ.empty())
    return {.state = EarlierRun::State::different, .why = differ};
  for (const std::string& name : section_files(manifest.section, manifest.not_drawn))
    if (!fs::exists(fs::path(directory) / name, error))
      return {.state = EarlierRun::State::incomplete, .why = fmt::format("{} is missing", name)};
  return {.state = EarlierRun::State::complete, .manifest = std::move(manifest)};
}

}  // namespace mg::tools::repro
