#include "tools/inspect_plots.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>

#include "core/error.h"
#include "tools/repro/e3_histograms.h"
#include "tools/repro/report.h"
#include "tools/shell_quoted.h"

namespace mg::tools {

namespace fs = std::filesystem;
using amp::GradientStats;
using repro::Band;
using repro::Plot;
using repro::PlotKind;
using repro::Series;
using repro::Tick;
using train::LayerRecord;
using train::TensorKind;

namespace {

constexpr double kShareFloor = 1e-4;  // the heatmaps' log colour scale starts here (and zero shows as it)

// A file stem a plot name may carry: letters, digits, '_' and '-'.
std::string plot_stem(const std::string& csv_path) {
  std::string stem = fs::path(csv_path).stem().string();
  for (char& ch : stem)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-') ch = '_';
  return stem.empty() ? std::string("inspect") : stem;
}

std::string quoted(const std::string& text) {
  std::string out;
  for (char ch : text)
    if (ch != '"' && ch != '\\') out += ch;
  return "\"" + out + "\"";
}

// One heatmap: rows (bottom to top) x the inspected steps, value(record) of each cell.
struct Heatmap {
  std::string name, title, colour_label;
  std::vector<std::pair<std::string, TensorKind>> rows = {};  // layer, kind
  bool label_kind = true;
};

void write_heatmap(const Heatmap& map, const std::vector<LayerRecord>& records, const std::vector<std::int64_t>& steps,
                   const std::string& directory, const std::function<double(const LayerRecord&)>& value) {
  const fs::path dir(directory);
  std::map<std::pair<std::size_t, std::int64_t>, double> cells;
  for (const LayerRecord& r : records)
    for (std::size_t row = 0; row < map.rows.size(); ++row)
      if (map.rows[row].first == r.layer && map.rows[row].second == r.kind)
        cells[{row, r.step}] = std::max(value(r), kShareFloor);
  {
    std::ofstream data(dir / (map.name + ".dat"));
    MG_CHECK(data.good(), "mixgrad train --inspect: cannot write {}.dat in {}", map.name, directory);
    data << "# inspected step index, row, share (" << kShareFloor << " stands for anything below it)\n";
    for (std::size_t column = 0; column < steps.size(); ++column) {
      for (std::size_t row = 0; row < map.rows.size(); ++row) {
        const auto cell = cells.find({row, steps[column]});
        data << fmt::format("{} {} {:.6g}\n", column, row, cell == cells.end() ? NAN : cell->second);
      }
      data << "\n";
    }
  }
  std::string ytics, xtics;
  for (std::size_t row = 0; row < map.rows.size(); ++row)
    ytics += fmt::format("{}{} {}", row ? ", " : "",
                         quoted(map.label_kind ? map.rows[row].first + " " + kind_name(map.rows[row].second)
                                               : map.rows[row].first),
                         row);
  const std::size_t stride = std::max<std::size_t>(1, steps.size() / 10);
  for (std::size_t column = 0; column < steps.size(); column += stride)
    xtics += fmt::format("{}\"{}\" {}", column ? ", " : "", steps[column], column);
  const std::string script =
      fmt::format("# Made by `mixgrad train --inspect`; run `gnuplot {0}.gp` in this folder to redraw.\n"
                  "set terminal pngcairo size 900,{1} font \"sans,10\"\n"
                  "set termoption noenhanced\n"
                  "set output \"{0}.png\"\n"
                  "set title {2}\n"
                  "set xlabel \"step\"\n"
                  "set ylabel \"layer\"\n"
                  "set xtics ({3})\n"
                  "set ytics ({4})\n"
                  "set xrange [-0.5:{5}]\n"
                  "set yrange [-0.5:{6}]\n"
                  "set logscale cb\n"
                  "set cbrange [{7}:1]\n"
                  "set cblabel {8}\n"
                  "set palette defined (0 \"#fff7ec\", 1 \"#fdd49e\", 2 \"#fc8d59\", 3 \"#d7301f\", 4 \"#7f0000\")\n"
                  "set datafile missing NaN\n"
                  "plot \"{0}.dat\" using 1:2:3 with image notitle\n",
                  map.name, 200 + 28 * map.rows.size(), quoted(map.title), xtics, ytics, steps.size() - 0.5,
                  map.rows.size() - 0.5, kShareFloor, quoted(map.colour_label));
  std::ofstream gp(dir / (map.name + ".gp"));
  gp << script;
  gp.close();
  const std::string command = fmt::format("cd {} && gnuplot {} >{} 2>&1", shell_quoted(directory),
                                          shell_quoted(map.name + ".gp"), shell_quoted(map.name + ".gnuplot.log"));
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) return;  // Report warns once, below
  if (std::system(command.c_str()) == 0)
    fs::remove(dir / (map.name + ".gnuplot.log"));
  else
    fmt::print(stderr, "mixgrad train --inspect: warning: gnuplot failed on {}.gp; see {}.gnuplot.log in {}\n",
               map.name, map.name, directory);
}

}  // namespace

std::string worst_layer(const std::vector<LayerRecord>& records, DType format) {
  for (TensorKind kind : {TensorKind::ActivationGrad, TensorKind::WeightGrad}) {
    std::map<std::string, std::pair<double, int>> sums;
    for (const LayerRecord& r : records)
      if (r.kind == kind) {
        sums[r.layer].first += r.stats.share(format, amp::Outcome::Flushed) +
                               r.stats.share(format, amp::Outcome::Subnormal);
        ++sums[r.layer].second;
      }
    std::string worst;
    double worst_share = -1;
    for (const auto& [layer, sum] : sums)
      if (sum.first / sum.second > worst_share) {
        worst_share = sum.first / sum.second;
        worst = layer;
      }
    if (!worst.empty()) return worst;
  }
  return "";
}

std::vector<std::string> write_inspection_plots(const std::vector<LayerRecord>& records, const std::string& csv_path,
                                                DType format) {
  if (records.empty()) return {};
  const fs::path parent = fs::path(csv_path).parent_path();
  const std::string directory = parent.empty() ? std::string(".") : parent.string();
  const std::string stem = plot_stem(csv_path);
  const std::string name(dtype_name(format));
  std::vector<std::int64_t> steps;
  std::vector<std::string> layers;  // first seen first
  for (const LayerRecord& r : records) {
    if (std::find(steps.begin(), steps.end(), r.step) == steps.end()) steps.push_back(r.step);
    if (std::find(layers.begin(), layers.end(), r.layer) == layers.end()) layers.push_back(r.layer);
  }
  std::sort(steps.begin(), steps.end());
  auto present = [&](const std::string& layer, TensorKind kind) {
    return std::any_of(records.begin(), records.end(),
                       [&](const LayerRecord& r) { return r.layer == layer && r.kind == kind; });
  };
  Heatmap flushed{.name = stem + "_flushed",
                  .title = fmt::format("share flushed to zero in {}, per layer and inspected step", name),
                  .colour_label = fmt::format("flushed in {}", name)};
  Heatmap lost{.name = stem + "_lost",
               .title = "share of the updates lost (the stored value did not change)",
               .colour_label = "lost",
               .label_kind = false};
  for (TensorKind kind :
       {TensorKind::Activation, TensorKind::ActivationGrad, TensorKind::WeightGrad, TensorKind::Update})
    for (const std::string& layer : layers)
      if (present(layer, kind)) flushed.rows.push_back({layer, kind});
  for (const std::string& layer : layers)
    if (present(layer, TensorKind::Update)) lost.rows.push_back({layer, TensorKind::Update});
  // A tensor stored in f16 has lost its flushed values already (they are zeros): what still shows is
  // the subnormal band just above, so the second heatmap adds it.
  Heatmap underflow = flushed;
  underflow.name = stem + "_underflow";
  underflow.title = fmt::format("share flushed to zero or subnormal in {}, per layer and inspected step", name);
  underflow.colour_label = fmt::format("flushed or subnormal in {}", name);
  std::vector<std::string> made;
  write_heatmap(flushed, records, steps, directory,
                [&](const LayerRecord& r) { return r.stats.share(format, amp::Outcome::Flushed); });
  made.push_back((fs::path(directory) / (flushed.name + ".png")).string());
  write_heatmap(underflow, records, steps, directory, [&](const LayerRecord& r) {
    return r.stats.share(format, amp::Outcome::Flushed) + r.stats.share(format, amp::Outcome::Subnormal);
  });
  made.push_back((fs::path(directory) / (underflow.name + ".png")).string());
  if (!lost.rows.empty()) {
    write_heatmap(lost, records, steps, directory,
                  [](const LayerRecord& r) { return r.lost ? r.lost->fraction() : 0; });
    made.push_back((fs::path(directory) / (lost.name + ".png")).string());
  }

  // The worst layer's histograms, one curve per kind over every inspected step, against each
  // format's ranges. For FP8 each tensor's histogram is first moved by its scale (the per-tensor
  // current scale the CSV's e4m3_scale / e5m2_scale columns hold), to the nearest power of two: the
  // bins are whole powers of two, so a scale between two of them is drawn at the nearer.
  const std::string worst = worst_layer(records, format);
  repro::Report report(directory);
  repro::Section section{.id = "inspect"};
  for (DType range : amp::kAllFormats) {
    std::map<TensorKind, GradientStats> merged;
    for (const LayerRecord& r : records) {
      if (r.layer != worst) continue;
      GradientStats moved = r.stats.values;
      if (is_fp8(range)) {
        const double scale = r.stats.fp8_scale[range == DType::E4M3 ? 0 : 1];
        const int shift = static_cast<int>(std::lround(std::log2(scale)));
        moved.histogram.fill(0);
        for (int k = 0; k < GradientStats::kBins; ++k)
          moved.histogram[static_cast<std::size_t>(std::clamp(k + shift, 0, GradientStats::kBins - 1))] +=
              r.stats.values.histogram[static_cast<std::size_t>(k)];
      }
      merged[r.kind].merge(moved);
    }
    Plot plot{.name = fmt::format("{}_worst_{}", stem, dtype_name(range)),
              .title = fmt::format("layer {} (the most underflowing), all inspected steps, {}with {}'s ranges", worst,
                                   is_fp8(range) ? "scaled, " : "", dtype_name(range)),
              .x_label = is_fp8(range) ? "log2 |x scale|" : "log2 |x|",
              .y_label = "fraction of values",
              .kind = PlotKind::histogram,
              .log_y = 10,
              .x_min = GradientStats::kMinExponent,
              .x_max = repro::kGradientAxisEnd,
              .x_ticks = repro::gradient_exponent_ticks(),
              .bands = repro::format_bands(range)};
    for (const auto& [kind, stats] : merged) plot.series.push_back(repro::histogram_series(kind_name(kind), stats));
    made.push_back((fs::path(directory) / (plot.name + ".png")).string());
    section.plots.push_back(std::move(plot));
  }
  report.add(std::move(section));
  return made;
}

}  // namespace mg::tools
