// Interop with tests/safetensors_reader.py, an independent reader and writer in Python (json, struct,
// numpy) that shares no code with mixgrad: a file numpy wrote loads with exact values, and the reader
// reads what mixgrad writes value for value. So the files follow the format rather than merely
// agreeing with themselves.
#include <sys/wait.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>

#include "data/safetensors.h"
#include "tests/safetensors_cases.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;
using namespace mg::testing::safetensors_cases;

namespace {

// Python with numpy: $MG_PYTHON, else the python3 on PATH, else Debian's (scripts/deps installs
// python3-numpy there, which a python3 of pyenv or a venv earlier on PATH does not see).
std::string python() {
  static const std::string found = [] {
    std::vector<std::string> candidates = {"python3", "/usr/bin/python3"};
    if (const char* chosen = std::getenv("MG_PYTHON")) candidates.insert(candidates.begin(), chosen);
    for (const std::string& candidate : candidates)
      if (std::system((candidate + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) return candidate;
    return std::string();
  }();
  REQUIRE_MESSAGE(!found.empty(), "no python3 with numpy found (scripts/deps installs python3-numpy)");
  return found;
}

// Runs tests/safetensors_reader.py with `arguments` (its complaints go to stderr); its stdout, after
// checking that it succeeded.
std::string run_reader(const std::string& arguments) {
  const std::string command = python() + " '" MG_SOURCE_DIR "/tests/safetensors_reader.py' " + arguments;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  const int status = ::pclose(pipe);
  INFO("command: " << command << "\noutput: " << output);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  return output;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, separator);) parts.push_back(part);
  if (!text.empty() && text.back() == separator) parts.emplace_back();
  return parts;
}

}  // namespace

TEST_CASE("a file written by numpy (tests/safetensors_reader.py write) loads with exact values") {
  TempDir tmp;
  const std::string path = tmp / "numpy.safetensors";
  run_reader("write '" + path + "'");
  const data::SafetensorsFile file = data::load_safetensors(path);
  CHECK(file.metadata ==
        std::map<std::string, std::string>{{"format", "np"}, {"writer", "tests/safetensors_reader.py"}});
  REQUIRE(file.tensors.size() == 5);
  // The values the script writes, rounded here by mixgrad from the same doubles (once, to nearest even).
  const double inf = std::numeric_limits<double>::infinity();
  check_identical(file.tensors.at("layer.weight"),
                  from_vector({0.1, -2.5, 3.4028234663852886e38, 1e-45, -0.0, inf}, {2, 3}));
  check_identical(file.tensors.at("layer.half"),
                  from_vector({0.1, 65504.0, std::ldexp(1.0, -24), -1.0 / 3.0}, {4}, {.dtype = DType::F16}));
  check_identical(file.tensors.at("labels"), from_vector({-2147483648.0, 0, 2147483647.0}, {3}, {.dtype = DType::I32}));
  check_identical(file.tensors.at("scale"), state_scalar(0.1));
  check_identical(file.tensors.at("empty"), zeros({0, 3}));
}

TEST_CASE("the independent numpy reader reads what mixgrad writes, value for value") {
  TempDir tmp;
  const std::string path = tmp / "model.safetensors";
  const StateDict state = every_dtype();
  data::save_safetensors(path, state, {{"step", "1200"}, {"recipe", "mixed_float16"}});
  const std::map<DType, std::string> file_names = {{DType::F32, "F32"}, {DType::F16, "F16"},  {DType::BF16, "BF16"},
                                                   {DType::F64, "F64"}, {DType::I32, "I32"},  {DType::I64, "I64"},
                                                   {DType::U8, "U8"},   {DType::BOOL, "BOOL"}};

  std::vector<std::string> lines = split(run_reader("read '" + path + "'"), '\n');
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  REQUIRE(lines.size() == 2 + state.size());
  CHECK(lines[0] == "metadata\trecipe\tmixed_float16");
  CHECK(lines[1] == "metadata\tstep\t1200");
  std::size_t line = 2;
  for (const auto& [name, tensor] : state) {  // the reader prints tensors in name order too
    const std::vector<std::string> fields = split(lines[line++], '\t');
    INFO("tensor " << name << ": " << lines[line - 1]);
    REQUIRE(fields.size() == 5);
    CHECK(fields[0] == "tensor");
    CHECK(fields[1] == name);
    CHECK(fields[2] == file_names.at(tensor.dtype()));
    CHECK(fields[3] == fmt::format("{}", fmt::join(tensor.shape(), "x")));
    const std::vector<std::string> printed = fields[4].empty() ? std::vector<std::string>{} : split(fields[4], ' ');
    if (is_integer(tensor.dtype())) {  // printed as integers, exactly (i64 past 2^53 too)
      const std::vector<std::int64_t> expected = tensor.to_vector<std::int64_t>();
      REQUIRE(printed.size() == expected.size());
      for (std::size_t i = 0; i < expected.size(); ++i) CHECK(std::stoll(printed[i]) == expected[i]);
      continue;
    }
    const std::vector<double> expected = tensor.to_vector<double>();
    REQUIRE(printed.size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const double value = std::strtod(printed[i].c_str(), nullptr);
      INFO("element " << i << ": " << printed[i]);
      if (std::isnan(expected[i]))
        CHECK(std::isnan(value));
      else
        CHECK(std::bit_cast<std::uint64_t>(value) == std::bit_cast<std::uint64_t>(expected[i]));
    }
  }
}
