#include "data/untrusted_json.h"

#include <fmt/format.h>

#include "core/error.h"

namespace mg::data {

namespace {

// A valid header nests 3 levels (the header object, an entry, its shape or data_offsets). The bound
// leaves room to report a wrong value as such ("shape [[2]] is not an array of sizes") while keeping
// the recursion of anything that walks the parsed tree (dump(), which builds error messages) shallow:
// a header nested 100,000 levels deep would overflow the stack.
constexpr int kMaxHeaderDepth = 8;

// Untrusted text in an error message is cut to this many characters: a message must stay a line,
// whatever a file holds.
constexpr std::size_t kMaxQuoted = 48;

}  // namespace

std::string cut(std::string text) {
  if (text.size() > kMaxQuoted) text = text.substr(0, kMaxQuoted) + fmt::format("... ({} bytes)", text.size());
  return text;
}

// The parser's own message quotes the text it last read, which can be any length.
std::string cut_message(std::string text) {
  constexpr std::size_t kMaxMessage = 240;
  if (text.size() > kMaxMessage) text = text.substr(0, kMaxMessage) + "...";
  return text;
}

// A JSON value of the header as it appears in a message: its text, cut.
std::string quoted(const nlohmann::json& value) {
  return cut(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

// Refuses a header whose brackets nest deeper than kMaxHeaderDepth, before the parser builds a tree
// of it. Brackets inside strings do not count; an escaped quote does not end a string.
void check_nesting(const std::string& path, const std::string& text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{') {
      MG_CHECK(++depth <= kMaxHeaderDepth,
               "data::load_safetensors: {}: the header nests brackets deeper than {} "
               "levels (at byte {}); a safetensors header nests 3, so the file is corrupt or hostile",
               path, kMaxHeaderDepth, i);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace mg::data
