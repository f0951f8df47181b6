// amp::ScaleMonitor: the GradScaler's counters and history read back after every update, and the
// policies beyond PyTorch that it applies off the path of a step: a floor and a cap for the scale,
// hysteresis, the collapse alarm; its state in checkpoints.
#include <cfloat>
#include <cmath>

#include "tests/scaler_driver.h"

using namespace mg;
using namespace mg::testing;

TEST_CASE("monitor: min_scale floor and max_scale cap") {
  Driver capped({.growth_interval = 1}, {.max_scale = 131072});
  run_script(capped, {{'c', true, 131072, 0, 0, -1}, {'c', true, 131072, 0, 0, -1}, {'i', false, 65536, 0, 1, 2}});
  Driver floored({}, {.min_scale = 16384});
  run_script(floored, {{'i', false, 32768, 0, 1, 0},
                       {'n', false, 16384, 0, 2, 1},
                       {'i', false, 16384, 0, 3, 2},
                       {'c', true, 16384, 1, 3, 2}});
  amp::GradScaler scaler;
  check_error([&] { amp::ScaleMonitor(scaler, {.max_scale = 1024}); }, "init_scale 65536 lies outside");
  check_error([&] { amp::ScaleMonitor(scaler, {.min_scale = 2, .max_scale = 1}); }, "min_scale");
  check_error([&] { amp::ScaleMonitor(scaler, {.hysteresis = 0}); }, "hysteresis must be >= 1");
}

TEST_CASE("monitor: hysteresis 3 backs off only after 3 consecutive overflows; a clean step resets the streak") {
  Driver d({.growth_interval = 3}, {.hysteresis = 3});
  run_script(d, {{'i', false, 65536, 0, 1, 0},
                 {'i', false, 65536, 0, 2, 1},
                 {'i', false, 32768, 0, 3, 2},
                 {'i', false, 32768, 0, 4, 3},  // the streak restarted after the backoff
                 {'c', true, 32768, 1, 4, 3},  // ... and a clean step resets it
                 {'i', false, 32768, 0, 5, 5},
                 {'n', false, 32768, 0, 6, 6},
                 {'i', false, 16384, 0, 7, 7}});
}

TEST_CASE("monitor: the collapse alarm warns once per run of skipped steps, or throws") {
  WarningCapture capture;
  Driver d({}, {.collapse_patience = 5});
  for (int i = 0; i < 4; ++i) d.run('i');
  CHECK(capture.messages.empty());
  d.run('n');
  REQUIRE(capture.messages.size() == 1);
  CHECK(capture.messages[0].find("last 5 steps") != std::string::npos);
  CHECK(capture.messages[0].find("OverflowDetector") != std::string::npos);
  for (int i = 0; i < 3; ++i) d.run('i');
  CHECK(capture.messages.size() == 1);  // once until a clean step
  d.run('c');
  for (int i = 0; i < 4; ++i) d.run('i');
  CHECK(capture.messages.size() == 1);  // the clean step restarted the count
  d.run('i');
  CHECK(capture.messages.size() == 2);

  Driver strict({}, {.collapse_patience = 5, .error_on_collapse = true});
  for (int i = 0; i < 4; ++i) strict.run('i');
  check_error([&] { strict.run('i'); }, "were skipped");
  CHECK(capture.messages.size() == 2);  // thrown, not warned
}

TEST_CASE("monitor: state_dict resumes the counters and the policy; a bad one is refused and changes nothing") {
  Driver d({.growth_interval = 3}, {.min_scale = 2, .max_scale = 1e9, .hysteresis = 2});
  for (char c : std::string("cciic")) d.run(c);
  const StateDict saved = d.monitor.state_dict();
  CHECK(scalars_of(saved) == std::map<std::string, double>{{"consecutive_skips", 0},
                                                           {"hysteresis", 2},
                                                           {"last_overflow_step", 3},
                                                           {"max_scale", 1e9},
                                                           {"min_scale", 2},
                                                           {"overflow_streak", 0},
                                                           {"skipped_steps", 2},
                                                           {"steps", 5}});
  Driver resumed;
  resumed.monitor.load_state_dict(saved);
  CHECK(resumed.monitor.options().hysteresis == 2);
  CHECK(resumed.monitor.options().min_scale == 2);
  CHECK(resumed.monitor.skipped_steps() == 2);
  CHECK(resumed.monitor.history().empty());  // not state: a resumed run's history starts at the resume
  const auto before = scalars_of(d.monitor.state_dict());
  auto refused = [&](auto edit, const std::string& needle) {
    StateDict state = saved;
    edit(state);
    check_error([&] { d.monitor.load_state_dict(state); }, needle);
    CHECK(scalars_of(d.monitor.state_dict()) == before);
  };
  refused([](StateDict& s) { s.erase("steps"); }, "'steps' is missing");
  refused([](StateDict& s) { s["scale"] = state_scalar(2.0); }, "unknown key 'scale'");  // the scaler's
  refused([](StateDict& s) { s["skipped_steps"] = state_scalar(6.0); }, "inconsistent counters");  // > steps (5)
  refused([](StateDict& s) { s["last_overflow_step"] = state_scalar(5.0); }, "inconsistent counters");
  refused([](StateDict& s) { s["overflow_streak"] = state_scalar(2.0); }, "inconsistent counters");  // == hysteresis
  refused([](StateDict& s) { s["steps"] = state_scalar(4.5); }, "whole number");
  refused([](StateDict& s) { s["min_scale"] = state_scalar(2e9); }, "min_scale");
}
