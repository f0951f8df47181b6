#include "tools/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/output_file.h"

namespace mg::tools {

namespace {
// NaN's sign bit means nothing to a reader: print "nan", never "-nan".
double without_nan_sign(double value) { return std::isnan(value) ? std::fabs(value) : value; }
}  // namespace

Progress::Progress(std::int64_t first_step, std::int64_t total, std::string unit, bool show_scale, bool quiet)
    : first_step_(first_step),
      total_(total),
      unit_(std::move(unit)),
      show_scale_(show_scale),
      quiet_(quiet),
      terminal_(isatty(fileno(stdout)) != 0) {}

void Progress::update(const train::StepNumbers& r, std::int64_t items, std::int64_t skipped_total) {
  items_ += items;
  // The bar shows an exponential moving average: one batch's loss is too noisy to read.
  smoothed_loss_ = smoothed_loss_ < 0 ? r.loss : 0.95 * smoothed_loss_ + 0.05 * r.loss;
  if (quiet_) return;
  const bool last = r.step == total_;
  const double rate = r.seconds > 0 ? static_cast<double>(items_) / r.seconds : 0.0;
  const std::string eta = last ? "" : "  eta " + eta_text(r);
  std::string scale = show_scale_ ? fmt::format("  scale {:g}  skipped {}", r.scale, skipped_total) : "";
  if (terminal_) {
    const auto now = std::chrono::steady_clock::now();
    if (!last && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const int width = 20;
    const int filled = static_cast<int>(width * r.step / std::max<std::int64_t>(total_, 1));
    fmt::print("\r[{:#<{}}{:.<{}}] {:>6}/{}  smoothed loss {:.4f}  {:.0f} {}/s{}{}\033[K", "", filled, "",
               width - filled, r.step, total_, without_nan_sign(smoothed_loss_), rate, unit_, scale, eta);
    std::fflush(stdout);
    return;
  }
  const std::int64_t every = std::max<std::int64_t>((total_ - first_step_) / 20, 1);
  if ((r.step - first_step_) % every == 0 || last) {
    fmt::print("step {}/{}  smoothed loss {:.4f}  lr {:.3g}  {:.0f} {}/s{}{}\n", r.step, total_,
               without_nan_sign(smoothed_loss_), r.lr, rate, unit_, scale, eta);
    std::fflush(stdout);  // a log file or pipe sees each line as it happens, not at exit
  }
}

// The time left at this run's pace so far: "eta 42s", "eta 3m07s", "eta 1h05m".
std::string Progress::eta_text(const train::StepNumbers& r) const {
  const std::int64_t done = r.step - first_step_;
  if (done <= 0 || r.seconds <= 0) return "?";
  const auto seconds = static_cast<std::int64_t>(
      r.seconds / static_cast<double>(done) * static_cast<double>(total_ - r.step) + 0.5);
  if (seconds < 60) return fmt::format("{}s", seconds);
  if (seconds < 3600) return fmt::format("{}m{:02}s", seconds / 60, seconds % 60);
  return fmt::format("{}h{:02}m", seconds / 3600, seconds % 3600 / 60);
}

void Progress::finish() {
  if (terminal_ && !quiet_) fmt::print("\n");
}

MetricsLog::MetricsLog(const std::string& path, std::int64_t resumed_step) {
  if (path.empty()) return;
  const bool append = resumed_step >= 0;
  // A run that crashed after its checkpoint logged steps the resumed run takes again: their rows go.
  if (append) drop_rows_after(path, resumed_step);
  file_.open(path, append ? std::ios::app : std::ios::trunc);
  MG_CHECK(file_.is_open(), "mixgrad train: cannot open the log file {} for writing", path);
  path_ = path;
  if (!append || file_.tellp() == 0) file_ << "step,loss,lr,scale,skipped,seconds\n";
  file_.flush();  // a file that cannot be written (a full disk, /dev/full) stops the run before its first step
  check_written(file_, path_, kOp);
}

void MetricsLog::drop_rows_after(const std::string& path, std::int64_t step) {
  std::ifstream in(path);
  if (!in) return;  // no log yet
  std::string kept, line;
  bool dropped = false;
  while (std::getline(in, line)) {
    const bool row = !line.empty() && line[0] >= '0' && line[0] <= '9';
    if (row && std::stoll(line) > step) {
      dropped = true;
      continue;
    }
    kept += line + "\n";
  }
  if (dropped) write_file(path, kept, kOp);
}

void MetricsLog::write(const train::StepNumbers& r) {
  if (!file_.is_open()) return;
  file_ << fmt::format("{},{:.9g},{:.9g},{:.9g},{},{:.6f}\n", r.step, without_nan_sign(r.loss), r.lr, r.scale,
                       r.skipped ? 1 : 0, r.seconds);
  check_written(file_, path_, kOp);  // a full disk stops the run at the first row that cannot be kept
}

void MetricsLog::close() {
  if (file_.is_open()) close_checked(file_, path_, kOp);
}

}  // namespace mg::tools
