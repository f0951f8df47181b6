// fuzz_checkpoint: what `mixgrad train --resume` reads from a file (tools/train.cpp), on any bytes:
// train::load_checkpoint (train/checkpoint.h) into a fixed run (checkpoint_run.h: model, AdamW with
// f32 masters, GradScaler, ScaleMonitor, generator), then the caller's entries as the program takes
// them: extra.step, extra.recent_losses, and extra.data.* into the data loader's load_state_dict (the
// TextBatcher's when the state names a context), and one batch and one training step from what was
// restored; when --resume reads another entry, read it here too. A bad file must end in an
// mg::Error; any other exception, a crash, a hang or a sanitizer report is a finding.
//
//   scripts/fuzz 60                                  # every target for 60 s, from a copy of fuzz/corpus/
//   build-fuzz/fuzz/fuzz_checkpoint -dict=fuzz/safetensors.dict -max_total_time=60 scratch/ fuzz/corpus/checkpoint
//   build-fuzz/fuzz/fuzz_checkpoint crash-<sha1>     # replay one input
#include <cstring>
#include <limits>
#include <random>

#include "fuzz/checkpoint_run.h"
#include "fuzz/fuzz_input.h"
#include "kernels/threads.h"

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  mg::set_num_threads(1);  // the same results on any thread count; one spawns no workers
  return 0;
}

// Every count and scalar of a checkpoint is a number in its data buffer (f64 scalars, step counts),
// and byte flips rarely make NaN, 1e300 or -1 of one. So half the mutations are libFuzzer's own, and
// half overwrite 8 or 4 bytes anywhere in the buffer (an f16 tensor of odd size leaves the next one
// unaligned) with a number a reader must refuse or handle.
extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
  std::minstd_rand random(seed);
  std::uint64_t header_length = 0;
  if (size >= 8) std::memcpy(&header_length, data, 8);  // little-endian, as the format and x86 are
  if (random() % 2 == 0 || size < 16 || header_length > size - 16) return LLVMFuzzerMutate(data, size, max_size);
  const std::size_t buffer = 8 + header_length;
  const std::size_t offset = buffer + random() % (size - 8 - buffer + 1);
  constexpr double kDoubles[] = {std::numeric_limits<double>::quiet_NaN(),
                                 std::numeric_limits<double>::infinity(),
                                 -1.0,
                                 0.5,
                                 1e300,
                                 0x1p53 + 2,
                                 0x1p63,
                                 0.0};
  constexpr std::int32_t kInts[] = {-1, 0, std::numeric_limits<std::int32_t>::max(),
                                    std::numeric_limits<std::int32_t>::min()};
  if (random() % 2 == 0)
    std::memcpy(data + offset, &kDoubles[random() % std::size(kDoubles)], 8);
  else
    std::memcpy(data + offset, &kInts[random() % std::size(kInts)], 4);
  return size;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mg;
  const std::string& path = fuzz::write_input(data, size);
  fuzz::CheckpointRun run;  // loading changes it, and the default generator: a fresh one per input
  try {
    const train::LoadedCheckpoint loaded = train::load_checkpoint(path, run.trainer.checkpoint_objects());
    const std::string owner = "fuzz_checkpoint: extra.*";
    (void)state_whole_number(loaded.extra, "step", owner, 0, std::int64_t{1} << 53);
    if (loaded.extra.count("recent_losses")) (void)loaded.extra.at("recent_losses").to_vector<double>();
    const StateDict data_state = state_subset(loaded.extra, "data.");
    if (data_state.count("context")) {
      run.text.load_state_dict(data_state);
      (void)run.text.next();
    } else {
      run.loader.load_state_dict(data_state);
      (void)run.trainer.step(run.loader.next());
    }
  } catch (const Error&) {}
  return 0;
}
