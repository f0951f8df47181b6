// The output of `mixgrad repro`: DIR/report.md, one CSV per series of numbers, PNG plots.
//
// An experiment fills a Section (the paper's claim, tables of measured numbers beside the paper's,
// a verdict, plots) and writes its raw numbers with Report::write_csv; repro.cpp adds each Section
// to the Report and calls write() after each one, so report.md always lists every experiment done
// so far (a long run stopped midway keeps them). A section that an earlier call finished comes back
// from its manifest (manifest.h) through add_made_earlier, its files as they are.
//
// Plots are made with gnuplot (Debian package gnuplot-nox, terminal pngcairo): for each plot the
// report folder gets NAME.dat (the series, one gnuplot data block each), NAME.gp (the script, so a
// reader can re-run or restyle it) and NAME.png. Curves differ in colour, dash pattern and marker
// shape at once, so that curves lying on top of each other stay distinguishable; the legend sits
// below the plot, and the y range is padded so that no curve runs along the frame. Without gnuplot
// the .dat and .gp files are still written, the report says that the plots are missing and why,
// and one warning goes to stderr; the run does not fail.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace mg::tools::repro {

// A markdown table: every row has header.size() cells.
struct Table {
  std::string caption{};  // a line above the table ("" for none)
  std::vector<std::string> header{};
  std::vector<std::vector<std::string>> rows{};
  std::string markdown() const;  // requires every row to have header.size() cells (mg::Error otherwise)
};

// One curve: points (x[i], y[i]); NaN y values are left out (a gap in the data).
// The line style of a curve that belongs to no variant (a reference, another way of counting).
constexpr int kNoVariantStyle = 8;

struct Series {
  std::string name{};  // the legend entry
  std::vector<double> x{}, y{};
  bool markers = false;  // points only, no line (events such as skipped steps)
  // Which of the 17 line styles (colour, dash pattern, marker shape) draws it; -1: its position in
  // the plot. A variant's curves take variant_style's (V2: 2, V8: 9), so that a variant looks the
  // same in every plot; style kNoVariantStyle (grey) is no variant's.
  int style = -1;
};

// A shaded range of x with a label at its top: the f16 ranges behind a histogram of exponents.
struct Band {
  double from = 0, to = 0;
  std::string label{};
  std::string color = "#999999";  // a gnuplot rgb colour
};

// A tick on the x axis with its own label ("V2 float16_master", "≤ -40").
struct Tick {
  double at = 0;
  std::string label{};
};

enum class PlotKind {
  lines,  // many x values (every logged step): a marker every few points, staggered between the
  // series, so that curves lying on top of each other each still show theirs
  points,  // few x values (evaluations, a sweep): lines with a marker at every point, each curve's
  // markers moved sideways by half a marker, so that equal values do not hide each other
  histogram,  // a histogram outline (x = bin centres)
  bars,  // categories (x = 0, 1, ..., named by x_ticks): the series' bars side by side in each
};

struct Plot {
  std::string name;  // file stem: NAME.png, NAME.gp, NAME.dat (letters, digits, '_' and '-')
  std::string title{}, x_label{}, y_label{};
  PlotKind kind = PlotKind::lines;
  int log_y = 0;  // the base (2 or 10) of a log-scale y axis; 0: linear
  double x_min = 0, x_max = 0;  // the x range when x_min < x_max, else the data's
  std::vector<Tick> x_ticks{};  // the x axis's ticks; empty: gnuplot's choice
  std::vector<Band> bands{};
  std::vector<Series> series{};
};

struct Section {
  std::string id{};  // "E2"
  std::string title{};  // "Master weights"
  std::string reference{};  // the paper's table or figure: "Figure 2a"
  std::string claim{};  // the paper's claim, in words, with its numbers
  std::string setup{};  // what was run here: model, data, steps, variants
  std::vector<Table> tables{};
  std::string verdict{};  // one or two sentences: reproduced or not, and why
  std::vector<Plot> plots{};
  std::vector<std::string> csv_files{};  // names of the CSVs with this section's numbers
};

class Report {
 public:
  // directory: created if missing (an mg::Error if it cannot be).
  explicit Report(std::string directory);

  const std::string& directory() const { return directory_; }
  // Writes DIR/name (a .csv) with a header line and rows of cells (quoted when they contain ',' or
  // '"'); returns name. Requires every row to have header.size() cells.
  std::string write_csv(const std::string& name, const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) const;
  // Appends a section; plots are made here (gnuplot runs once per plot).
  void add(Section section);
  // Appends a section an earlier call made into this directory (from its manifest, manifest.h): its
  // CSVs, .dat, .gp and PNG files are there already, so no plot is made again. `not_drawn`: its plots
  // that have no PNG, and why (as not_drawn() said then).
  void add_made_earlier(Section section, const std::map<std::string, std::string>& not_drawn);
  // The plots of the sections added that have no PNG, and why: "no gnuplot" or "gnuplot failed".
  const std::map<std::string, std::string>& not_drawn() const { return not_drawn_; }
  // Writes DIR/report.md: a header (preset, device, seed, date), a summary table of the sections,
  // then every section. Returns its path.
  std::string write(const std::string& preamble) const;

  bool have_gnuplot() const { return have_gnuplot_; }

 private:
  void make_plot(const Plot& plot);  // .dat, .gp and, with gnuplot, .png

  std::string directory_;
  bool have_gnuplot_ = false;
  std::map<std::string, std::string> not_drawn_;  // plot name -> why it has no PNG
  std::vector<Section> sections_;
};

// Number formatting shared by the experiments' tables: "87.35%", "0.912", "-" for NaN.
std::string percent(double fraction, int decimals = 2);
std::string number(double value, int significant = 3);

}  // namespace mg::tools::repro
