// Runs a command line as a user would (a new process, through the shell) and keeps what it printed:
//   Run run = run_command(fmt::format("{} train --steps 1", MG_CLI_PATH));  CHECK(run.status == 0);
// Or starts one and acts on it while it runs (signals, at a moment it announces; core/test_pause.h):
//   Spawned run(fmt::format("MG_TEST_PAUSE=step:3 exec {} train ...", MG_CLI_PATH));
//   const int pid = run.wait_for_pause();  kill(pid, SIGTERM);  Finished done = run.finish();
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>

#include "tests/testing.h"

namespace mg::testing {

struct Run {
  int status = 0;  // the exit status; -1 when the process was killed by a signal
  std::string output;  // stdout and stderr together
};

inline Run run_command(const std::string& command) {
  const std::string line = command + " 2>&1";
  Run run;
  std::FILE* pipe = popen(line.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) run.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  INFO("command: " << line << "\noutput:\n" << run.output);
  return run;
}

// How a spawned process ended: its exit status, or the signal that ended it.
struct Finished {
  int exit_status = -1;  // -1 when a signal ended it
  int signal = 0;  // 0 when it exited
  std::string output;  // stdout and stderr together
};

// A command run through /bin/sh in a new process, its stdout and stderr read through one pipe.
class Spawned {
 public:
  explicit Spawned(const std::string& command) {
    int ends[2];
    REQUIRE(pipe(ends) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dup2(ends[1], STDOUT_FILENO);
      dup2(ends[1], STDERR_FILENO);
      close(ends[0]);
      close(ends[1]);
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(ends[1]);
    output_fd_ = ends[0];
    command_ = command;
  }
  Spawned(const Spawned&) = delete;
  Spawned& operator=(const Spawned&) = delete;
  ~Spawned() {
    if (pid_ > 0) {  // a test that failed half-way: end the process rather than leave it paused
      kill(pid_, SIGKILL);
      finish();
    }
  }

  // Reads until the output holds `text`; false if the process closed its output first.
  bool wait_for(const std::string& text) {
    while (output_.find(text) == std::string::npos)
      if (!read_some()) return false;
    return true;
  }
  // Waits for the next "mixgrad test pause: at POINT (pid P)" line and returns P (0 if none came).
  int wait_for_pause() {
    const std::string marker = "mixgrad test pause: at ";
    std::size_t at = std::string::npos;
    while ((at = nth_marker(marker, pause_lines_read_)) == std::string::npos ||
           output_.find('\n', at) == std::string::npos)
      if (!read_some()) return 0;
    ++pause_lines_read_;
    const std::size_t pid_at = output_.find("(pid ", at);
    return pid_at == std::string::npos ? 0 : std::stoi(output_.substr(pid_at + 5));
  }
  // Reads the rest of the output and waits for the process to end.
  Finished finish() {
    while (read_some()) {}
    Finished done;
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    close(output_fd_);
    if (WIFEXITED(status)) done.exit_status = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) done.signal = WTERMSIG(status);
    done.output = output_;
    INFO("command: " << command_ << "\noutput:\n" << output_);
    return done;
  }
  const std::string& output() const { return output_; }
  pid_t pid() const { return pid_; }  // the shell's, or the program's when the command starts with exec

 private:
  bool read_some() {
    std::array<char, 4096> buffer{};
    const ssize_t n = read(output_fd_, buffer.data(), buffer.size());
    if (n <= 0) return false;
    output_.append(buffer.data(), static_cast<std::size_t>(n));
    return true;
  }
  // Where the (n+1)-th occurrence of `marker` starts, or npos.
  std::size_t nth_marker(const std::string& marker, std::size_t n) const {
    std::size_t at = output_.find(marker);
    for (std::size_t i = 0; i < n && at != std::string::npos; ++i) at = output_.find(marker, at + 1);
    return at;
  }

  pid_t pid_ = -1;
  int output_fd_ = -1;
  std::size_t pause_lines_read_ = 0;
  std::string command_, output_;
};

}  // namespace mg::testing
