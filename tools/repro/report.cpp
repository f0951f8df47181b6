#include "tools/repro/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace mg::tools::repro {

namespace fs = std::filesystem;

namespace {

std::string csv_cell(const std::string& cell) {
  if (cell.find_first_of(",\"\n") == std::string::npos) return cell;
  std::string quoted = "\"";
  for (char ch : cell) quoted += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return quoted + "\"";
}

// gnuplot strings are in double quotes; a double quote or backslash in a title would end them.
std::string gp_string(const std::string& text) {
  std::string out;
  for (char ch : text)
    if (ch != '"' && ch != '\\') out += ch;
  return "\"" + out + "\"";
}

bool gnuplot_found() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

// The shell quoting of a path for std::system: single quotes, with any single quote closed and escaped.
std::string shell_quoted(const std::string& path) {
  std::string out = "'";
  for (char ch : path) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

}  // namespace

std::string percent(double fraction, int decimals) {
  if (!std::isfinite(fraction)) return "-";
  return fmt::format("{:.{}f}%", 100 * fraction, decimals);
}

std::string number(double value, int significant) {
  if (!std::isfinite(value)) return std::isnan(value) ? "-" : (value > 0 ? "inf" : "-inf");
  return fmt::format("{:.{}g}", value, significant);
}

std::string Table::markdown() const {
  std::string out = caption.empty() ? "" : caption + "\n\n";
  auto line = [&](const std::vector<std::string>& cells) {
    MG_CHECK(cells.size() == header.size(), "repro::Table::markdown: a row has {} cells, the header {}", cells.size(),
             header.size());
    out += "|";
    for (const std::string& cell : cells) out += " " + cell + " |";
    out += "\n";
  };
  line(header);
  out += "|";
  for (std::size_t i = 0; i < header.size(); ++i) out += "---|";
  out += "\n";
  for (const auto& row : rows) line(row);
  return out;
}

Report::Report(std::string directory) : directory_(std::move(directory)) {
  std::error_code error;
  fs::create_directories(directory_, error);
  MG_CHECK(!error && fs::is_directory(directory_), "mixgrad repro: cannot create the output directory {}: {}",
           directory_, error ? error.message() : "a file of that name exists");
  have_gnuplot_ = gnuplot_found();
  if (!have_gnuplot_)
    fmt::print(stderr, "mixgrad repro: warning: gnuplot was not found, so the report will have no plots (the .gp "
               "scripts and .dat files are written; apt-get install gnuplot-nox, then run `gnuplot NAME.gp` in {})\n",
               directory_);
}

std::string Report::write_csv(const std::string& name, const std::vector<std::string>& header,
                              const std::vector<std::vector<std::string>>& rows) const {
  const fs::path path = fs::path(directory_) / name;
  std::ofstream file(path);
  MG_CHECK(file.good(), "mixgrad repro: cannot write {}", path.string());
  auto line = [&](const std::vector<std::string>& cells) {
    MG_CHECK(cells.size() == header.size(), "mixgrad repro: a row of {} has {} cells, the header {}", name,
             cells.size(), header.size());
    for (std::size_t i = 0; i < cells.size(); ++i) file << (i ? "," : "") << csv_cell(cells[i]);
    file << "\n";
  };
  line(header);
  for (const auto& row : rows) line(row);
  return name;
}

void Report::make_plot(const Plot& plot) {
  const fs::path dir(directory_);
  {
    std::ofstream data(dir / (plot.name + ".dat"));
    MG_CHECK(data.good(), "mixgrad repro: cannot write {}.dat in {}", plot.name, directory_);
    for (const Series& s : plot.series) {  // one block per series, separated by two blank lines (gnuplot's index)
      data << "# " << s.name << "\n";
      for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
        if (std::isfinite(s.y[i]) && (!plot.log_y || s.y[i] > 0)) data << fmt::format("{:.9g} {:.9g}\n", s.x[i], s.y[i]);
      data << "\n\n";
    }
  }
  {
    // noenhanced: the '_' of variant names would otherwise start a subscript.
    std::ofstream script(dir / (plot.name + ".gp"));
    MG_CHECK(script.good(), "mixgrad repro: cannot write {}.gp in {}", plot.name, directory_);
    script << "# Made by `mixgrad repro`; run `gnuplot " << plot.name << ".gp` in this folder to redraw.\n"
           << "set terminal pngcairo size 900,540 noenhanced font 'sans,11'\n"
           << "set output " << gp_string(plot.name + ".png") << "\n"
           << "set title " << gp_string(plot.title) << "\n"
           << "set xlabel " << gp_string(plot.x_label) << "\nset ylabel " << gp_string(plot.y_label) << "\n"
           << "set grid\nset key outside right top\n";
    if (plot.log_x) script << "set logscale x 2\n";
    if (plot.log_y) script << "set logscale y 10\n";
    if (plot.x_min < plot.x_max) script << fmt::format("set xrange [{:.9g}:{:.9g}]\n", plot.x_min, plot.x_max);
    for (std::size_t i = 0; i < plot.bands.size(); ++i) {
      const Band& b = plot.bands[i];
      script << fmt::format("set object {} rect from {:.9g}, graph 0 to {:.9g}, graph 1 behind fc rgb {} "
                            "fs transparent solid 0.18 noborder\n", i + 1, b.from, b.to, gp_string(b.color))
             << fmt::format("set label {} {} at {:.9g}, graph 0.96 center font 'sans,9'\n", i + 1, gp_string(b.label),
                            (b.from + b.to) / 2);
    }
    const std::string line_style = plot.steps ? "histeps" : plot.points ? "linespoints" : "lines";
    script << "plot ";
    for (std::size_t i = 0; i < plot.series.size(); ++i)
      script << (i ? ", \\\n     " : "") << gp_string(plot.name + ".dat") << " index " << i << " using 1:2 with "
             << (plot.series[i].markers ? "points pt 7 ps 1.2" : line_style + " lw 2") << " title "
             << gp_string(plot.series[i].name);
    script << "\n";
  }
  if (!have_gnuplot_) return;
  const std::string command = fmt::format("cd {} && gnuplot {} >{} 2>&1", shell_quoted(directory_),
                                          shell_quoted(plot.name + ".gp"), shell_quoted(plot.name + ".gnuplot.log"));
  if (std::system(command.c_str()) != 0 || !fs::exists(dir / (plot.name + ".png"))) {
    plot_failures_.push_back(plot.name);
    fmt::print(stderr, "mixgrad repro: warning: gnuplot failed on {}.gp; see {}.gnuplot.log in {}\n", plot.name,
               plot.name, directory_);
  } else {
    fs::remove(dir / (plot.name + ".gnuplot.log"));
  }
}

void Report::add(Section section) {
  for (const Plot& plot : section.plots) make_plot(plot);
  sections_.push_back(std::move(section));
}

std::string Report::write(const std::string& preamble) const {
  std::string md = "# Mixed Precision Training, reproduced with mixgrad\n\n" + preamble + "\n\n";
  if (!have_gnuplot_)
    md += "> **No plots:** gnuplot was not found when this report was made. The `.gp` scripts and `.dat` files are "
          "here; install the Debian package `gnuplot-nox` and run `gnuplot NAME.gp` in this folder to draw them.\n\n";
  Table summary{.header = {"experiment", "paper", "verdict"}};
  for (const Section& s : sections_)
    summary.rows.push_back({"[" + s.id + " " + s.title + "](#" + s.id + ")", s.reference, s.verdict});
  md += summary.markdown() + "\n";
  for (const Section& s : sections_) {
    md += fmt::format("<a id=\"{}\"></a>\n## {} — {} ({})\n\n", s.id, s.id, s.title, s.reference);
    md += "**The paper's claim.** " + s.claim + "\n\n";
    if (!s.setup.empty()) md += "**What ran here.** " + s.setup + "\n\n";
    for (const Table& table : s.tables) md += table.markdown() + "\n";
    md += "**Verdict.** " + s.verdict + "\n\n";
    for (const Plot& plot : s.plots) {
      const bool failed = std::find(plot_failures_.begin(), plot_failures_.end(), plot.name) != plot_failures_.end();
      if (have_gnuplot_ && !failed) md += fmt::format("![{}]({}.png)\n\n", plot.title, plot.name);
      else md += fmt::format("*Plot not drawn ({}): {} — data in `{}.dat`, script `{}.gp`.*\n\n",
                             have_gnuplot_ ? "gnuplot failed" : "no gnuplot", plot.title, plot.name, plot.name);
    }
    if (!s.csv_files.empty()) {
      md += "Every number: ";
      for (std::size_t i = 0; i < s.csv_files.size(); ++i)
        md += fmt::format("{}[`{}`]({})", i ? ", " : "", s.csv_files[i], s.csv_files[i]);
      md += ".\n\n";
    }
  }
  const fs::path path = fs::path(directory_) / "report.md";
  std::ofstream file(path);
  MG_CHECK(file.good(), "mixgrad repro: cannot write {}", path.string());
  file << md;
  return path.string();
}

}  // namespace mg::tools::repro
