// Replacing a file so that a crash leaves it whole, old or new (data/replace_file.h).
#include "data/replace_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace mg::data {

void write_all(int fd, const void* data, std::size_t size, const std::string& path, std::string_view op) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = ::write(fd, bytes, size);
    if (written < 0 && errno == EINTR) continue;
    MG_CHECK(written > 0, "{}: writing {} failed: {}; is the disk full?", op, path,
             written < 0 ? std::strerror(errno) : "no bytes written");
    bytes += written;
    size -= static_cast<std::size_t>(written);
  }
}

// After the rename, the directory entry itself must reach the disk for the new file to survive a
// power cut. The checkpoint is complete by then, so a directory that cannot be synced (some file
// systems refuse) is not worth failing the save over.
void sync_directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::filesystem::path directory = parent.empty() ? std::filesystem::path(".") : parent;
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// A save killed mid-way (SIGKILL, a power cut) leaves its temporary file "NAME.tmp.PID.N" behind;
// the file at NAME is whole, old or new. The next save to NAME removes the leftovers of processes
// that no longer exist. One whose process is alive may be a save in progress and is left alone.
void remove_leftovers_of(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(parent, error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    // What follows the prefix must be "PID.N", both decimal.
    const std::string rest = name.substr(prefix.size());
    const std::size_t dot = rest.find('.');
    auto decimal = [](std::string_view digits) {
      return !digits.empty() && digits.size() < 10 &&
             std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (dot == std::string::npos || !decimal(rest.substr(0, dot)) || !decimal(rest.substr(dot + 1))) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(rest.substr(0, dot)));
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code ignored;  // another save may be removing it at the same moment
    fs::remove(entry.path(), ignored);
  }
}

}  // namespace mg::data
