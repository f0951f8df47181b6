// How `mixgrad train` stops when a signal of --stop-signals arrives (train/stop_signals.h): the ranks
// of a job agree on the step, rank 0 writes the checkpoint, one line says how to go on, and the
// process ends by the signal.
#pragma once

#include <cstdint>
#include <string>

#include "core/state_dict.h"
#include "tools/progress.h"
#include "tools/run_checkpoints.h"
#include "tools/train_options.h"
#include "train/stop_signals.h"
#include "train/trainer.h"

namespace mg::tools {

// Whether the run stops before its next step. A signal reaches the ranks of a job at different
// moments, or only one of them: the ranks agree before every step, with one all-reduce of an int on
// the host (dist::max_over_ranks, under a microsecond; bench/stop_agreement.cpp), so that every rank
// stops after the same step, by the same signal.
bool stop_agreed(train::StopSignals& stop, int ranks);

// The command that continues a stopped run: the one it was started with (options.command_line),
// with --resume naming `checkpoint`; prefixed with "mpirun -n N" on N > 1 ranks.
std::string resume_command(const TrainOptions& options, int ranks, const std::string& checkpoint);

// A run stopped by a signal: its checkpoint (rank 0 writes, the others wait for it), one line on
// stdout that says how to go on (or that nothing was saved, and how to ask), and the end of the
// process by the signal's default action.
[[noreturn]] void end_stopped_run(const TrainOptions& options, train::StopSignals& stop, train::Trainer& trainer,
                                  const StateDict& data_state, RunCheckpoints& checkpoints, const RunPosition& position,
                                  std::int64_t total, int ranks, bool lead, Progress& progress, MetricsLog& log);

}  // namespace mg::tools
