// How a `mixgrad repro` call stops the experiment under way when a signal asks it to (SIGINT, SIGTERM,
// SIGUSR1: train/stop_signals.h): its runs end before their next step, the experiment is abandoned
// (no manifest: it runs again next time), and the experiments finished before it stay complete.
//
//   train::StopSignals stop;
//   try {
//     ExperimentScope scope("E5", [&] { return stop.requested(); });
//     section = experiment.run(context, report);    // every repro::run inside checks between steps
//   } catch (const Stopped&) { ... say so, then stop.end_process(); }
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace mg::tools::repro {

// Thrown by repro::run (runner.h) between two steps when its ExperimentScope asks it to stop.
struct Stopped {};

// While it lives, the runs that repro::run makes belong to `experiment`: before each step they ask
// `stop_requested`, and throw Stopped when it says so. One at a time (an mg::Error otherwise);
// without one, a run neither stops nor pauses.
class ExperimentScope {
 public:
  ExperimentScope(std::string experiment, std::function<bool()> stop_requested);
  ~ExperimentScope();
  ExperimentScope(const ExperimentScope&) = delete;
  ExperimentScope& operator=(const ExperimentScope&) = delete;

  const std::string experiment;  // "E5"
  const std::function<bool()> stop_requested;
};

// Before each step of repro::run: throws Stopped when the ExperimentScope open now asks to stop.
void stop_if_requested();

// After step `step` (1-based) of repro::run, within an ExperimentScope: pause point
// "repro-step:EN:STEP" (core/test_pause.h). MG_TEST_PAUSE=repro-step:E10:3 holds each run of E10
// after its third step, until a signal comes.
void pause_point_after_step(std::int64_t step);

}  // namespace mg::tools::repro
