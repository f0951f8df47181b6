// mixgrad train --profile FILE: every step after the first timed op by op (train/op_profile.h); at
// the end the table on standard output and the first profiled steps as a Chrome trace in FILE.
#pragma once

#include "tools/train_options.h"
#include "train/op_profile.h"

namespace mg::tools {

// Prints the profile's table (quiet or not: it is what was asked for) and writes its trace to
// options.profile, or says that no step was profiled. A trace that cannot be written is reported on
// standard error and the run goes on: it must not cost the run its checkpoint and evaluation.
void finish_profile(const train::OpProfile& profile, const TrainOptions& options);

}  // namespace mg::tools
