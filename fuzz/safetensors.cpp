// fuzz_safetensors: data::load_safetensors (data/safetensors.h) on any bytes: the 8-byte header
// length, the JSON header (nlohmann's parser, then mixgrad's checks of every entry's dtype, shape and
// data_offsets, and of __metadata__), and the data buffer they must tile. A bad file must end in an
// mg::Error; any other exception, a crash, a hang or a sanitizer report is a finding.
//
//   scripts/fuzz 60                                  # every target for 60 s, from a copy of fuzz/corpus/
//   build-fuzz/fuzz/fuzz_safetensors -dict=fuzz/safetensors.dict -max_total_time=60 scratch/ fuzz/corpus/safetensors
//   build-fuzz/fuzz/fuzz_safetensors crash-<sha1>    # replay one input
#include "data/safetensors.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = mg::fuzz::write_input(data, size);
  try {
    const mg::data::SafetensorsFile file = mg::data::load_safetensors(path);
    // A file that was accepted must hold what its header promised: read every element (ASan sees a
    // tensor whose storage is shorter than its shape).
    for (const auto& [name, tensor] : file.tensors) (void)tensor.to_vector<double>();
  } catch (const mg::Error&) {}
  return 0;
}
