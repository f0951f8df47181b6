// A clean stop on a signal: a training loop that is asked to stop (Ctrl-C, a scheduler's SIGTERM, a
// preemption warning such as SLURM's SIGUSR1) finishes its step, saves, and only then ends.
//
//   train::StopSignals stop;                       // SIGINT, SIGTERM, SIGUSR1 from here on
//   for (step = ...; step < total && !stop.requested(); ++step) trainer.step(...);
//   if (stop.requested()) {
//     train::save_checkpoint(...);
//     stop.end_process();                          // ends as the signal would have: status 128 + signal
//   }
//
// The first signal only sets a flag (its handler does nothing else), which the loop reads between
// steps. A second signal ends the process at once, with the signal's default action, wherever it is:
// a checkpoint being written then is left as a temporary file and the previous one stays whole
// (train/checkpoint.h). end_process() re-raises the signal with its default action, so the shell sees
// 130 for SIGINT and 143 for SIGTERM, and a script that ran the program stops as well. A signal whose
// default action is not to end the process (none of the three) ends it with status 128 + signal.
//
// One StopSignals at a time per process; destroying it puts back the handlers it replaced.
#pragma once

#include <signal.h>

#include <string>
#include <vector>

namespace mg::train {

// SIGINT, SIGTERM and SIGUSR1.
std::vector<int> default_stop_signals();
// "INT,TERM,USR1": signal names, with or without "SIG", in any case, separated by commas. An
// mg::Error names a signal it does not know, and SIGKILL and SIGSTOP, which cannot be caught.
std::vector<int> parse_signals(const std::string& text);
// "SIGTERM".
std::string signal_name(int signal);

class StopSignals {
 public:
  explicit StopSignals(const std::vector<int>& signals = default_stop_signals());
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Whether a signal has arrived (or request() was called).
  bool requested() const;
  // The first signal that arrived; 0 before.
  int signal() const;
  // As if `signal` had arrived: how the ranks of a data-parallel job that agreed to stop all stop
  // the same way, whichever of them the signal reached.
  void request(int signal);
  // Flushes stdout and stderr and ends the process with signal()'s default action. Requires requested().
  [[noreturn]] void end_process() const;

 private:
  std::vector<int> signals_;
  std::vector<struct sigaction> previous_;  // the handlers replaced, one per signal
};

}  // namespace mg::train
