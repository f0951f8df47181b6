// fuzz_idx: the IDX readers of Fashion-MNIST (data/idx.h), read_idx_images and read_idx_labels, on
// any bytes, plain or gzipped (zlib reads both): the magic number, the sizes, the elements, and the
// labels' range. A bad file must end in an mg::Error; any other exception, a crash, a hang or a
// sanitizer report is a finding.
//
//   scripts/fuzz 60                                  # every target for 60 s, from a copy of fuzz/corpus/
//   build-fuzz/fuzz/fuzz_idx -max_total_time=60 scratch/ fuzz/corpus/idx
//   build-fuzz/fuzz/fuzz_idx crash-<sha1>            # replay one input
#include "data/idx.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = mg::fuzz::write_input(data, size);
  // Images whole (where trailing bytes are an error) and labels cut to a limit: both ways through the
  // one IDX reader, in two opens (each costs zlib's buffers, about 2 MB under ASan).
  try {
    (void)mg::data::read_idx_images(path);
  } catch (const mg::Error&) {}
  try {
    (void)mg::data::read_idx_labels(path, /*limit=*/2);
  } catch (const mg::Error&) {}
  return 0;
}
