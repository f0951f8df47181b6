// The plots of `mixgrad train --inspect FILE`, written beside FILE (its stem STEM):
//
//   STEM_flushed.png    heatmap, layers x inspected steps: the share of each layer's activations,
//                       activation gradients, weight gradients and updates that the run's format (f16, or
//                       bf16 for the bf16 recipes) flushes to zero; log colour scale from 10^-4
//   STEM_underflow.png  the same for the share flushed or subnormal: a tensor stored in f16 has lost
//                       its flushed values already (they are zeros), and shows its subnormal band
//   STEM_lost.png       heatmap, layers x inspected steps: the share of each layer's updates lost
//   STEM_worst_f16.png  the log2|x| histograms of the worst layer (the largest mean flushed or subnormal share of its
//   STEM_worst_bf16.png activation gradients), one curve per kind merged over the inspected steps,
//   STEM_worst_e4m3.png against each format's ranges: the report's E3 figures' style and code
//   STEM_worst_e5m2.png (tools/repro/report.h); for FP8 each tensor's values times its scale (the
//                       CSV's e4m3_scale, e5m2_scale), to the nearest power of two
//
// Each plot comes with its .dat and .gp (re-run `gnuplot NAME.gp` in the folder to restyle it);
// without gnuplot those are still written and the PNGs are missing, with one warning.
#pragma once

#include <string>
#include <vector>

#include "amp/precision_stats.h"
#include "train/precision_inspector.h"

namespace mg::tools {

// The worst layer of `records`: the largest mean share of its activation gradients flushed or
// subnormal in `format` (weight gradients where no layer has activation gradients). "" when there are
// no records.
std::string worst_layer(const std::vector<train::LayerRecord>& records, DType format);

// Writes the plots above beside csv_path; returns the PNG files' paths that were meant to be made.
std::vector<std::string> write_inspection_plots(const std::vector<train::LayerRecord>& records,
                                                const std::string& csv_path, DType format);

}  // namespace mg::tools
