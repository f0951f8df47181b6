// The loss-scale rule's limits beyond PyTorch (a floor and a cap for the scale, hysteresis), and
// amp::ScaleMonitor: the GradScaler's counters and history read back after every update, the
// collapse alarm, and the one state dict of the scaler and its monitor.
#include <cfloat>
#include <cmath>

#include "tests/scaler_driver.h"

using namespace mg;
using namespace mg::testing;

TEST_CASE("rule: min_scale floor and max_scale cap") {
  Driver capped({.rule = {.growth_interval = 1, .max_scale = 131072}});
  run_script(capped, {{'c', true, 131072, 0, 0, -1}, {'c', true, 131072, 0, 0, -1}, {'i', false, 65536, 0, 1, 2}});
  Driver floored({.rule = {.min_scale = 16384}});
  run_script(floored, {{'i', false, 32768, 0, 1, 0},
                       {'n', false, 16384, 0, 2, 1},
                       {'i', false, 16384, 0, 3, 2},
                       {'c', true, 16384, 1, 3, 2}});
  check_error([&] { amp::GradScaler({.rule = {.max_scale = 1024}}); }, "init_scale 65536 lies outside");
  check_error([&] { amp::GradScaler({.rule = {.min_scale = 2, .max_scale = 1}}); }, "min_scale");
  check_error([&] { amp::GradScaler({.rule = {.hysteresis = 0}}); }, "hysteresis must be >= 1");
}

TEST_CASE("rule: hysteresis 3 backs off only after 3 consecutive overflows; a clean step resets the streak") {
  Driver d({.rule = {.growth_interval = 3, .hysteresis = 3}});
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

TEST_CASE(
    "monitor: one state dict resumes the scaler, its rule and the counters; a bad one is refused and changes nothing") {
  Driver d({.rule = {.growth_interval = 3, .hysteresis = 2, .min_scale = 2, .max_scale = 1e9}});
  for (char c : std::string("cciic")) d.run(c);
  const StateDict saved = d.monitor.state_dict();
  CHECK(scalars_of(saved) == std::map<std::string, double>{{"backoff_factor", 0.5},
                                                           {"consecutive_skips", 0},
                                                           {"dynamic", 1},
                                                           {"enabled", 1},
                                                           {"growth_factor", 2},
                                                           {"growth_interval", 3},
                                                           {"growth_tracker", 1},
                                                           {"hysteresis", 2},
                                                           {"last_overflow_step", 3},
                                                           {"max_scale", 1e9},
                                                           {"min_scale", 2},
                                                           {"overflow_streak", 0},
                                                           {"scale", 32768},
                                                           {"skipped_steps", 2},
                                                           {"steps", 5}});
  Driver resumed;
  resumed.monitor.load_state_dict(saved);
  CHECK(resumed.scaler.options().rule.hysteresis == 2);
  CHECK(resumed.scaler.options().rule.min_scale == 2);
  CHECK(resumed.scaler.get_scale() == 32768);
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
  refused([](StateDict& s) { s["bogus"] = state_scalar(2.0); }, "unknown key 'bogus'");
  refused([](StateDict& s) { s["scale"] = state_scalar(1.0); }, "lies outside");  // below min_scale
  refused([](StateDict& s) { s["skipped_steps"] = state_scalar(6.0); }, "inconsistent counters");  // > steps (5)
  refused([](StateDict& s) { s["last_overflow_step"] = state_scalar(5.0); }, "inconsistent counters");
  refused([](StateDict& s) { s["overflow_streak"] = state_scalar(2.0); }, "inconsistent counters");  // == hysteresis
  refused([](StateDict& s) { s["steps"] = state_scalar(4.5); }, "whole number");
  refused([](StateDict& s) { s["min_scale"] = state_scalar(2e9); }, "min_scale");
}
