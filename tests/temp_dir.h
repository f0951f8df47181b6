// TempDir: a fresh directory for one test case, removed with everything in it when it goes out of scope.
//   TempDir tmp;  write_file(tmp / "model.safetensors");  CHECK(tmp.names() == std::set<std::string>{...});
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

namespace mg::testing {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int count = 0;  // several per process, and per test binary through the pid
    path = std::filesystem::temp_directory_path() / fmt::format("mg_test_{}_{}", ::getpid(), count++);
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string operator/(const std::string& name) const { return (path / name).string(); }
  // The names of the files in the directory (to check that nothing was left behind).
  std::set<std::string> names() const {
    std::set<std::string> result;
    for (const auto& entry : std::filesystem::directory_iterator(path)) result.insert(entry.path().filename().string());
    return result;
  }
};

}  // namespace mg::testing
