#include "train/op_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#ifdef MG_WITH_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace mg::train {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::Forward:
      return "forward";
    case Phase::Backward:
      return "backward";
    case Phase::Update:
      return "update";
  }
  return "?";
}

namespace {

constexpr std::size_t kNone = static_cast<std::size_t>(-1);
constexpr const char* kOutside = "outside ops";

double host_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double bytes_of(const Tensor& t) { return t.defined() ? static_cast<double>(dtype_bytes(t.dtype(), t.numel())) : 0.0; }

}  // namespace

// Marks "now" on the device's own clock, and reads a step's marks back at its end.
struct OpProfile::Clock {
  explicit Clock(Device on) : device(on) {}
  ~Clock() {
#ifdef MG_WITH_CUDA
    for (cudaEvent_t event : events) cudaEventDestroy(event);  // no check: a destructor must not throw
#endif
  }
  Clock(const Clock&) = delete;
  Clock& operator=(const Clock&) = delete;

  std::size_t mark() {
    if (used == 0) step_start = host_seconds();
#ifdef MG_WITH_CUDA
    if (device.is_cuda()) {
      // An event on the stream every op is queued on: it happens when the work queued before it is done.
      if (used == events.size()) {
        const cuda::DeviceGuard guard(device.index);
        cudaEvent_t event = nullptr;
        MG_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDefault));
        events.push_back(event);
      }
      MG_CUDA_CHECK(cudaEventRecord(events[used], cuda::stream(device.index)));
      return used++;
    }
#endif
    if (used == host.size()) host.push_back(0);
    host[used] = host_seconds();
    return used++;
  }

  // Each mark's seconds since the step's first; one host wait on a GPU. The marks are then reused.
  std::vector<double> read() {
    std::vector<double> seconds(used, 0.0);
#ifdef MG_WITH_CUDA
    if (device.is_cuda() && used > 0) {
      cuda::wait_for_event(events[used - 1]);
      for (std::size_t i = 1; i < used; ++i) {
        float ms = 0;
        MG_CUDA_CHECK(cudaEventElapsedTime(&ms, events[0], events[i]));
        seconds[i] = ms / 1e3;
      }
      used = 0;
      return seconds;
    }
#endif
    for (std::size_t i = 0; i < used; ++i) seconds[i] = host[i] - host[0];
    used = 0;
    return seconds;
  }

  Device device;
  std::size_t used = 0;  // marks of this step
  double step_start = 0;  // the host's clock at the step's first mark, to place steps in the trace
  std::vector<double> host;
#ifdef MG_WITH_CUDA
  std::vector<cudaEvent_t> events;  // created as needed, reused every step
#endif
};

OpProfile::OpProfile(OpProfileOptions options) : options_(options), clock_(std::make_unique<Clock>(options.device)) {
  MG_CHECK(options.skip_steps >= 0 && options.trace_steps >= 0,
           "OpProfile: skip_steps ({}) and trace_steps ({}) must be >= 0", options.skip_steps, options.trace_steps);
#ifndef MG_WITH_CUDA
  MG_CHECK(options.device.is_cpu(), "OpProfile: this build has no CUDA backend; profile ops on the CPU, not {}",
           options.device);
#endif
  add_observer(this);
}

OpProfile::~OpProfile() { remove_observer(this); }

void OpProfile::start(Phase phase) {
  if (phase == Phase::Forward && in_step_) finish_step();  // a loop that never called finish_step()
  if (in_step_) {
    close_phase();
  } else {
    in_step_ = true;
    spans_.clear();
    phases_.clear();
    open_.clear();
  }
  phase_ = phase;
  phase_mark_ = clock_->mark();
}

void OpProfile::close_phase() { phases_.push_back({phase_, phase_mark_, clock_->mark()}); }

void OpProfile::begin(const char* op, const std::string& scope, bool /*backward*/) {
  if (!in_step_) return;  // an op outside a step: evaluation, a user's own code
  spans_.push_back({op, scope, phase_, open_.empty() ? kNone : open_.back(), clock_->mark()});
  open_.push_back(spans_.size() - 1);
}

void OpProfile::end(const char* /*op*/, bool /*backward*/) {
  if (!in_step_ || open_.empty()) return;  // a span that began before this profile, or outside the step
  const std::size_t span = open_.back();
  open_.pop_back();  // first: a mark that throws leaves the span unended (not counted), the stack right
  spans_[span].end_mark = clock_->mark();
}

void OpProfile::forward(const char* /*op*/, const std::string& /*scope*/, const std::vector<Tensor>& /*inputs*/,
                        const Tensor& output) {
  if (in_step_ && !open_.empty()) spans_[open_.back()].bytes += bytes_of(output);
}

void OpProfile::backward(const char* /*op*/, const std::string& /*scope*/, const Tensor& /*grad_output*/,
                         const Grads& grads) {
  if (!in_step_ || open_.empty()) return;
  for (const Tensor& g : grads) spans_[open_.back()].bytes += bytes_of(g);
}

void OpProfile::finish_step() {
  if (!in_step_) return;
  close_phase();
  in_step_ = false;
  const std::vector<double> t = clock_->read();
  ++steps_seen_;
  if (steps_seen_ <= options_.skip_steps) return;
  ++counted_steps_;
  const bool traced = counted_steps_ <= options_.trace_steps;
  if (traced && trace_origin_ < 0) trace_origin_ = clock_->step_start;
  const double offset = clock_->step_start - trace_origin_;

  // Self time: each span less its children; total: a span inside one of the same op counts once.
  std::vector<double> duration(spans_.size(), 0.0), children(spans_.size(), 0.0);
  double top_level[3] = {0, 0, 0};
  for (std::size_t i = 0; i < spans_.size(); ++i) {
    const Span& s = spans_[i];
    if (s.end_mark == 0) continue;  // still open when the step ended (an op that threw past the step)
    duration[i] = t[s.end_mark] - t[s.begin_mark];
    if (s.parent == kNone)
      top_level[static_cast<int>(s.phase)] += duration[i];
    else
      children[s.parent] += duration[i];
  }
  for (std::size_t i = 0; i < spans_.size(); ++i) {
    const Span& s = spans_[i];
    if (s.end_mark == 0) continue;
    OpRow& row = rows_[{s.op, static_cast<int>(s.phase)}];
    row.op = s.op;
    row.phase = s.phase;
    ++row.calls;
    row.self_seconds += duration[i] - children[i];
    bool nested_in_same = false;
    for (std::size_t p = s.parent; p != kNone && !nested_in_same; p = spans_[p].parent)
      nested_in_same = std::string_view(spans_[p].op) == s.op;
    if (!nested_in_same) row.total_seconds += duration[i];
    row.bytes += s.bytes;
    if (traced) trace_.push_back({s.op, s.scope, 1, offset + t[s.begin_mark], duration[i], s.bytes});
  }
  for (const auto& [phase, begin_mark, end_mark] : phases_) {
    const double seconds = t[end_mark] - t[begin_mark];
    phase_totals_[static_cast<int>(phase)] += seconds;
    OpRow& outside = rows_[{kOutside, static_cast<int>(phase)}];
    outside.op = kOutside;
    outside.phase = phase;
    outside.self_seconds += seconds - top_level[static_cast<int>(phase)];
    outside.total_seconds = outside.self_seconds;
    top_level[static_cast<int>(phase)] = 0;  // a phase started twice in a step counts its spans once
    if (traced) trace_.push_back({phase_name(phase), "", 0, offset + t[begin_mark], seconds, 0});
  }
}

double OpProfile::phase_seconds(Phase phase) const {
  return counted_steps_ == 0 ? 0.0 : phase_totals_[static_cast<int>(phase)] / static_cast<double>(counted_steps_);
}

double OpProfile::step_seconds() const {
  return phase_seconds(Phase::Forward) + phase_seconds(Phase::Backward) + phase_seconds(Phase::Update);
}

std::vector<OpRow> OpProfile::rows() const {
  std::vector<OpRow> rows;
  for (const auto& [key, row] : rows_) rows.push_back(row);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const OpRow& a, const OpRow& b) { return a.self_seconds > b.self_seconds; });
  return rows;
}

namespace {

// Calls per step: whole for an op of every step, with two decimals for one of some steps only
// (the StepReadout's read every 16 steps).
std::string calls_per_step(std::int64_t calls, double steps) {
  const double per_step = static_cast<double>(calls) / steps;
  return per_step == std::floor(per_step) ? fmt::format("{:.0f}", per_step) : fmt::format("{:.2f}", per_step);
}

}  // namespace

std::string OpProfile::table(std::size_t max_rows) const {
  MG_CHECK(counted_steps_ > 0,
           "OpProfile::table: no step was counted ({} seen, the first {} skipped as warm-up); profile more steps",
           steps_seen_, options_.skip_steps);
  const double n = static_cast<double>(counted_steps_), step = step_seconds();
  std::string out = fmt::format(
      "op profile: {} step(s) counted after {} warm-up, {} clock; a step {:.3f} ms (forward {:.3f}, backward {:.3f}, "
      "update {:.3f})\n",
      counted_steps_, options_.skip_steps, options_.device.is_cpu() ? "the CPU's steady" : "CUDA events' (device)",
      step * 1e3, phase_seconds(Phase::Forward) * 1e3, phase_seconds(Phase::Backward) * 1e3,
      phase_seconds(Phase::Update) * 1e3);
  out += fmt::format("  {:<9} {:<28} {:>7} {:>10} {:>7} {:>10} {:>12}\n", "phase", "op", "calls", "self ms", "% step",
                     "total ms", "MiB written");
  const std::vector<OpRow> all = rows();
  OpRow rest{.op = "(the other rows)"};
  for (std::size_t i = 0; i < all.size(); ++i) {
    const OpRow& r = all[i];
    if (i >= max_rows) {
      rest.calls += r.calls;
      rest.self_seconds += r.self_seconds;
      rest.bytes += r.bytes;
      continue;
    }
    const bool outside = r.op == kOutside;
    out += fmt::format("  {:<9} {:<28} {:>7} {:>10.3f} {:>6.1f}% {:>10} {:>12}\n", phase_name(r.phase), r.op,
                       outside ? std::string("-") : calls_per_step(r.calls, n), r.self_seconds / n * 1e3,
                       100.0 * r.self_seconds / n / step,
                       outside ? std::string("-") : fmt::format("{:.3f}", r.total_seconds / n * 1e3),
                       outside ? std::string("-") : fmt::format("{:.2f}", r.bytes / n / (1 << 20)));
  }
  if (rest.self_seconds > 0)
    out += fmt::format("  {:<9} {:<28} {:>7} {:>10.3f} {:>6.1f}% {:>10} {:>12.2f}\n", "", rest.op,
                       calls_per_step(rest.calls, n), rest.self_seconds / n * 1e3, 100.0 * rest.self_seconds / n / step,
                       "", rest.bytes / n / (1 << 20));
  return out;
}

void OpProfile::write_chrome_trace(const std::string& path) const {
  MG_CHECK(!trace_.empty(), "OpProfile::write_chrome_trace: no step was traced ({} seen, {} skipped as warm-up)",
           steps_seen_, options_.skip_steps);
  // Chrome's trace-event format: complete events ("ph": "X") in microseconds, and the tracks' names.
  nlohmann::json events = nlohmann::json::array();
  for (const char* track : {"phases", "ops"}) {
    events.push_back(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", events.size()}, {"args", {{"name", track}}}});
  }
  for (const TraceEvent& e : trace_) {
    nlohmann::json event{{"name", e.name}, {"ph", "X"},           {"pid", 1},
                         {"tid", e.track}, {"ts", e.begin * 1e6}, {"dur", e.duration * 1e6}};
    if (e.track == 1) event["args"] = {{"scope", e.scope}, {"bytes", e.bytes}};
    events.push_back(std::move(event));
  }
  const nlohmann::json trace{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  std::ofstream file(path);
  MG_CHECK(file, "OpProfile::write_chrome_trace: cannot open {} for writing", path);
  file << trace.dump() << '\n';
  file.close();
  MG_CHECK(file, "OpProfile::write_chrome_trace: writing {} failed (is the disk full?)", path);
}

}  // namespace mg::train
