// Reading JSON from a file nobody vouches for (a safetensors header): a bound on nesting checked
// before the parser builds a tree, and untrusted text cut short in error messages, so that no file
// can overflow the stack or turn one message into megabytes. data/safetensors.cpp uses these.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace mg::data {

// `text` cut to a few dozen characters, with its length when cut: a name or value in a message.
std::string cut(std::string text);
// A parser's own message (it quotes the text it last read, of any length), cut to a few lines.
std::string cut_message(std::string text);
// A JSON value as it appears in a message: its text (invalid UTF-8 replaced), cut.
std::string quoted(const nlohmann::json& value);
// Throws an mg::Error naming `path` when the brackets of `text` nest deeper than 8 levels (a
// safetensors header nests 3). Brackets inside strings do not count.
void check_nesting(const std::string& path, const std::string& text);

}  // namespace mg::data
