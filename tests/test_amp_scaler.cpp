// amp::GradScaler as a state machine: the scale, the tracker and the skip decision after every
// scripted step (clean, inf or NaN gradients), static mode, disabled, checkpoints, misuse, the
// unscale kernel itself, and where its numbers live (on the gradients' device, read only when asked).
// The rule's limits (hysteresis, floor, cap) and the monitor (counters, the collapse alarm) are in
// test_amp_scale_monitor.cpp.
// (That a skipped step leaves the optimizer untouched is tested in test_optim.cpp.)
#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>

#include "tests/scaler_driver.h"

using namespace mg;
using namespace mg::testing;

TEST_CASE("scaler: PyTorch's dynamic scaling, step by step (growth_interval 3)") {
  Driver d({.rule = {.growth_interval = 3}});
  CHECK(d.scaler.get_scale() == 65536.0);
  CHECK(d.monitor.last_overflow_step() == -1);
  run_script(d, {{'c', true, 65536, 1, 0, -1},
                 {'c', true, 65536, 2, 0, -1},
                 {'c', true, 131072, 0, 0, -1},
                 {'c', true, 131072, 1, 0, -1},
                 {'i', false, 65536, 0, 1, 4},  // overflow: x0.5, tracker reset
                 {'c', true, 65536, 1, 1, 4},
                 {'c', true, 65536, 2, 1, 4},
                 {'n', false, 32768, 0, 2, 7},
                 {'m', false, 16384, 0, 3, 8},
                 {'c', true, 16384, 1, 3, 8},
                 {'c', true, 16384, 2, 3, 8},
                 {'c', true, 32768, 0, 3, 8}});
}

TEST_CASE("scaler: the real default grows x2 after exactly 2000 clean steps, never +2 per step") {
  Driver d;
  d.run('c');
  // Regression: a C++ peer added 2 per clean step (65538 here) instead of doubling after the interval.
  CHECK(d.scaler.get_scale() == 65536.0);
  CHECK(d.scaler.growth_tracker() == 1);
  std::vector<Row> rows;
  for (std::int64_t i = 2; i <= 2000; ++i) rows.push_back({'c', true, i == 2000 ? 131072.0 : 65536.0, i % 2000, 0, -1});
  rows.push_back({'i', false, 65536, 0, 1, 2000});
  run_script(d, rows);
  // growth_interval 1: every clean step doubles (x2, not +2).
  Driver every({.rule = {.growth_interval = 1}});
  run_script(every, {{'c', true, 131072, 0, 0, -1}, {'c', true, 262144, 0, 0, -1}});
}

TEST_CASE("scaler: the scale never becomes inf") {
  // init FLT_MAX/2: one growth reaches FLT_MAX exactly, the next would pass it and is refused.
  Driver near({.init_scale = FLT_MAX / 2, .rule = {.growth_interval = 1}});
  run_script(near, {{'c', true, FLT_MAX, 0, 0, -1}, {'c', true, FLT_MAX, 0, 0, -1}});
  for (int i = 0; i < 50; ++i) {
    CHECK(near.run('c'));
    CHECK(std::isfinite(near.scaler.get_scale()));
    CHECK(near.scaler.get_scale() <= FLT_MAX);
  }
  CHECK(near.scaler.get_scale() == FLT_MAX);
  Driver pow2({.init_scale = std::ldexp(1.0, 127), .rule = {.growth_interval = 2}});  // 2^128 > FLT_MAX
  run_script(pow2, {{'c', true, std::ldexp(1.0, 127), 1, 0, -1}, {'c', true, std::ldexp(1.0, 127), 0, 0, -1}});
}

TEST_CASE("scaler: static mode keeps the scale and still skips overflowing steps") {
  Driver d({.init_scale = 1024, .rule = {.growth_interval = 1}, .dynamic = false});
  run_script(d, {{'c', true, 1024, 0, 0, -1},
                 {'c', true, 1024, 0, 0, -1},
                 {'i', false, 1024, 0, 1, 2},
                 {'n', false, 1024, 0, 2, 3},
                 {'c', true, 1024, 0, 2, 3}});
}

TEST_CASE("scaler: a disabled scaler is transparent") {
  Driver d({.enabled = false});
  Tensor loss = full({}, 3.0);
  CHECK(d.scaler.scale(loss).id() == loss.id());
  d.w.set_grad(from_vector({0.5, 0.25}, {2}));
  d.scaler.unscale_(d.sgd);  // no-op: the gradient is not divided
  check_values(d.w.grad(), {0.5, 0.25});
  CHECK(d.scaler.step(d.sgd));
  CHECK(d.scaler.step(d.sgd));  // no stage tracking either: a plain optimizer step
  check_values(d.w.to(DType::F64), {1.0 - 0.5, -2.0 - 0.25});
  d.scaler.update();
  d.scaler.update();  // no step required: update() does nothing
  CHECK(d.monitor.steps() == 0);
  CHECK(d.monitor.history().empty());
  CHECK(d.scaler.get_scale() == 1.0);  // PyTorch: 1.0 when scaling is disabled
  CHECK(d.sgd.step_count() == 2);
}

TEST_CASE("scaler: state_dict/load_state_dict resumes every script position identically") {
  const std::string script = "cicciicccccniicc";
  const amp::GradScalerOptions options{.rule = {.growth_interval = 3, .hysteresis = 2}};
  const amp::ScaleMonitorOptions monitor_options{};
  struct State {
    bool stepped;
    double scale;
    std::int64_t tracker, steps, skipped, last;
  };
  auto state_of = [](Driver& d, bool stepped) {
    return State{stepped,           d.scaler.get_scale(),      d.scaler.growth_tracker(),
                 d.monitor.steps(), d.monitor.skipped_steps(), d.monitor.last_overflow_step()};
  };
  Driver reference(options, monitor_options);
  std::vector<State> expected;
  for (char c : script) expected.push_back(state_of(reference, reference.run(c)));
  for (std::size_t split = 1; split < script.size(); ++split) {
    Driver first(options, monitor_options);
    for (std::size_t i = 0; i < split; ++i) first.run(script[i]);
    Driver resumed;  // default options: everything comes from the state dicts
    resumed.scaler.load_state_dict(first.scaler.state_dict());
    resumed.monitor.load_state_dict(first.monitor.state_dict());
    CHECK(scalars_of(resumed.scaler.state_dict()) == scalars_of(first.scaler.state_dict()));
    CHECK(scalars_of(resumed.monitor.state_dict()) == scalars_of(first.monitor.state_dict()));
    for (std::size_t i = split; i < script.size(); ++i) {
      INFO("split " << split << ", step " << i);
      const State got = state_of(resumed, resumed.run(script[i]));
      CHECK(got.stepped == expected[i].stepped);
      CHECK(got.scale == expected[i].scale);
      CHECK(got.tracker == expected[i].tracker);
      CHECK(got.steps == expected[i].steps);
      CHECK(got.skipped == expected[i].skipped);
      CHECK(got.last == expected[i].last);
    }
  }
}

TEST_CASE("scaler: a bad state dict is refused and changes nothing") {
  Driver d({.rule = {.growth_interval = 3}});
  for (char c : std::string("ccic")) d.run(c);
  const auto before = scalars_of(d.scaler.state_dict());
  auto refused = [&](auto edit, const std::string& needle) {
    StateDict state = d.scaler.state_dict();
    edit(state);
    check_error([&] { d.scaler.load_state_dict(state); }, needle);
    CHECK(scalars_of(d.scaler.state_dict()) == before);
  };
  refused([](StateDict& s) { s.erase("growth_tracker"); }, "'growth_tracker' is missing");
  refused([](StateDict& s) { s["bogus"] = state_scalar(1.0); }, "unknown key 'bogus'");
  refused([](StateDict& s) { s["scale"] = state_scalar(0.0); }, "> 0");
  refused([](StateDict& s) { s["scale"] = state_scalar(-65536.0); }, "> 0");
  refused([](StateDict& s) { s["growth_tracker"] = state_scalar(3.0); },
          "inconsistent counters");  // == growth_interval
  refused([](StateDict& s) { s["growth_interval"] = state_scalar(4.5); }, "whole number");
  refused([](StateDict& s) { s["skipped_steps"] = state_scalar(1.0); },
          "unknown key 'skipped_steps'");  // the monitor's
}

TEST_CASE("scaler: misuse of the step protocol is a clear error") {
  Driver d;
  d.w.set_grad(from_vector({1, 1}, {2}));
  check_error([&] { d.scaler.update(); }, "call step(optimizer) (or unscale_) before update()");
  d.scaler.unscale_(d.sgd);
  check_error([&] { d.scaler.unscale_(d.sgd); }, "unscale_: already called for optim::SGD");
  CHECK(d.scaler.step(d.sgd));
  check_error([&] { d.scaler.unscale_(d.sgd); }, "called after step()");
  check_error([&] { d.scaler.step(d.sgd); }, "step: already called for optim::SGD");
  d.monitor.update();
  CHECK(d.monitor.steps() == 1);
  CHECK(d.sgd.step_count() == 1);  // the refused calls did not step again
}

TEST_CASE("scaler: an error inside step() ends the iteration; the next one starts clean") {
  Driver d;
  Tensor v = from_vector({3.0}, {1}, {.requires_grad = true});
  optim::SGD other{{v}, {.lr = 0.5}};
  bool fail = false;  // the schedule throws inside optimizer.step(), as a failed allocation would
  d.sgd.set_schedule([&](std::int64_t) {
    if (fail) throw Error("planted failure");
    return 1.0;
  });
  auto gradients = [&] {
    d.w.set_grad(from_vector({0.25, 0.5}, {2}));
    v.set_grad(from_vector({1.0}, {1}));
  };
  // The first optimizer stepped, the second unscaled, then its step failed: without the clean-up
  // the next iteration's unscale_ and step would be refused as repeated calls.
  gradients();
  CHECK(d.scaler.step(other));
  d.scaler.unscale_(d.sgd);
  fail = true;
  check_error([&] { d.scaler.step(d.sgd); }, "planted failure");
  fail = false;
  check_error([&] { d.scaler.update(); }, "before update()");  // nothing of the failed iteration is left
  CHECK(d.scaler.get_scale() == 65536);
  gradients();
  CHECK(d.scaler.step(other));
  d.scaler.unscale_(d.sgd);
  CHECK(d.scaler.step(d.sgd));
  d.monitor.update(&d.sgd);
  CHECK(d.monitor.steps() == 1);
  CHECK(d.monitor.skipped_steps() == 0);
  CHECK(d.sgd.step_count() == 1);
  CHECK(other.step_count() == 2);
  CHECK(d.scaler.growth_tracker() == 1);  // one clean update since the start: the failed one did not count
}

TEST_CASE("scaler: scale(loss) multiplies by the scale and the gradients by the same") {
  amp::GradScaler scaler({.init_scale = 1024});
  Tensor w = from_vector({0.5, -1.5}, {2}, {.requires_grad = true});
  Tensor loss = sum(mul(w, w));  // 2.5; dloss/dw = 2w
  Tensor scaled = scaler.scale(loss);
  CHECK(scaled.item() == 2.5 * 1024);
  CHECK(scaled.dtype() == DType::F32);
  backward(scaled);
  check_values(w.grad(), {1.0 * 1024, -3.0 * 1024}, 0.0, 0.0);
}

TEST_CASE("scaler: unscale_ then step divides the gradients exactly once") {
  Driver d;
  const double s = d.scaler.get_scale();
  d.w.set_grad(from_vector({s * 0.5, s * 0.25}, {2}));
  d.scaler.unscale_(d.sgd);
  check_values(d.w.grad(), {0.5, 0.25}, 0.0, 0.0);
  CHECK(d.scaler.step(d.sgd));
  check_values(d.w.grad(), {0.5, 0.25}, 0.0, 0.0);  // not divided again
  check_values(d.w, {1.0 - 0.5 * 0.5, -2.0 - 0.5 * 0.25}, 0.0, 0.0);  // lr 0.5, all exact
  d.scaler.update();
}

TEST_CASE("scaler: unscaling is exact for powers of two; inf/NaN is found in any parameter") {
  // Three f32 parameters; the last spans two chunks of the CPU kernel (1024 elements each).
  std::vector<Tensor> params{zeros({5}, {.requires_grad = true}), zeros({2, 3}, {.requires_grad = true}),
                             zeros({1500}, {.requires_grad = true})};
  optim::SGD sgd(params, {.lr = 1.0});
  amp::GradScaler scaler;
  std::vector<Tensor> truth;
  for (std::size_t i = 0; i < params.size(); ++i) {
    Generator gen(10 + i);
    truth.push_back(uniform(params[i].shape(), -4.0, 4.0, gen));
  }
  auto set_scaled = [&] {
    for (std::size_t i = 0; i < params.size(); ++i) params[i].set_grad(mul(truth[i], scaler.get_scale()));
  };
  set_scaled();
  scaler.unscale_(sgd);
  for (std::size_t i = 0; i < params.size(); ++i)
    check_values(params[i].grad(), truth[i].to_vector<double>(), 0.0, 0.0);
  amp::ScaleMonitor monitor(scaler);
  CHECK(scaler.step(sgd));
  monitor.update(&sgd);
  CHECK(monitor.nonfinite_parameters().empty());

  auto poison = [&](std::size_t p, double value) {
    std::vector<double> g = params[p].grad().to_vector<double>();
    g[g.size() - 1 - (p == 2 ? 50 : 0)] = value;  // in the second chunk for the big one
    params[p].set_grad(from_vector(g, params[p].shape()));
  };
  for (double bad : {kInf, -kInf, kNaN}) {
    for (std::size_t p = 0; p < params.size(); ++p) {
      INFO("parameter " << p << " gets " << bad);
      const std::vector<double> w_before = params[2].to_vector<double>();
      set_scaled();
      poison(p, bad);
      CHECK_FALSE(scaler.step(sgd));
      monitor.update(&sgd);
      CHECK(monitor.nonfinite_parameters() == std::vector<std::size_t>{p});
      CHECK(params[2].to_vector<double>() == w_before);
    }
  }
  set_scaled();
  poison(0, kNaN);
  poison(2, kInf);
  CHECK_FALSE(scaler.step(sgd));
  monitor.update(&sgd);
  CHECK(monitor.nonfinite_parameters() == std::vector<std::size_t>{0, 2});
}

TEST_CASE("scaler: bf16 losses, regions and gradients warn once per scaler") {
  {
    WarningCapture capture;
    amp::GradScaler scaler;
    Tensor loss = full({}, 2.0, {.dtype = DType::BF16});
    check_values(scaler.scale(loss), {2.0 * 65536});
    scaler.scale(loss);
    REQUIRE(capture.messages.size() == 1);
    CHECK(capture.messages[0].find("bf16") != std::string::npos);
  }
  {
    WarningCapture capture;
    amp::GradScaler scaler;
    Autocast region(DType::BF16);
    scaler.scale(full({}, 2.0));  // an f32 loss, but the region is bf16
    scaler.scale(full({}, 2.0));
    CHECK(capture.messages.size() == 1);
  }
  {
    WarningCapture capture;
    amp::GradScaler scaler;
    Tensor w = zeros({2}, {.dtype = DType::BF16, .requires_grad = true});
    optim::SGD sgd({w});
    w.set_grad(ones({2}, {.dtype = DType::BF16}));
    scaler.unscale_(sgd);
    CHECK(capture.messages.size() == 1);
  }
  {
    WarningCapture capture;  // f16 is what the scaler is for: silent
    amp::GradScaler scaler;
    Autocast region(DType::F16);
    scaler.scale(full({}, 2.0));
    CHECK(capture.messages.empty());
    // An f16 loss cannot carry a scale above 65504: its own gradient would be inf. Warned once.
    scaler.scale(full({}, 2.0, {.dtype = DType::F16}));
    scaler.scale(full({}, 2.0, {.dtype = DType::F16}));
    REQUIRE(capture.messages.size() == 1);
    CHECK(capture.messages[0].find("65504") != std::string::npos);
  }
}
