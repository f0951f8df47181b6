#include "tools/repro/report.h"

#include <fmt/format.h>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <utility>

#include "core/error.h"
#include "core/output_file.h"

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

// One look per curve: colour, dash pattern and marker shape all differ, so that a curve lying on
// another still shows. The colours are Okabe and Ito's, told apart with colour blindness too; the
// markers of V0..V7 are open shapes, so markers at the same point show through each other; the FP8
// variants' are mostly filled, so that they read apart from the f16 and bf16 ones. variant_style
// (run_tables.h) says which style draws a variant's curves.
struct LineStyle {
  const char* color;
  const char* dash;  // a gnuplot dash type
  int point;  // a gnuplot point type
};
constexpr LineStyle kLineStyles[] = {
    {"#000000", "1", 6},  // black, solid, circle
    {"#E69F00", "2", 4},  // orange, dashed, square
    {"#0072B2", "3", 8},  // blue, dotted, triangle
    {"#009E73", "4", 12},  // green, dash-dot, diamond
    {"#CC79A7", "5", 10},  // pink, dash-dot-dot, triangle down
    {"#D55E00", "(14,6)", 2},  // vermilion, long dashes, cross
    {"#56B4E9", "(4,4,12,4)", 1},  // sky blue, short-long dashes, plus
    {"#882255", "(8,3,2,3)", 3},  // wine, dash-dot with long dashes, star
    {"#7F7F7F", "(2,6)", 14},  // grey, sparse dots, pentagon: kNoVariantStyle
    // V8..V15 (the FP8 variants), after the grey of no variant: Paul Tol's muted colours, which stay apart
    // from the eight above, each with a dash pattern and a marker of its own among them.
    {"#332288", "(10,4)", 5},  // indigo, dashes: V8
    {"#117733", "(2,3)", 9},  // dark green, dense dots: V9
    {"#AA4499", "(12,3,3,3)", 11},  // purple, dash-dot: V10
    {"#44AA99", "(6,2)", 13},  // teal, short dashes: V11
    {"#999933", "(3,3,3,9)", 15},  // olive, dot pairs: V12
    {"#661100", "(16,4,4,4)", 7},  // brown, long dash-dot: V13
    {"#6699CC", "(8,8)", 1},  // steel blue, even dashes: V14
    {"#CC6677", "(1,2,8,2)", 3},  // rose, dot-dash: V15
};
constexpr std::size_t kStyleCount = std::size(kLineStyles);

// The y range: the data's, padded (5% below, 5% above, more above where bands put their labels)
// so that no curve runs along the frame: a fraction of exactly 0, or a loss scale of 2^10 that
// gnuplot would end its axis at. On a log axis the padding is in decades or octaves; bars start
// at 0. Empty when no value can be drawn.
std::optional<std::pair<double, double>> y_range(const Plot& plot) {
  double lo = INFINITY, hi = -INFINITY;
  for (const Series& s : plot.series)
    for (double y : s.y) {
      if (!std::isfinite(y) || (plot.log_y && y <= 0)) continue;
      const double v = plot.log_y ? std::log(y) / std::log(plot.log_y) : y;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  if (lo > hi) return std::nullopt;
  const double span = hi > lo ? hi - lo : 1.0;
  double from = lo - 0.05 * span, to = hi + (plot.bands.empty() ? 0.05 : 0.18) * span;
  if (plot.kind == PlotKind::bars && lo >= 0) from = 0;
  if (!plot.log_y) return std::pair{from, to};
  return std::pair{std::pow(plot.log_y, from), std::pow(plot.log_y, to)};
}

// The y ticks of a log axis. gnuplot labels only the powers of the base, which over less than three
// decades leaves one or two labels: there the ticks are at 1, 2 and 5 times the powers of ten.
// Powers are written 2^k and 10^k, not 0.00000001.
std::string log_y_ticks(const Plot& plot, double from, double to) {
  if (plot.log_y != 10) return fmt::format("set format y \"{}^{{%L}}\"\n", plot.log_y);
  if (to / from >= 1000) return "set format y \"10^{%L}\"\n";
  std::string ticks;
  for (double decade = std::pow(10.0, std::floor(std::log10(from))); decade <= to; decade *= 10)
    for (double m : {1.0, 2.0, 5.0})
      if (m * decade >= from && m * decade <= to) ticks += fmt::format("{}{:g}", ticks.empty() ? "" : ", ", m * decade);
  return "set ytics (" + ticks + ")\n";
}

// The x ticks a plot names. Labels wider than their share of the axis (variant names under bars)
// are slanted so that they do not run into each other.
std::string x_ticks(const Plot& plot) {
  if (plot.x_ticks.empty()) return "";
  std::string out = "set xtics (";
  std::size_t longest = 0;
  for (std::size_t i = 0; i < plot.x_ticks.size(); ++i) {
    out += fmt::format("{}{} {:.9g}", i ? ", " : "", gp_string(plot.x_ticks[i].label), plot.x_ticks[i].at);
    longest = std::max(longest, plot.x_ticks[i].label.size());
  }
  constexpr double kAxisPixels = 780, kCharPixels = 7;  // at the terminal's size and font below
  const bool crowded = static_cast<double>(longest) * kCharPixels >
                       kAxisPixels / static_cast<double>(plot.x_ticks.size());
  return out + ") noenhanced" + (crowded ? " rotate by 30 right" : "") + "\n";
}

// The script: the terminal is enhanced for the tick formats (2^{%L} draws a superscript), and every
// text from the report is noenhanced, since the '_' of variant names would start a subscript.
std::string gnuplot_script(const Plot& plot, const std::vector<std::size_t>& points) {
  std::string gp =
      fmt::format("# Made by `mixgrad repro`; run `gnuplot {}.gp` in this folder to redraw.\n"
                  "set terminal pngcairo size 900,600 enhanced font 'sans,11'\nset encoding utf8\nset output {}\n"
                  "set title {} noenhanced\nset xlabel {} noenhanced\nset ylabel {} noenhanced\n"
                  // Below the plot the legend takes no width from the data, however long its entries; its extra
                  // line of height keeps the x label from touching a one-row legend.
                  "set key below center horizontal reverse Left noenhanced samplen 4 height 1\n",
                  plot.name, gp_string(plot.name + ".png"), gp_string(plot.title), gp_string(plot.x_label),
                  gp_string(plot.y_label));
  gp += plot.kind == PlotKind::bars ? "set grid ytics\n" : "set grid\n";
  for (std::size_t i = 0; i < kStyleCount; ++i)
    gp += fmt::format("set style line {} lc rgb \"{}\" dt {} lw 2 pt {} ps 1.3\n", i + 1, kLineStyles[i].color,
                      kLineStyles[i].dash, kLineStyles[i].point);
  if (plot.x_min < plot.x_max) {
    gp += fmt::format("set xrange [{:.9g}:{:.9g}]\n", plot.x_min, plot.x_max);
  } else if (plot.kind == PlotKind::bars && !plot.x_ticks.empty()) {
    const auto [first, last] = std::minmax_element(plot.x_ticks.begin(), plot.x_ticks.end(),
                                                   [](const Tick& a, const Tick& b) { return a.at < b.at; });
    gp += fmt::format("set xrange [{:.9g}:{:.9g}]\n", first->at - 0.6, last->at + 0.6);
  } else {  // the data's x range, and no further: gnuplot would extend it to a round number
    gp += "set autoscale xfix\nset offsets graph 0.02, graph 0.02, 0, 0\n";
  }
  gp += x_ticks(plot);
  if (plot.log_y) gp += fmt::format("set logscale y {}\n", plot.log_y);
  if (const auto range = y_range(plot)) {
    gp += fmt::format("set yrange [{:.9g}:{:.9g}]\n", range->first, range->second);
    if (plot.log_y) gp += log_y_ticks(plot, range->first, range->second);
  }
  for (std::size_t i = 0; i < plot.bands.size(); ++i) {
    const Band& b = plot.bands[i];
    // Labels alternate between two heights, so that those of narrow neighbouring bands do not collide.
    gp += fmt::format("set object {} rect from {:.9g}, graph 0 to {:.9g}, graph 1 behind fc rgb {} "
                      "fs transparent solid 0.18 noborder\n",
                      i + 1, b.from, b.to, gp_string(b.color)) +
          fmt::format("set label {} {} at {:.9g}, graph {} center font 'sans,9' noenhanced\n", i + 1,
                      gp_string(b.label), (b.from + b.to) / 2, i % 2 ? 0.92 : 0.965);
  }
  std::size_t curves = 0;  // the series drawn as curves (not markers alone): they share the markers' stagger
  double x_lo = INFINITY, x_hi = -INFINITY;
  for (const Series& s : plot.series) {
    curves += s.markers ? 0 : 1;
    for (double x : s.x) x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x);
  }
  const double bar_width = 0.8 / static_cast<double>(std::max<std::size_t>(curves, 1));
  if (plot.kind == PlotKind::bars)
    gp += fmt::format("set boxwidth {:.3g}\nset style fill solid 0.5 border rgb \"black\"\n", 0.9 * bar_width);
  const std::string data = gp_string(plot.name + ".dat");
  std::string elements;
  auto add = [&](const std::string& element) { elements += (elements.empty() ? "plot " : ", \\\n     ") + element; };
  std::size_t curve = 0;
  for (std::size_t i = 0; i < plot.series.size(); ++i) {
    const Series& s = plot.series[i];
    const std::size_t style = (s.style >= 0 ? static_cast<std::size_t>(s.style) : i) % kStyleCount + 1;
    const std::string source = fmt::format("{} index {}", data, i), title = "title " + gp_string(s.name);
    if (s.markers) {  // events: filled, so they stand out from the curves' open markers
      add(fmt::format("{} using 1:2 with points ls {} pt 7 {}", source, style, title));
      continue;
    }
    const std::size_t k = curve++;
    const double centred = static_cast<double>(k) - (static_cast<double>(curves) - 1) / 2;  // ..., -1, 0, 1, ...
    if (plot.kind == PlotKind::bars) {
      const double shift = centred * bar_width;
      add(fmt::format("{} using ($1{:+.3g}):2 with boxes ls {} dt 1 {}", source, shift, style, title));
    } else if (plot.kind == PlotKind::histogram) {
      add(fmt::format("{} using 1:2 with histeps ls {} {}", source, style, title));
    } else if (plot.kind == PlotKind::points) {
      // The line where the values are; the markers moved sideways from the next curve's by 0.7% of
      // the x range (half a marker): where runs agree to the third decimal, their markers stand side
      // by side, not on top of each other.
      add(fmt::format("{} using 1:2 with lines ls {} notitle", source, style));
      add(fmt::format("{} using ($1{:+.4g}):2 with points ls {} notitle", source, centred * 0.007 * (x_hi - x_lo),
                      style));
      add(fmt::format("keyentry with linespoints ls {} {}", style, title));
    } else {
      // About ten markers a curve, every `stride` points, each curve starting at another point: where
      // curves coincide, each one's markers still show. A curve of few points (the corners of a loss
      // scale's staircase) is told apart by its colour and dashes alone.
      const std::size_t stride = std::max(curves, (points[i] + 9) / 10);
      if (points[i] < std::max<std::size_t>(12, 2 * stride)) {
        add(fmt::format("{} using 1:2 with lines ls {} {}", source, style, title));
        continue;
      }
      add(fmt::format("{} using 1:2 with lines ls {} notitle", source, style));
      add(fmt::format("{} every {}::{} using 1:2 with points ls {} notitle", source, stride, k * stride / curves,
                      style));
      add(fmt::format("keyentry with linespoints ls {} {}", style, title));
    }
  }
  return gp + elements + "\n";
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
    fmt::print(stderr,
               "mixgrad repro: warning: gnuplot was not found, so the report will have no plots (the .gp "
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
  close_checked(file, path.string(), "mixgrad repro");
  return name;
}

void Report::make_plot(const Plot& plot) {
  const fs::path dir(directory_);
  std::vector<std::size_t> points;  // per series, the points written (the script staggers markers by them)
  {
    std::ofstream data(dir / (plot.name + ".dat"));
    MG_CHECK(data.good(), "mixgrad repro: cannot write {}.dat in {}", plot.name, directory_);
    for (const Series& s : plot.series) {  // one block per series, separated by two blank lines (gnuplot's index)
      data << "# " << s.name << "\n";
      points.push_back(0);
      for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
        if (std::isfinite(s.y[i]) && (!plot.log_y || s.y[i] > 0)) {
          data << fmt::format("{:.9g} {:.9g}\n", s.x[i], s.y[i]);
          ++points.back();
        }
      data << "\n\n";
    }
    close_checked(data, (dir / (plot.name + ".dat")).string(), "mixgrad repro");
  }
  write_file((dir / (plot.name + ".gp")).string(), gnuplot_script(plot, points), "mixgrad repro");
  if (!have_gnuplot_) {
    not_drawn_[plot.name] = "no gnuplot";
    return;
  }
  const std::string command = fmt::format("cd {} && gnuplot {} >{} 2>&1", shell_quoted(directory_),
                                          shell_quoted(plot.name + ".gp"), shell_quoted(plot.name + ".gnuplot.log"));
  const int status = std::system(command.c_str());
  // std::system ignores SIGINT and SIGQUIT here while gnuplot runs: a Ctrl-C at the terminal ends
  // gnuplot alone. It is passed on, so that this process stops as it would have (repro.cpp).
  if (status != -1 && WIFSIGNALED(status) && (WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGQUIT))
    std::raise(WTERMSIG(status));
  if (status != 0 || !fs::exists(dir / (plot.name + ".png"))) {
    not_drawn_[plot.name] = "gnuplot failed";
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

void Report::add_made_earlier(Section section, const std::map<std::string, std::string>& not_drawn) {
  for (const Plot& plot : section.plots)
    if (const auto why = not_drawn.find(plot.name); why != not_drawn.end()) not_drawn_[plot.name] = why->second;
  sections_.push_back(std::move(section));
}

std::string Report::write(const std::string& preamble) const {
  std::string md = "# Mixed Precision Training, FP8 and FP4 training, reproduced with mixgrad\n\n" + preamble + "\n\n";
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
      if (const auto why = not_drawn_.find(plot.name); why == not_drawn_.end())
        md += fmt::format("![{}]({}.png)\n\n", plot.title, plot.name);
      else
        md += fmt::format("*Plot not drawn ({}): {} — data in `{}.dat`, script `{}.gp`.*\n\n", why->second, plot.title,
                          plot.name, plot.name);
    }
    if (!s.csv_files.empty()) {
      md += "Every number: ";
      for (std::size_t i = 0; i < s.csv_files.size(); ++i)
        md += fmt::format("{}[`{}`]({})", i ? ", " : "", s.csv_files[i], s.csv_files[i]);
      md += ".\n\n";
    }
  }
  const fs::path path = fs::path(directory_) / "report.md";
  write_file(path.string(), md, "mixgrad repro");
  return path.string();
}

}  // namespace mg::tools::repro
