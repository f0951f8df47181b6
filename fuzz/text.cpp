// fuzz_text: the text corpus reader (data/text.h), load_text_file, on any bytes, then what a run does
// with the corpus: decode its tokens (which must give the file back, byte for byte) and draw one batch
// of windows from its train split (data/batches.h). A file that is too short must end in an
// mg::Error; any other exception, a crash, a hang or a sanitizer report is a finding.
//
//   scripts/fuzz 60                                  # every target for 60 s, from a copy of fuzz/corpus/
//   build-fuzz/fuzz/fuzz_text -max_total_time=60 scratch/ fuzz/corpus/text
//   build-fuzz/fuzz/fuzz_text crash-<sha1>           # replay one input
#include <string_view>

#include "data/batches.h"
#include "data/text.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = mg::fuzz::write_input(data, size);
  try {
    const mg::data::TextCorpus corpus = mg::data::load_text_file(path);
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    if (corpus.text() != input || corpus.decode(corpus.tokens()) != input) {
      std::fputs("fuzz_text: the corpus's text or its decoded tokens differ from the file\n", stderr);
      std::abort();
    }
    mg::data::TextBatcher batcher(corpus.train(), /*batch_size=*/2, /*context=*/4);
    (void)batcher.next();
  } catch (const mg::Error&) {}
  return 0;
}
