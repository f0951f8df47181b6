// The committed reference tables of the format codecs (tests/fixtures/fp8/, tests/fixtures/fp4/, written
// by scripts/make-fp8-fixtures and scripts/make-fp4-fixtures): lines of hex fields, '#' comments.
// For suites compiled with MG_SOURCE_DIR (tests/CMakeLists.txt).
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing.h"

namespace mg::testing {

// The rows of tests/fixtures/<folder>/<name>: the hex fields of every line that is not a comment,
// `fields` a line. `script` names what wrote it, for the message when the file is missing.
inline std::vector<std::vector<std::uint32_t>> read_hex_fixture(const std::string& folder, const std::string& name,
                                                                std::size_t fields, const std::string& script) {
  const std::string path = std::string(MG_SOURCE_DIR) + "/tests/fixtures/" + folder + "/" + name;
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path << " (written by " << script << ")");
  std::vector<std::vector<std::uint32_t>> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::vector<std::uint32_t> row;
    for (std::uint32_t value; words >> std::hex >> value;) row.push_back(value);
    REQUIRE_MESSAGE(row.size() == fields, name << ": bad line '" << line << "'");
    rows.push_back(row);
  }
  return rows;
}

}  // namespace mg::testing
