// Safetensors files: save_safetensors writes the header and the tensors' bytes through a temporary
// file that is renamed into place; load_safetensors validates the whole header against the file's
// size before it makes a single tensor. The layout is drawn in data/safetensors.h.
#include "data/safetensors.h"
#include "core/test_pause.h"
#include "data/replace_file.h"
#include "data/untrusted_json.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <vector>

namespace mg::data {

// The data buffer is the tensors' memory copied byte for byte, and the format is little-endian.
static_assert(std::endian::native == std::endian::little,
              "data/safetensors.cpp copies tensor bytes as they lie in memory; a big-endian host must swap them");

namespace {

// The reference implementation refuses larger headers; a corrupt length field must not make us
// allocate gigabytes before the JSON parser sees a single byte.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

std::optional<DType> dtype_from_file_name(const std::string& name) {
  for (DType dtype : all_dtypes())
    if (name == dtype_file_name(dtype)) return dtype;
  return std::nullopt;
}

// A packed dtype ("F4", two elements a byte) is packed along the last dimension: PyTorch holds it as
// float4_e2m1fn_x2 of half the last size, and safetensors refuses a slice that would end inside a
// byte. So the last size must be a multiple of the elements a byte packs, on saving and on loading.
void check_packed_rows(const std::string& where, const Shape& shape, DType dtype) {
  const std::int64_t group = packed_group(dtype);
  MG_CHECK(group == 1 || (!shape.empty() && shape.back() % group == 0),
           "{} is {} of shape {}: {} packs {} elements a byte along the last dimension, so that dimension must be a "
           "multiple of {} (a scalar cannot be stored); pad it or convert to another dtype (x.to(DType::BF16))",
           where, dtype_file_name(dtype), shape, dtype, group, group);
}

// ---- writing ------------------------------------------------------------------------------------

// The header text, padded with spaces to a multiple of 8 so that the data buffer starts 8-aligned.
// Every check on the arguments happens here, before any file is created.
std::string make_header(const std::string& path, const StateDict& tensors,
                        const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps insertion order: "__metadata__" first, then the tensors in key order, each as
  // dtype, shape, data_offsets -- the order the reference writer uses.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    MG_CHECK(!name.empty(),
             "data::save_safetensors: {}: a tensor has an empty name; give every entry a name to be "
             "found by",
             path);
    MG_CHECK(name != "__metadata__",
             "data::save_safetensors: {}: '__metadata__' is reserved for the metadata "
             "strings and cannot name a tensor; rename it",
             path);
    MG_CHECK(tensor.defined(),
             "data::save_safetensors: {}: tensor '{}' is undefined (a default-constructed "
             "Tensor); drop it from the state or give it values",
             path, name);
    MG_CHECK(tensor.device().is_cpu(), "data::save_safetensors: {}: tensor '{}' is on {}; copy it to the CPU first",
             path, name, tensor.device());
    check_packed_rows(fmt::format("data::save_safetensors: {}: tensor '{}'", path, name), tensor.shape(),
                      tensor.dtype());
    const std::uint64_t end = offset + tensor.nbytes();
    header[name] = {{"dtype", dtype_file_name(tensor.dtype())},
                    {"shape", tensor.shape()},
                    {"data_offsets", nlohmann::ordered_json::array({offset, end})}};
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& error) {
    throw Error(fmt::format("data::save_safetensors: {}: a tensor name or metadata string is not valid UTF-8, which "
                            "the JSON header requires ({})",
                            path, error.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  constexpr std::string_view kSave = "data::save_safetensors";
  const std::string header = make_header(path, tensors, metadata);

  // A name no other save can be using, even another thread of this process saving to the same path;
  // O_EXCL refuses to reuse a leftover file of that name.
  remove_leftovers_of(path);
  static std::atomic<std::uint64_t> saves{0};
  const std::uint64_t save_number = saves++;
  const std::string temp_path = fmt::format("{}.tmp.{}.{}", path, ::getpid(), save_number);
  int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  MG_CHECK(fd >= 0,
           "data::save_safetensors: cannot create the temporary file {}: {}; does the directory exist and "
           "is it writable?",
           temp_path, std::strerror(errno));
  try {
    const std::uint64_t header_length = header.size();  // little-endian, as the static_assert ensures
    write_all(fd, &header_length, sizeof header_length, temp_path, kSave);
    write_all(fd, header.data(), header.size(), temp_path, kSave);
    // A test may stop the process halfway through the file (core/test_pause.h), to kill it there.
    std::size_t written = 0;
    for (const auto& [name, tensor] : tensors) {
      if (written++ == tensors.size() / 2)
        test_pause_point("safetensors-write", static_cast<std::int64_t>(save_number + 1));
      write_all(fd, tensor.data_ptr(), tensor.nbytes(), temp_path, kSave);
    }
    MG_CHECK(::fsync(fd) == 0, "data::save_safetensors: flushing {} to the disk failed: {}", temp_path,
             std::strerror(errno));
    const int closed = ::close(fd);
    fd = -1;
    MG_CHECK(closed == 0, "data::save_safetensors: closing {} failed: {}", temp_path, std::strerror(errno));
    MG_CHECK(std::rename(temp_path.c_str(), path.c_str()) == 0,
             "data::save_safetensors: cannot rename {} to {}: {}; is the target a directory?", temp_path, path,
             std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(temp_path.c_str());
    throw;
  }
  sync_directory_of(path);
}

// ---- reading ------------------------------------------------------------------------------------

namespace {

using json = nlohmann::json;

// More dims than any model uses; the bound also keeps a shape in a message short.
constexpr std::size_t kMaxDims = 64;

// One tensor as the header describes it, validated on its own (its place among the others is
// checked by check_tiling).
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin = 0, end = 0;  // in the data buffer
};

Entry parse_entry(const std::string& path, const std::string& name, const json& value, std::uint64_t buffer_size) {
  const std::string where = fmt::format("data::load_safetensors: {}: tensor '{}'", path, cut(name));
  MG_CHECK(value.is_object(), "{} is a JSON {}, not an object with dtype, shape and data_offsets", where,
           value.type_name());
  for (const auto& field : value.items())
    MG_CHECK(field.key() == "dtype" || field.key() == "shape" || field.key() == "data_offsets",
             "{} has an unknown field '{}'; an entry holds exactly dtype, shape and data_offsets", where,
             cut(field.key()));
  for (const char* field : {"dtype", "shape", "data_offsets"})
    MG_CHECK(value.contains(field), "{} has no '{}' field", where, field);

  Entry entry{.name = name, .dtype = DType::F32, .shape = {}};
  const json& dtype = value["dtype"];
  std::optional<DType> known = dtype.is_string() ? dtype_from_file_name(dtype.get<std::string>()) : std::nullopt;
  MG_CHECK(known.has_value(), "{} has dtype {}, which mixgrad cannot hold; it holds {}", where, quoted(dtype),
           dtype_names(/*file_names=*/true));
  entry.dtype = *known;

  // Sizes below 2^63 fit a Shape; the running product must too, or the element count is meaningless.
  const json& shape = value["shape"];
  MG_CHECK(shape.is_array(), "{} has shape {}, not an array of sizes", where, quoted(shape));
  MG_CHECK(shape.size() <= kMaxDims, "{} has {} dims, more than the {} mixgrad reads", where, shape.size(), kMaxDims);
  std::int64_t numel = 1;
  for (const json& size : shape) {
    MG_CHECK(size.is_number_unsigned() && size.get<std::uint64_t>() <= std::numeric_limits<std::int64_t>::max(),
             "{} has shape {}: every size must be a non-negative integer below 2^63", where, quoted(shape));
    entry.shape.push_back(size.get<std::int64_t>());
    MG_CHECK(!__builtin_mul_overflow(numel, entry.shape.back(), &numel),
             "{} has shape {}, whose number of elements overflows 64 bits", where, quoted(shape));
  }
  std::int64_t nbits = 0;
  MG_CHECK(!__builtin_mul_overflow(numel, static_cast<std::int64_t>(dtype_info(entry.dtype).bits), &nbits),
           "{} has shape {} of {}, whose size in bytes overflows 64 bits", where, quoted(shape), quoted(dtype));
  check_packed_rows(where, entry.shape, entry.dtype);
  const auto nbytes = static_cast<std::int64_t>(dtype_bytes(entry.dtype, numel));

  const json& offsets = value["data_offsets"];
  MG_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
               offsets[1].is_number_unsigned(),
           "{} has data_offsets {}, not two non-negative integers [begin, end]", where, quoted(offsets));
  entry.begin = offsets[0].get<std::uint64_t>();
  entry.end = offsets[1].get<std::uint64_t>();
  MG_CHECK(entry.begin <= entry.end, "{} has data_offsets [{}, {}], which end before they begin", where, entry.begin,
           entry.end);
  MG_CHECK(entry.end <= buffer_size,
           "{} has data_offsets [{}, {}] but the data buffer holds only {} bytes; the "
           "file is truncated or the offsets are wrong",
           where, entry.begin, entry.end, buffer_size);
  MG_CHECK(entry.end - entry.begin == static_cast<std::uint64_t>(nbytes),
           "{} has data_offsets [{}, {}] but shape {} of {} needs {} bytes", where, entry.begin, entry.end, entry.shape,
           dtype.get<std::string>(), nbytes);
  return entry;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& value) {
  MG_CHECK(value.is_object(), "data::load_safetensors: {}: '__metadata__' is a JSON {}, not an object of strings", path,
           value.type_name());
  std::map<std::string, std::string> metadata;
  for (const auto& item : value.items()) {
    MG_CHECK(item.value().is_string(),
             "data::load_safetensors: {}: metadata '{}' is {}, not a string; the format "
             "allows only strings there",
             path, cut(item.key()), quoted(item.value()));
    metadata.emplace(item.key(), item.value().get<std::string>());
  }
  return metadata;
}

// A BOOL byte is 0 or 1 (the format's rule and C++'s bool); a file is untrusted input, so any other
// byte is an error naming it, not a value that is both true and not 1.
void check_bools(const std::string& path, const std::string& name, const Tensor& tensor) {
  const auto* bytes = static_cast<const std::uint8_t*>(tensor.data_ptr());
  for (std::int64_t i = 0; i < tensor.numel(); ++i)
    MG_CHECK(bytes[i] <= 1,
             "data::load_safetensors: {}: tensor '{}' is BOOL, but its element {} is the byte {}; a BOOL byte is 0 "
             "or 1",
             path, cut(name), i, bytes[i]);
}

// The tensors must tile the data buffer: sorted by offset, each begins where the previous ends and
// the last ends at the end of the file. So no byte is claimed twice or by no one, as the reference
// implementation requires. Sorts `entries` into file order.
void check_tiling(const std::string& path, std::vector<Entry>& entries, std::uint64_t buffer_size) {
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  std::uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& entry : entries) {
    MG_CHECK(entry.begin >= covered,
             "data::load_safetensors: {}: tensors '{}' (data_offsets [{}, {}]) and '{}' "
             "(data_offsets [{}, {}]) overlap in the data buffer",
             path, cut(previous ? previous->name : ""), previous ? previous->begin : 0, covered, cut(entry.name),
             entry.begin, entry.end);
    MG_CHECK(entry.begin == covered,
             "data::load_safetensors: {}: bytes [{}, {}) of the data buffer belong to no "
             "tensor (a hole before '{}'); the tensors must cover the buffer exactly",
             path, covered, entry.begin, cut(entry.name));
    covered = entry.end;
    previous = &entry;
  }
  MG_CHECK(covered == buffer_size,
           "data::load_safetensors: {}: the tensors cover {} bytes of the data buffer but it "
           "holds {}: {} trailing bytes belong to no tensor",
           path, covered, buffer_size, buffer_size - covered);
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  std::error_code error;
  MG_CHECK(std::filesystem::is_regular_file(path, error),
           "data::load_safetensors: {}: no such file (or not a "
           "regular file); check the path",
           path);
  const std::uint64_t file_size = std::filesystem::file_size(path, error);
  std::ifstream in(path, std::ios::binary);
  MG_CHECK(!error && in, "data::load_safetensors: {}: cannot open the file for reading: {}", path,
           std::strerror(errno));
  MG_CHECK(file_size >= 8,
           "data::load_safetensors: {}: the file is {} bytes, shorter than the 8-byte header length "
           "every safetensors file starts with; it is truncated or not a safetensors file",
           path, file_size);

  unsigned char length_bytes[8];
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  std::uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = header_length << 8 | length_bytes[i];
  MG_CHECK(header_length <= kMaxHeaderBytes,
           "data::load_safetensors: {}: the header length field says {} bytes, "
           "over the format's limit of {}; the file is corrupt or not a safetensors file",
           path, header_length, kMaxHeaderBytes);
  MG_CHECK(header_length <= file_size - 8,
           "data::load_safetensors: {}: the header length field says {} bytes but "
           "only {} bytes follow it; the file is truncated",
           path, header_length, file_size - 8);

  std::string text(header_length, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_length));
  MG_CHECK(in.gcount() == static_cast<std::streamsize>(header_length),
           "data::load_safetensors: {}: reading the "
           "{}-byte header stopped after {} bytes",
           path, header_length, in.gcount());
  check_nesting(path, text);
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& error) {
    // Every failure of the parser, not only a syntax error: a number outside double's range
    // ({"a":1e999}) is an out_of_range, and must not escape as anything but an mg::Error.
    throw Error(
        fmt::format("data::load_safetensors: {}: the header is not valid JSON: {}", path, cut_message(error.what())));
  }
  MG_CHECK(header.is_object(),
           "data::load_safetensors: {}: the header is a JSON {}, not an object of tensor name -> "
           "entry",
           path, header.type_name());

  SafetensorsFile file;
  const std::uint64_t buffer_size = file_size - 8 - header_length;
  std::vector<Entry> entries;
  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__")
      file.metadata = parse_metadata(path, item.value());
    else
      entries.push_back(parse_entry(path, item.key(), item.value(), buffer_size));
  }
  check_tiling(path, entries, buffer_size);

  // Tiled and sorted, the entries are read front to back with no seeking.
  for (const Entry& entry : entries) {
    Tensor tensor = Tensor::empty(entry.shape, {.dtype = entry.dtype});
    const auto nbytes = static_cast<std::streamsize>(entry.end - entry.begin);
    in.read(static_cast<char*>(tensor.data_ptr()), nbytes);
    MG_CHECK(in.gcount() == nbytes,
             "data::load_safetensors: {}: reading tensor '{}' stopped after {} of {} bytes; "
             "did the file change while it was read?",
             path, cut(entry.name), in.gcount(), nbytes);
    if (entry.dtype == DType::BOOL) check_bools(path, entry.name, tensor);
    file.tensors.emplace(entry.name, std::move(tensor));
  }
  return file;
}

void check_matches(const Tensor& stored, const Tensor& expected, const std::string& name, const std::string& path) {
  MG_CHECK(expected.defined(), "data::check_matches: {}: the tensor to load '{}' into is undefined", path, name);
  MG_CHECK(stored.defined(),
           "data::check_matches: {}: the file has no tensor '{}' ({} {} expected); was it saved "
           "from a different model?",
           path, name, expected.dtype(), expected.shape());
  MG_CHECK(stored.dtype() == expected.dtype() && stored.shape() == expected.shape(),
           "data::check_matches: {}: tensor '{}' is {} {} in the file but {} {} is expected; was it saved from a "
           "different model or precision recipe?",
           path, name, stored.dtype(), stored.shape(), expected.dtype(), expected.shape());
}

}  // namespace mg::data
