// Runs a command line as a user would (a new process, through the shell) and keeps what it printed:
//   Run run = run_command(fmt::format("{} train --steps 1", MG_CLI_PATH));  CHECK(run.status == 0);
#pragma once

#include <sys/wait.h>

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

}  // namespace mg::testing
