// A GradScaler driven through scripted steps, for test_amp_scaler.cpp and test_amp_scale_monitor.cpp:
// one f32 parameter with SGD; each run() sets its .grad (scaled by the current scale, like a real
// backward of scale(loss)), then scaler.step and the monitor's update (scaler.update() and the
// record). Kinds: 'c' clean, 'i' +inf, 'm' -inf, 'n' NaN. run_script checks every row.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tests/testing.h"

namespace mg::testing {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Collects warnings while alive (restores the previous handler on exit).
struct WarningCapture {
  std::vector<std::string> messages;
  WarningHandler previous;
  WarningCapture() {
    previous = set_warning_handler([this](const std::string& m) { messages.push_back(m); });
  }
  ~WarningCapture() { set_warning_handler(previous); }
};

struct Driver {
  Tensor w = from_vector({1.0, -2.0}, {2}, {.requires_grad = true});
  optim::SGD sgd{{w}, {.lr = 0.5}};
  amp::GradScaler scaler;
  amp::ScaleMonitor monitor;
  explicit Driver(amp::GradScalerOptions options = {}, amp::ScaleMonitorOptions monitor_options = {})
      : scaler(options), monitor(scaler, monitor_options) {}
  bool run(char kind) {
    const double bad = kind == 'i' ? kInf : kind == 'm' ? -kInf : kind == 'n' ? kNaN : 0.5;
    w.set_grad(from_vector({scaler.get_scale() * 0.25, kind == 'c' ? scaler.get_scale() * 0.5 : bad}, {2}));
    const bool stepped = scaler.step(sgd);
    monitor.update(&sgd);
    return stepped;
  }
};

struct Row {
  char grad;
  bool stepped;
  double scale;  // after update()
  std::int64_t tracker, skipped, last_overflow;
};

inline void run_script(Driver& d, const std::vector<Row>& rows) {
  for (const Row& row : rows) {
    const std::int64_t index = d.monitor.steps();
    const double used = d.scaler.get_scale();
    INFO("step " << index << " (gradient '" << row.grad << "', scale before " << used << ")");
    CHECK(d.run(row.grad) == row.stepped);
    CHECK(d.scaler.get_scale() == row.scale);
    CHECK(d.scaler.growth_tracker() == row.tracker);
    CHECK(d.monitor.steps() == index + 1);
    CHECK(d.monitor.skipped_steps() == row.skipped);
    CHECK(d.monitor.last_overflow_step() == row.last_overflow);
    REQUIRE(d.monitor.history().size() == static_cast<std::size_t>(index + 1));
    CHECK(d.monitor.history().back().scale == used);
    CHECK(d.monitor.history().back().skipped == !row.stepped);
    CHECK(d.sgd.step_count() == index + 1 - row.skipped);  // a skipped step never changed the optimizer
  }
}

}  // namespace mg::testing
