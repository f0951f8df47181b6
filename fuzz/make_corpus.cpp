// fuzz_make_corpus: writes the seed files of fuzz/corpus/safetensors/ and fuzz/corpus/checkpoint/ with
// mixgrad's own writers, so that the fuzzers start from real files. Run it again when a format
// changes (a checkpoint version 2, a new dtype), then check the sizes (fuzz/README.md):
//
//   cmake --build build-fuzz --target fuzz_make_corpus && build-fuzz/fuzz/fuzz_make_corpus fuzz/corpus
//
// Not a fuzz target, and not built by default. The checkpoint seeds are of the run in
// checkpoint_run.h, after two training steps, as mixgrad train saves them (tools/train.cpp).
#include <fmt/format.h>

#include <filesystem>

#include "data/safetensors.h"
#include "fuzz/checkpoint_run.h"
#include "kernels/threads.h"

using namespace mg;

namespace {

void write_safetensors_seeds(const std::filesystem::path& dir) {
  Generator generator(3);
  data::save_safetensors(dir / "f32_with_metadata.st",
                         {{"fc.weight", randn({3, 4}, generator)}, {"fc.bias", randn({3}, generator)}},
                         {{"step", "12"}, {"recipe", "mixed_float16"}});
  // Every dtype mixgrad holds, a 0-d tensor and an empty one.
  data::save_safetensors(dir / "every_dtype.st", {{"half", randn({2, 2}, generator, {.dtype = DType::F16})},
                                                  {"brain", randn({3}, generator, {.dtype = DType::BF16})},
                                                  {"double", state_scalar(0.5)},
                                                  {"ints", randint(-5, 5, {2}, generator)},
                                                  {"empty", Tensor::empty({0, 4})}});
}

// `run` after two steps, with the entries mixgrad train adds and the data state of `text` or of the
// image loader.
void write_checkpoint_seed(const std::filesystem::path& path, bool text) {
  fuzz::CheckpointRun run;
  for (int step = 0; step < 2; ++step) (void)run.trainer.step(run.loader.next());
  StateDict extra{{"step", state_scalar(2.0)}, {"recent_losses", from_vector({0.75, 0.5}, {2}, {.dtype = DType::F64})}};
  if (text) (void)run.text.next();
  state_insert(extra, "data.", text ? run.text.state_dict() : run.loader.state_dict());
  train::save_checkpoint(path, run.trainer.checkpoint_objects(), extra,
                         {{"data", text ? "text" : "fashion-mnist"},
                          {"model", "mlp"},
                          {"precision", "float16_master"},
                          {"optimizer", "adamw"}});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: {} CORPUS_DIR   (fuzz/corpus: writes its safetensors/ and checkpoint/ seeds)\n",
               argv[0]);
    return 2;
  }
  set_num_threads(1);
  const std::filesystem::path corpus = argv[1];
  std::filesystem::create_directories(corpus / "safetensors");
  std::filesystem::create_directories(corpus / "checkpoint");
  write_safetensors_seeds(corpus / "safetensors");
  write_checkpoint_seed(corpus / "checkpoint" / "resume_images.st", false);
  write_checkpoint_seed(corpus / "checkpoint" / "resume_text.st", true);
  fmt::print("fuzz_make_corpus: wrote the seeds of {}/safetensors and {}/checkpoint\n", corpus.string(),
             corpus.string());
  return 0;
}
