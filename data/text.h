// A character-level text corpus: every byte is a token.
//
//   data::TextCorpus corpus = data::kjv_corpus();        // the King James Bible, 4.3 MB, 73 symbols
//   Tensor ids = corpus.encode("In the beginning");       // [16] i32
//   std::string back = corpus.decode(ids);                // "In the beginning"
//   corpus.train();  corpus.validation();                 // first 90% / last 10% of the tokens
//
// The vocabulary is the set of distinct bytes in the text, sorted by byte value, so token id i is
// vocabulary()[i] and the same text always gives the same ids. Bytes are not decoded as UTF-8: a
// multi-byte character is several tokens (the KJV text is plain ASCII, so this never comes up).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace mg::data {

class TextCorpus {
 public:
  // Fewer characters than this cannot give both splits a window of one input and one target.
  static constexpr std::int64_t kMinCharacters = 20;

  // The vocabulary of `text`, and its tokens split at floor(train_fraction * size): the first part
  // is train(), the rest validation(). `source` names the text in messages (a path, "KJV").
  // Requires at least kMinCharacters characters and 0 < train_fraction < 1 with both parts holding
  // two tokens or more.
  explicit TextCorpus(std::string text, std::string source = "text", double train_fraction = 0.9);

  const std::string& text() const { return text_; }
  const std::string& source() const { return source_; }
  std::int64_t size() const { return static_cast<std::int64_t>(text_.size()); }

  // The distinct bytes of the text in increasing order; id i stands for vocabulary()[i].
  const std::string& vocabulary() const { return vocabulary_; }
  std::int64_t vocab_size() const { return static_cast<std::int64_t>(vocabulary_.size()); }

  // The ids of `text` as a 1-D i32 tensor; an mg::Error naming the first byte that is not in the
  // vocabulary and where it is.
  Tensor encode(std::string_view text) const;
  // The bytes of an i32 tensor of ids (any shape, read in row-major order); an mg::Error naming the
  // first id outside 0..vocab_size()-1 and its position.
  std::string decode(const Tensor& ids) const;

  // The tokens of the whole text, and its first part and last part (views of it), all 1-D i32.
  const Tensor& tokens() const { return tokens_; }
  const Tensor& train() const { return train_; }
  const Tensor& validation() const { return validation_; }

 private:
  std::string text_;
  std::string source_;
  std::string vocabulary_;
  std::array<std::int32_t, 256> id_of_byte_{};  // -1 for bytes the text does not contain
  Tensor tokens_, train_, validation_;
};

// The whole file `path` as a corpus (read as bytes); an mg::Error if it cannot be read or is too short.
TextCorpus load_text_file(const std::string& path, double train_fraction = 0.9);

// The King James Bible as the Debian package bible-kjv prints it: `bible -l 79 Gen1:1-Rev22:21`
// (about 4.3 MB of ASCII: "Genesis 1", then each verse indented and numbered, lines wrapped at
// 79 columns). The first call runs the program once and keeps the text in kjv_cache_path(); later
// calls, in any process, read that file. An mg::Error if `bible` is not installed (apt-get install
// bible-kjv) or prints nothing.
std::string kjv_text();
TextCorpus kjv_corpus(double train_fraction = 0.9);

// Where kjv_text() keeps its copy: $MG_CACHE_DIR/kjv.txt, else $XDG_CACHE_HOME/mixgrad/kjv.txt,
// else $HOME/.cache/mixgrad/kjv.txt; empty when none of these variables is set (then nothing is
// cached and every call runs `bible`).
std::string kjv_cache_path();

}  // namespace mg::data
