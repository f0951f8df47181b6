// E3's long run (Figure 2b over training): the MLP with E1's recipe for long_run_steps, its weight
// gradients recorded at every checkpoint, and the part of E3's section it fills (a table, a plot,
// e3_weights_over_training.csv and a sentence of the verdict). E3's own file holds the histograms.
#pragma once

#include <memory>
#include <string>

#include "tools/repro/e3_histograms.h"

namespace mg::tools::repro {

// Runs the long MLP run of `options` and fills result.long_run, long_run_weight_values and checkpoints.
void run_e3_long(const E3Options& options, std::shared_ptr<const ImageData> images, E3Result& result);

// The long run's table, plot and e3_weights_over_training.csv, added to `section`; returns the
// verdict's sentence about it. Requires result.checkpoints not empty.
std::string e3_long_run_part(const E3Result& result, const Report& report, Section& section);

}  // namespace mg::tools::repro
