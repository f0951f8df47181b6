// Files from outside are untrusted input: whatever bytes a safetensors file or a checkpoint holds, the
// readers end in an mg::Error naming the file and what is wrong, never in a crash, a hang or a number
// used unchecked. Each case below is a finding of issue 21 (libFuzzer on the readers, and edited
// checkpoints handed to `mixgrad train --resume`), kept as a regression test; fuzz/ holds the targets
// that found them (scripts/fuzz runs them).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "data/batches.h"
#include "data/safetensors.h"
#include "optim/adam.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

// A safetensors file made of a hand-written header: the 8-byte little-endian length, then the text.
void write_header_file(const std::string& path, const std::string& header) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>(static_cast<std::uint64_t>(header.size()) >> (8 * i) & 0xff);
  bytes += header;
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Loading must throw an mg::Error that names the file and contains `needle`, in a message of at most
// `longest` characters (an untrusted value is never printed whole).
void check_refused(const std::string& path, const std::string& needle, std::size_t longest = 600) {
  try {
    data::load_safetensors(path);
    FAIL("loading " << path << " did not throw");
  } catch (const Error& error) {
    const std::string message = error.what();
    INFO(message);
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find(needle) != std::string::npos);
    CHECK(message.size() <= longest);
  }
}

std::string nested(int depth, const std::string& inner) {
  return std::string(static_cast<std::size_t>(depth), '[') + inner + std::string(static_cast<std::size_t>(depth), ']');
}

}  // namespace

TEST_CASE("a header number outside double's range is an mg::Error, not an escaped JSON exception") {
  TempDir tmp;
  write_header_file(tmp / "big.safetensors", R"({"a":1e999})");  // the 11-byte header the fuzzer found
  check_refused(tmp / "big.safetensors", "the header is not valid JSON");
  write_header_file(tmp / "offsets.safetensors", R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,-1e400]}})");
  check_refused(tmp / "offsets.safetensors", "the header is not valid JSON");
}

TEST_CASE("a header nested 100,000 levels deep is refused before anything recurses into it") {
  TempDir tmp;
  const int deep = 100'000;  // deep enough to overflow the stack of a recursive dump()
  write_header_file(tmp / "shape.safetensors",
                    R"({"t":{"dtype":"F32","shape":)" + nested(deep, "1") + R"(,"data_offsets":[0,4]}})");
  check_refused(tmp / "shape.safetensors", "nests brackets deeper than 8 levels");
  write_header_file(tmp / "metadata.safetensors", R"({"__metadata__":{"a":)" + nested(deep, "") + "}}");
  check_refused(tmp / "metadata.safetensors", "nests brackets deeper than 8 levels");
  // Brackets inside strings are text, not nesting: a name may hold any of them.
  write_header_file(tmp / "names.safetensors", R"({"__metadata__":{"[[[[[[[[[[\"{{{{{{{{{{":"]]]]]]]]]]"}})");
  CHECK(data::load_safetensors(tmp / "names.safetensors").metadata.at("[[[[[[[[[[\"{{{{{{{{{{") == "]]]]]]]]]]");
  // A wrong value nested less than the bound is reported as what it is.
  write_header_file(tmp / "wrong.safetensors", R"({"t":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})");
  check_refused(tmp / "wrong.safetensors", "has shape [[2]]: every size must be a non-negative integer");
}

TEST_CASE("an untrusted value or name in an error message is cut to a few dozen characters") {
  TempDir tmp;
  std::string sizes = "1";
  for (int i = 0; i < 20'000; ++i) sizes += ",1";
  write_header_file(tmp / "long.safetensors",
                    R"({"t":{"dtype":"F32","shape":"x)" + std::string(100'000, 'y') + R"(","data_offsets":[0,4]}})");
  check_refused(tmp / "long.safetensors", "bytes), not an array of sizes");
  write_header_file(tmp / "name.safetensors", "{\"" + std::string(100'000, 'n') + R"(":{"dtype":"I64"}})");
  check_refused(tmp / "name.safetensors", "nnn... (100000 bytes)");
  write_header_file(tmp / "dims.safetensors",
                    R"({"t":{"dtype":"F32","shape":[)" + sizes + R"(],"data_offsets":[0,4]}})");
  check_refused(tmp / "dims.safetensors", "has 20001 dims, more than the 64 mixgrad reads");
}

// The inputs libFuzzer found (fuzz/regressions/safetensors/, replayed by scripts/fuzz too), here in
// the ordinary suite: each must end in an mg::Error.
TEST_CASE("every safetensors reproducer of fuzz/regressions is refused with an mg::Error") {
  int files = 0;
  const std::string folder = std::string(MG_SOURCE_DIR) + "/fuzz/regressions/safetensors";
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    INFO(entry.path().string());
    CHECK_THROWS_AS(data::load_safetensors(entry.path().string()), Error);
    ++files;
  }
  CHECK(files >= 3);
}

// A save killed with SIGKILL leaves "NAME.tmp.PID.N" behind (the file at NAME is whole). The next
// save to NAME removes the leftovers of processes that are gone, and keeps those of live ones.
TEST_CASE("a save removes the temporary files that killed saves to the same path left behind") {
  TempDir tmp;
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  REQUIRE(waitpid(child, nullptr, 0) == child);  // a pid no live process has (until the kernel reuses it)
  const std::string dead = tmp / fmt::format("run.safetensors.tmp.{}.0", child);
  const std::string alive = tmp / fmt::format("run.safetensors.tmp.{}.3", getppid());
  const std::string other = tmp / fmt::format("other.safetensors.tmp.{}.0", child);
  for (const std::string& path : {dead, alive, other}) std::ofstream(path) << "half a checkpoint";
  data::save_safetensors(tmp / "run.safetensors", {{"w", state_scalar(1.0)}});
  CHECK_FALSE(std::filesystem::exists(dead));
  CHECK(std::filesystem::exists(alive));  // perhaps a save in progress
  CHECK(std::filesystem::exists(other));  // another file's
  CHECK(data::load_safetensors(tmp / "run.safetensors").tensors.at("w").item() == 1.0);
}

// Every number a checkpoint holds is checked to be a whole number in its range before it is used.
TEST_CASE("an optimizer's saved counts must be whole numbers in range") {
  Tensor w = full({2}, 1.0, {.requires_grad = true});
  optim::Adam adam({w});
  w.set_grad(full({2}, 0.5));
  adam.step();
  const StateDict saved = adam.state_dict();
  for (double steps : {std::nan(""), -1.0, 2.5, 1e300}) {
    StateDict edited = saved;
    edited["step_count"] = state_scalar(steps);
    check_error([&] { adam.load_state_dict(edited); }, "entry 'step_count' must be a whole number from 0 to");
  }
  // The per-parameter step lives in an i32 tensor: 3e9 would wrap.
  StateDict edited = saved;
  edited["state.0.step"] = state_scalar(3e9);
  check_error([&] { adam.load_state_dict(edited); },
              "entry 'state.0.step' must be a whole number from 0 to 2147483647, got 3000000000");
  CHECK(adam.state_dict().at("state.0.step").item() == 1.0);  // nothing changed
}

TEST_CASE("a data loader's saved position and seed must be whole numbers in range") {
  data::DataLoader loader(arange(8, {.dtype = DType::F32}).reshape({8, 1}), arange(8, {.dtype = DType::I32}),
                          {.batch_size = 2, .seed = 7});
  const StateDict saved = loader.state_dict();
  const std::vector<std::pair<std::string, double>> cases = {
      {"epoch", std::nan("")}, {"epoch", -1}, {"batch_index", 5}, {"batch_index", 0.5}, {"seed_low", 4294967296.0}};
  for (const auto& [key, value] : cases) {
    INFO(key << " = " << value);
    StateDict edited = saved;
    edited[key] = state_scalar(value);
    check_error([&] { loader.load_state_dict(edited); }, fmt::format("entry '{}' must be a whole number", key));
  }
}
