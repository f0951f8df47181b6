// What the targets of fuzz/ share. mixgrad's readers take a path, so each input is first written to
// a file: an anonymous one in memory (memfd_create), opened by the readers as /proc/self/fd/<n>. It
// is private to the process (-jobs and -fork run several), never touches a disk (a truncated file on
// one can cost milliseconds per input), and disappears with the process.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mg::fuzz {

// Replaces the file's contents with the input and returns its path.
inline const std::string& write_input(const std::uint8_t* data, std::size_t size) {
  static const int fd = memfd_create("mixgrad-fuzz-input", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) {
    std::perror("mixgrad fuzz: writing the input to a memfd");  // the machine's problem, not a finding
    std::exit(2);
  }
  return path;
}

}  // namespace mg::fuzz
