#include "tools/run_stop.h"

#include <fmt/format.h>

#include <optional>

#include "dist/process_group.h"

namespace mg::tools {

namespace {

// A word of a command line as a shell reads it back: quoted when it holds anything but [A-Za-z0-9_./=:,+-].
std::string shell_word(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                             "0123456789_./=:,+-") == std::string::npos;
  if (plain) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

bool stop_agreed(train::StopSignals& stop, int ranks) {
  if (ranks == 1) return stop.requested();
  const int agreed = dist::max_over_ranks(stop.signal());
  if (agreed != 0) stop.request(agreed);
  return agreed != 0;
}

std::string resume_command(const TrainOptions& o, int ranks, const std::string& checkpoint) {
  std::string command = ranks > 1 ? fmt::format("mpirun -n {} ", ranks) : std::string();
  const std::vector<std::string>& words = o.command_line;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (words[i] == "--resume") {
      ++i;  // and its value
      continue;
    }
    if (words[i].starts_with("--resume=")) continue;
    command += shell_word(words[i]) + " ";
  }
  return command + "--resume " + shell_word(checkpoint);
}

void end_stopped_run(const TrainOptions& o, train::StopSignals& stop, train::Trainer& trainer,
                     const StateDict& data_state, RunCheckpoints& checkpoints, const RunPosition& position,
                     std::int64_t total, int ranks, bool lead, Progress& progress, MetricsLog& log) {
  progress.finish();
  log.close();
  std::optional<std::string> resume_from;
  if (lead) resume_from = checkpoints.save_stopped(trainer, position, data_state);
  if (ranks > 1) dist::max_over_ranks(0);  // a barrier: no rank ends before rank 0's checkpoint is whole
  if (lead) {
    const std::string head = fmt::format("mixgrad train: {}: stopped at step {} of {}",
                                         train::signal_name(stop.signal()), position.step, total);
    if (resume_from)
      fmt::print("{}; resume with: {}\n", head, resume_command(o, ranks, *resume_from));
    else
      fmt::print("{}; nothing saved: add --save FILE or --save-every N to keep a stopped run\n", head);
  }
  stop.end_process();
}

}  // namespace mg::tools
