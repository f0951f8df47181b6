// The quoting of the words the program hands to /bin/sh through std::system (gnuplot's and dot's
// command lines, tools/inspect_plots.cpp and tools/run_graph.cpp).
#pragma once

#include <string>

namespace mg::tools {

// A word for /bin/sh: in single quotes, each quote inside written as '\''.
inline std::string shell_quoted(const std::string& word) {
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace mg::tools
