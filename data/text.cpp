#include "data/text.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/warning.h"

namespace mg::data {

namespace {

// "'x' (0x78)" for a printable byte, "0x0a" for the others.
std::string describe_byte(unsigned char byte) {
  return std::isprint(byte) ? fmt::format("'{}' (0x{:02x})", static_cast<char>(byte), byte)
                            : fmt::format("0x{:02x}", byte);
}

// A 1-D i32 tensor of the ids of text[begin, end).
Tensor token_tensor(std::string_view text, std::size_t begin, std::size_t end,
                    const std::array<std::int32_t, 256>& id_of_byte) {
  Tensor tokens = Tensor::empty({static_cast<std::int64_t>(end - begin)}, {.dtype = DType::I32});
  std::int32_t* out = tokens.data<std::int32_t>();
  for (std::size_t i = begin; i < end; ++i) out[i - begin] = id_of_byte[static_cast<unsigned char>(text[i])];
  return tokens;
}

// The whole file as bytes; an mg::Error naming `op`, the file and the reason when it cannot be read.
std::string read_file(const std::string& path, const char* op) {
  std::error_code ec;
  MG_CHECK(std::filesystem::exists(path, ec), "{}: cannot open '{}': no such file", op, path);
  MG_CHECK(!std::filesystem::is_directory(path, ec), "{}: '{}' is a directory, not a text file", op, path);
  std::ifstream file(path, std::ios::binary);
  MG_CHECK(file.is_open(), "{}: cannot open '{}': {}", op, path, std::strerror(errno));
  std::ostringstream contents;
  contents << file.rdbuf();
  MG_CHECK(!file.bad(), "{}: reading '{}' failed: {}", op, path, std::strerror(errno));
  std::string text = std::move(contents).str();
  MG_CHECK(!text.empty(), "{}: '{}' is empty; a corpus needs text", op, path);
  return text;
}

// What `bible` prints for the whole book. "-l 79" fixes the line width: without it the program
// wraps at $COLUMNS - 1, and the corpus would depend on the terminal it was first made from.
// stdin from /dev/null: bible turns interactive when it has nothing left to print.
std::string run_bible() {
  const char* op = "mg::data::kjv_text";
  const char* command = "bible -l 79 Gen1:1-Rev22:21 </dev/null 2>/dev/null";
  std::FILE* pipe = ::popen(command, "r");
  MG_CHECK(pipe != nullptr, "{}: cannot start `{}`: {}", op, command, std::strerror(errno));
  std::string text;
  char buffer[1 << 16];
  while (std::size_t got = std::fread(buffer, 1, sizeof buffer, pipe)) text.append(buffer, got);
  const int status = ::pclose(pipe);
  // The shell exits 127 when it cannot find the program.
  MG_CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 127),
           "{}: the `bible` program is not installed; the King James Bible corpus comes from the Debian package "
           "bible-kjv: apt-get install bible-kjv",
           op);
  MG_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "{}: `{}` failed (exit status {}); reinstall bible-kjv (apt-get install --reinstall bible-kjv)", op, command,
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  MG_CHECK(text.size() >= static_cast<std::size_t>(TextCorpus::kMinCharacters),
           "{}: `{}` printed {} bytes, not the Bible: is /usr/lib/bible.data there? reinstall bible-kjv", op, command,
           text.size());
  return text;
}

// Writes `text` to `path` through a temporary file and a rename, so that a crash or a second process
// never leaves a half-written cache behind. Failing to cache is only a warning: the text is in hand.
void write_cache(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string temporary = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file.write(text.data(), static_cast<std::streamsize>(text.size()));
    file.close();
    if (file.good()) {
      fs::rename(temporary, path, ec);
      if (!ec) return;
    }
  }
  fs::remove(temporary, ec);
  warn(fmt::format("mg::data::kjv_text: could not cache the King James Bible in '{}'; every run will call "
                   "`bible` again (set MG_CACHE_DIR to a writable directory)",
                   path));
}

// The KJV ends with Revelation 22:21, "...be with you all. Amen." A cached file that does not end
// so was not written by kjv_text (or by an older layout) and is made again.
bool looks_complete(const std::string& text) { return text.ends_with("Amen.\n"); }

}  // namespace

TextCorpus::TextCorpus(std::string text, std::string source, double train_fraction)
    : text_(std::move(text)), source_(std::move(source)) {
  const char* op = "mg::data::TextCorpus";
  const std::int64_t n = size();
  MG_CHECK(n >= kMinCharacters,
           "{}: '{}' has {} characters; a corpus needs at least {} (each split must hold "
           "a window of one input and one target)",
           op, source_, n, kMinCharacters);
  MG_CHECK(train_fraction > 0.0 && train_fraction < 1.0, "{}: train_fraction must be in (0, 1), got {}", op,
           train_fraction);
  const auto train_count = static_cast<std::int64_t>(std::floor(train_fraction * static_cast<double>(n)));
  MG_CHECK(train_count >= 2 && n - train_count >= 2,
           "{}: a train_fraction of {} splits the {} characters of "
           "'{}' into {} and {}; each split needs at least 2",
           op, train_fraction, n, source_, train_count, n - train_count);

  std::array<bool, 256> present{};
  for (char c : text_) present[static_cast<unsigned char>(c)] = true;
  id_of_byte_.fill(-1);
  for (int byte = 0; byte < 256; ++byte) {
    if (!present[byte]) continue;
    id_of_byte_[byte] = static_cast<std::int32_t>(vocabulary_.size());
    vocabulary_.push_back(static_cast<char>(byte));
  }
  // Two tensors of their own, not views of one: the splits are used apart, and a reader of this
  // module needs only core/.
  train_ = token_tensor(text_, 0, static_cast<std::size_t>(train_count), id_of_byte_);
  validation_ = token_tensor(text_, static_cast<std::size_t>(train_count), text_.size(), id_of_byte_);
}

Tensor TextCorpus::encode(std::string_view text) const {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    MG_CHECK(id_of_byte_[byte] >= 0,
             "mg::data::TextCorpus::encode: character {} at position {} is not in the "
             "vocabulary of '{}' ({} characters)",
             describe_byte(byte), i, source_, vocab_size());
  }
  return token_tensor(text, 0, text.size(), id_of_byte_);
}

std::string TextCorpus::decode(const Tensor& ids) const {
  const char* op = "mg::data::TextCorpus::decode";
  MG_CHECK(ids.defined(), "{}: the ids tensor is undefined", op);
  MG_CHECK(ids.dtype() == DType::I32 || ids.dtype() == DType::I64, "{}: ids must be i32 or i64, got {}", op,
           ids.dtype());
  MG_CHECK(ids.device().is_cpu(), "{}: ids are on {}; copy them to the CPU first", op, ids.device());
  // i64 ids (PyTorch's) read as i32: one past the i32 range saturates, and is outside the vocabulary.
  const std::vector<std::int32_t> read = ids.to_vector<std::int32_t>();
  const std::int32_t* values = read.data();
  std::string text(static_cast<std::size_t>(ids.numel()), '\0');
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    MG_CHECK(values[i] >= 0 && values[i] < vocab_size(),
             "{}: id {} at position {} is outside the vocabulary "
             "of '{}' (ids 0..{})",
             op, values[i], i, source_, vocab_size() - 1);
    text[static_cast<std::size_t>(i)] = vocabulary_[static_cast<std::size_t>(values[i])];
  }
  return text;
}

TextCorpus load_text_file(const std::string& path, double train_fraction) {
  return TextCorpus(read_file(path, "mg::data::load_text_file"), path, train_fraction);
}

std::string kjv_cache_path() {
  auto env = [](const char* name) -> std::string {
    const char* value = std::getenv(name);
    return value != nullptr ? value : "";
  };
  if (!env("MG_CACHE_DIR").empty()) return env("MG_CACHE_DIR") + "/kjv.txt";
  if (!env("XDG_CACHE_HOME").empty()) return env("XDG_CACHE_HOME") + "/mixgrad/kjv.txt";
  if (!env("HOME").empty()) return env("HOME") + "/.cache/mixgrad/kjv.txt";
  return "";
}

std::string kjv_text() {
  const std::string cache = kjv_cache_path();
  std::error_code ec;
  if (!cache.empty() && std::filesystem::is_regular_file(cache, ec)) {
    try {
      std::string text = read_file(cache, "mg::data::kjv_text");
      if (looks_complete(text)) return text;
    } catch (const Error&) {
      // An unreadable cache is made again below, like a missing one.
    }
  }
  std::string text = run_bible();
  if (!cache.empty()) write_cache(cache, text);
  return text;
}

TextCorpus kjv_corpus(double train_fraction) {
  return TextCorpus(kjv_text(), "King James Bible (bible-kjv)", train_fraction);
}

}  // namespace mg::data
