// data::save_safetensors / load_safetensors: bit-exact round trips of every dtype, the file layout
// byte for byte (against the reference implementation's own test vectors), every kind of corrupt
// file refused with a message naming the file and the problem, and atomic saves. Interop with an
// independent reader and writer in Python: test_safetensors_numpy.cpp.
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "data/safetensors.h"
#include "tests/safetensors_cases.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;
using namespace mg::testing::safetensors_cases;
namespace fs = std::filesystem;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(std::uint64_t n) {  // the header length field
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>(n >> (8 * i) & 0xff);
  return bytes;
}

// A file from a hand-written header (padded with spaces to a multiple of 8, as writers do) and data.
std::string raw_file(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + data;
}

// Loading `path` must fail with an mg::Error whose message contains the path and every needle.
void check_load_error(const std::string& path, const std::vector<std::string>& needles) {
  try {
    data::load_safetensors(path);
    FAIL("no mg::Error was thrown");
  } catch (const Error& error) {
    const std::string message = error.what();
    INFO("message: " << message);
    CHECK(message.find("data::load_safetensors: " + path) != std::string::npos);
    for (const std::string& needle : needles) CHECK(message.find(needle) != std::string::npos);
  }
}

// A header whose one tensor 't' has this entry, over `data_size` zero bytes.
void check_bad_entry(const TempDir& tmp, const std::string& entry, std::size_t data_size,
                     const std::vector<std::string>& needles) {
  const std::string path = tmp / "bad.safetensors";
  write_bytes(path, raw_file(R"({"t":)" + entry + "}", std::string(data_size, '\0')));
  INFO("entry: " << entry);
  check_load_error(path, needles);
}

}  // namespace

TEST_CASE("every dtype round-trips bit for bit, with 0-d and empty tensors, long and UTF-8 names, and metadata") {
  TempDir tmp;
  const StateDict state = every_dtype();
  const std::map<std::string, std::string> metadata = {{"step", "1200"}, {"recipe", "mixed_float16"}, {"note", "ünï"}};
  data::save_safetensors(tmp / "model.safetensors", state, metadata);
  CHECK(tmp.names() == std::set<std::string>{"model.safetensors"});  // no temporary file left

  const data::SafetensorsFile file = data::load_safetensors(tmp / "model.safetensors");
  CHECK(file.metadata == metadata);
  REQUIRE(file.tensors.size() == state.size());
  for (const auto& [name, tensor] : state) {
    INFO("tensor " << name);
    check_identical(file.tensors.at(name), tensor);
  }
  CHECK(file.tensors.at("step").item() == 1200.0);

  data::save_safetensors(tmp / "empty.safetensors", {});
  const data::SafetensorsFile empty = data::load_safetensors(tmp / "empty.safetensors");
  CHECK((empty.tensors.empty() && empty.metadata.empty()));
}

TEST_CASE("the file layout byte for byte: length field, JSON padded with spaces to 8, offsets in key order") {
  TempDir tmp;
  const std::string path = tmp / "tiny.safetensors";
  data::save_safetensors(path, {{"b", full({}, 3.0)}, {"a", from_vector({1, -2, 0.5}, {3}, {.dtype = DType::F16})}});
  const std::string header =
      R"({"a":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},"b":{"dtype":"F32","shape":[],"data_offsets":[6,10]}})"
      "     ";  // 107 bytes of JSON + 5 spaces = 112, a multiple of 8
  const std::string data = std::string("\x00\x3c\x00\xc0\x00\x38", 6)  // f16 1, -2, 0.5
                           + std::string("\x00\x00\x40\x40", 4);  // f32 3
  CHECK(read_bytes(path) == le64(112) + header + data);

  // The reference implementation's own expected bytes (its tests test_empty, test_serialization and
  // test_serialization_forced_alignement): an empty file, a metadata-only file, and one F32 tensor.
  data::save_safetensors(path, {});
  CHECK(read_bytes(path) == le64(8) + "{}      ");
  data::save_safetensors(path, {}, {{"framework", "pt"}});
  CHECK(read_bytes(path) == le64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
  const Tensor attn = arange(6);
  const std::string floats = bytes_of(attn);
  data::save_safetensors(path, {{"attn.0", attn.reshape({1, 2, 3})}});
  CHECK(read_bytes(path) == le64(64) + R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" + floats);
  data::save_safetensors(path, {{"attn0", attn.reshape({1, 1, 2, 3})}});
  CHECK(read_bytes(path) ==
        le64(72) + R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" + "       " + floats);
}

TEST_CASE("a missing file, a directory and a file cut short at any point are refused, naming the file") {
  TempDir tmp;
  check_load_error(tmp / "missing.safetensors", {"no such file"});
  check_load_error(tmp.path.string(), {"not a regular file"});

  const std::string good = tmp / "good.safetensors", cut = tmp / "cut.safetensors";
  data::save_safetensors(good, {{"a", zeros({4})}, {"b", zeros({2}, {.dtype = DType::I32})}});
  const std::string bytes = read_bytes(good);
  const std::size_t header_end = 8 + static_cast<unsigned char>(bytes[0]);  // the header is < 256 bytes here
  REQUIRE(bytes.size() == header_end + 24);
  for (std::size_t size : {0ul, 3ul, 7ul, 8ul, 8 + (header_end - 8) / 2, header_end - 1, header_end, header_end + 10,
                           header_end + 16, bytes.size() - 1}) {
    INFO("cut to " << size << " of " << bytes.size() << " bytes");
    write_bytes(cut, bytes.substr(0, size));
    check_load_error(cut, {"truncated"});
  }
  write_bytes(cut, bytes.substr(0, 5));
  check_load_error(cut, {"the file is 5 bytes, shorter than the 8-byte header length"});
  write_bytes(cut, bytes.substr(0, header_end + 20));
  check_load_error(cut, {"tensor 'b' has data_offsets [16, 24] but the data buffer holds only 20 bytes"});
}

TEST_CASE("a corrupt header is refused with a message naming the file, the tensor and the problem") {
  TempDir tmp;
  const std::string path = tmp / "bad.safetensors";
  write_bytes(path, le64(100'000'001) + std::string(64, ' '));
  check_load_error(path, {"says 100000001 bytes, over the format's limit of 100000000"});
  write_bytes(path, le64(std::uint64_t{1} << 63) + "{}");
  check_load_error(path, {"over the format's limit"});
  write_bytes(path, le64(64) + "{}      ");
  check_load_error(path, {"says 64 bytes but only 8 bytes follow it"});
  write_bytes(path, raw_file(R"({"t": {"dtype": "F32", )", ""));
  check_load_error(path, {"the header is not valid JSON", "parse error"});
  write_bytes(path, raw_file("[1, 2]", ""));
  check_load_error(path, {"the header is a JSON array, not an object"});
  write_bytes(path, raw_file(R"({"__metadata__": {"step": 3}})", ""));
  check_load_error(path, {"metadata 'step' is 3, not a string"});
  write_bytes(path, raw_file(R"({"__metadata__": ["a"]})", ""));
  check_load_error(path, {"'__metadata__' is a JSON array, not an object of strings"});

  write_bytes(path, raw_file(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", std::string(8, 0)));
  CHECK(data::load_safetensors(path).tensors.at("t").shape() == Shape{2});  // the control: this one is fine
  check_bad_entry(tmp, "[1]", 0, {"tensor 't' is a JSON array, not an object"});
  check_bad_entry(tmp, R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "crc": 1})", 8,
                  {"tensor 't' has an unknown field 'crc'"});
  check_bad_entry(tmp, R"({"dtype": "F32", "data_offsets": [0, 8]})", 8, {"tensor 't' has no 'shape' field"});
  check_bad_entry(
      tmp, R"({"dtype": "I16", "shape": [1], "data_offsets": [0, 2]})", 2,
      {"tensor 't' has dtype \"I16\", which mixgrad cannot hold",
       "\"F8_E5M2\", \"I64\", \"U8\", \"BOOL\", \"F4\" and \"F8_E8M0\""});  // every dtype it holds, from the table
  check_bad_entry(tmp, R"({"dtype": 4, "shape": [1], "data_offsets": [0, 4]})", 4, {"has dtype 4,"});
  check_bad_entry(tmp, R"({"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]})", 8,
                  {"tensor 't' has shape [-2]: every size must be a non-negative integer"});
  check_bad_entry(tmp, R"({"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]})", 8, {"shape [2.5]"});
  check_bad_entry(tmp, R"({"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]})", 8,
                  {"overflows 64 bits"});
  check_bad_entry(tmp, R"({"dtype": "F32", "shape": [2], "data_offsets": [0]})", 8,
                  {"has data_offsets [0], not two non-negative integers"});
  check_bad_entry(tmp, R"({"dtype": "F32", "shape": [0], "data_offsets": [8, 0]})", 8,
                  {"data_offsets [8, 0], which end before they begin"});
  check_bad_entry(tmp, R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 800]})", 8,
                  {"tensor 't' has data_offsets [0, 800] but the data buffer holds only 8 bytes"});
  check_bad_entry(tmp, R"({"dtype": "F32", "shape": [5, 6], "data_offsets": [0, 100]})", 100,
                  {"tensor 't' has data_offsets [0, 100] but shape [5, 6] of F32 needs 120 bytes"});
}

TEST_CASE("the tensors must tile the data buffer: overlaps, holes and trailing bytes are refused") {
  TempDir tmp;
  const std::string path = tmp / "bad.safetensors";
  auto entry = [](int begin, int end) {
    return fmt::format(R"({{"dtype": "F32", "shape": [2], "data_offsets": [{}, {}]}})", begin, end);
  };
  write_bytes(path, raw_file(fmt::format(R"({{"a": {}, "b": {}}})", entry(0, 8), entry(4, 12)), std::string(12, 0)));
  check_load_error(path, {"tensors 'a' (data_offsets [0, 8]) and 'b' (data_offsets [4, 12]) overlap"});
  write_bytes(path, raw_file(fmt::format(R"({{"a": {}, "b": {}}})", entry(0, 8), entry(12, 20)), std::string(20, 0)));
  check_load_error(path, {"bytes [8, 12) of the data buffer belong to no tensor (a hole before 'b')"});
  write_bytes(path, raw_file(fmt::format(R"({{"a": {}}})", entry(4, 12)), std::string(12, 0)));
  check_load_error(path, {"bytes [0, 4) of the data buffer belong to no tensor"});
  write_bytes(path, raw_file(fmt::format(R"({{"a": {}}})", entry(0, 8)), std::string(12, 0)));
  check_load_error(path, {"the tensors cover 8 bytes of the data buffer but it holds 12: 4 trailing bytes"});
  // Order in the header does not matter, only the offsets: b's data before a's is fine.
  write_bytes(path, raw_file(fmt::format(R"({{"a": {}, "b": {}}})", entry(8, 16), entry(0, 8)), std::string(16, 0)));
  CHECK(data::load_safetensors(path).tensors.size() == 2);
}

TEST_CASE("bad arguments to save are refused, and no file is left behind") {
  TempDir tmp;
  const std::string path = tmp / "model.safetensors";
  check_error([&] { data::save_safetensors(path, {{"", zeros({1})}}); }, "a tensor has an empty name");
  check_error([&] { data::save_safetensors(path, {{"__metadata__", zeros({1})}}); }, "'__metadata__' is reserved");
  check_error([&] { data::save_safetensors(path, {{"w", Tensor()}}); }, "tensor 'w' is undefined");
  check_error([&] { data::save_safetensors(path, {{"w\xff", zeros({1})}}); }, "not valid UTF-8");
  check_error([&] { data::save_safetensors(path, {}, {{"note", "\xc3"}}); }, "not valid UTF-8");
  check_error([&] { data::save_safetensors(tmp / "no/such/dir/model.safetensors", {}); },
              "cannot create the temporary file");
  CHECK(tmp.names().empty());
}

// Lowers this process's file size limit, so that a write past `bytes` fails with EFBIG (instead of
// raising SIGXFSZ, which is ignored meanwhile): a disk that fills up in the middle of a save.
struct FileSizeLimit {
  rlimit saved{};
  void (*saved_handler)(int);
  explicit FileSizeLimit(rlim_t bytes) : saved_handler(std::signal(SIGXFSZ, SIG_IGN)) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    rlimit lowered = saved;
    lowered.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lowered) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, saved_handler);
  }
};

TEST_CASE("a save that fails leaves the previous checkpoint byte-identical and no temporary file") {
  TempDir tmp;
  const std::string path = tmp / "model.safetensors";
  data::save_safetensors(path, {{"w", full({4}, 1.5)}}, {{"step", "1"}});
  const std::string previous = read_bytes(path);

  // Refused up front.
  check_error([&] { data::save_safetensors(path, {{"w", zeros({4})}, {"", zeros({1})}}); }, "empty name");
  CHECK(read_bytes(path) == previous);
  CHECK(tmp.names() == std::set<std::string>{"model.safetensors"});

  // Failing in the middle of writing the data: 64 KiB against a 4 KiB limit.
  {
    FileSizeLimit limit(4096);
    check_error([&] { data::save_safetensors(path, {{"w", zeros({16384})}}); }, "data::save_safetensors: writing");
  }
  CHECK(read_bytes(path) == previous);
  CHECK(tmp.names() == std::set<std::string>{"model.safetensors"});

  // Failing at the rename: the target is a directory.
  fs::create_directory(tmp / "dir.safetensors");
  check_error([&] { data::save_safetensors(tmp / "dir.safetensors", {{"w", zeros({4})}}); }, "cannot rename");
  CHECK(tmp.names() == std::set<std::string>{"model.safetensors", "dir.safetensors"});
  CHECK(fs::is_empty(tmp.path / "dir.safetensors"));

  // And a save that succeeds replaces the file whole.
  data::save_safetensors(path, {{"v", zeros({2}, {.dtype = DType::I32})}});
  const data::SafetensorsFile file = data::load_safetensors(path);
  CHECK((file.tensors.size() == 1 && file.tensors.count("v") == 1 && file.metadata.empty()));
}

TEST_CASE("check_matches: a stored tensor must have the dtype and shape it is loaded into") {
  const Tensor weight = zeros({3, 4});
  CHECK_NOTHROW(data::check_matches(ones({3, 4}), weight, "fc.weight", "m.safetensors"));
  check_error(
      [&] {
        data::check_matches(zeros({3, 4}, {.dtype = DType::F16}), weight, "fc.weight", "m.safetensors");
      },
      "data::check_matches: m.safetensors: tensor 'fc.weight' is f16 [3, 4] in the file but f32 [3, 4] is "
      "expected");
  check_error(
      [&] {
        data::check_matches(zeros({4, 3}), weight, "fc.weight", "m.safetensors");
      },
      "tensor 'fc.weight' is f32 [4, 3] in the file but f32 [3, 4]");
  check_error([&] { data::check_matches(Tensor(), weight, "fc.weight", "m.safetensors"); },
              "the file has no tensor 'fc.weight' (f32 [3, 4] expected)");
}
