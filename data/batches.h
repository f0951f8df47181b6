// Batches for training: shuffled minibatches of a labelled set, and random windows of a text.
//
//   data::DataLoader loader(train.images, train.labels, {.batch_size = 128, .seed = 1});
//   for (int epoch = 0; epoch < 10; ++epoch)
//     do {
//       data::Batch batch = loader.next();        // inputs [128, 1, 28, 28], labels [128]
//       ...
//     } while (!loader.end_of_epoch());
//
//   data::TextBatcher batcher(corpus.train(), /*batch_size=*/32, /*context=*/64, /*seed=*/1);
//   data::TextBatch batch = batcher.next();       // inputs [32, 64], targets [32, 64], i32
//
// Randomness is a pure function of (seed, epoch) or (seed, step) through Philox (core/generator.h),
// never of earlier calls, so the same seed gives the same batches on every machine, and a run
// resumed with load_state_dict() sees exactly the batches it would have seen without stopping.
//
// Every batch is a pair of new tensors: the caller may keep it as long as it likes (an autograd
// tape often does) and nothing changes under it. The copies cost no allocation in a training loop:
// the CPU caching allocator (core/allocator.h) hands the memory of the batch the caller just dropped
// to the next one.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/state_dict.h"
#include "core/tensor.h"

namespace mg::data {

struct Batch {
  Tensor inputs;  // [B, ...]: rows of the loader's inputs
  Tensor labels;  // [B, ...]: the same rows of its labels
  std::int64_t global_rows = 0;  // rows of the whole batch this one is a shard of (B when not sharded)
};

// One rank's part of every batch in data-parallel training (train/data_parallel.h). Of a batch of n
// rows, shard `index` of `count` takes rows [floor(index n / count), floor((index + 1) n / count)):
// the shards of all ranks, in rank order, are exactly the batch one process would get, and each
// rank reads only its own rows.
struct Shard {
  int index = 0;
  int count = 1;
  std::pair<std::int64_t, std::int64_t> rows(std::int64_t n) const {
    return {index * n / count, (index + 1) * n / count};
  }
};

struct DataLoaderOptions {
  std::int64_t batch_size = 64;
  bool shuffle = true;  // a new permutation each epoch; false serves rows 0, 1, 2, ... every epoch
  bool drop_last = false;  // skip the last, smaller batch of an epoch (every batch then has batch_size rows)
  std::uint64_t seed = 0;
  Shard shard = {};  // serve only this rank's rows of each batch (the order is every rank's)
};

// Minibatches of (inputs, labels) pairs, epoch after epoch without end.
//
// Epoch e serves every row exactly once, in the order of a Fisher-Yates shuffle drawn from
// Philox under `seed` at blocks e * ceil(2 (N - 1) / 4) onwards (as if one Generator(seed) drew
// 2 (N - 1) words per epoch): step i of the shuffle (i = N-1 down to 1) swaps row i with row
// j = floor(u * (i + 1) / 2^64), u the 64-bit number made of the next two words.
class DataLoader {
 public:
  // inputs [N, ...] and labels [N, ...] (usually [N]) on the CPU, any dtypes, N >= 1. The loader
  // shares their storage and copies rows out of them at each next(). With shard.count ranks, every
  // batch (the last of an epoch too) must have at least one row per rank.
  DataLoader(Tensor inputs, Tensor labels, DataLoaderOptions options = {});

  // The next batch of the current epoch (this shard's rows of it); when the epoch has served all its
  // batches, first starts the next one (epoch() + 1, a new permutation).
  Batch next();

  std::int64_t size() const { return size_; }  // N
  const DataLoaderOptions& options() const { return options_; }
  // N / batch_size with drop_last, ceil(N / batch_size) without.
  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }
  std::int64_t epoch() const { return epoch_; }  // the epoch of the last batch (0 at first)
  std::int64_t batch_index() const { return batch_index_; }  // batches served in the current epoch
  bool end_of_epoch() const { return batch_index_ == batches_per_epoch_; }
  // The rows of the current epoch in the order they are served.
  const std::vector<std::int64_t>& order() const { return order_; }

  // "epoch", "batch_index", the seed as "seed_high" and "seed_low" (32 bits each, so every 64-bit
  // seed is exact in an f64), and "size", "batch_size", "shuffle", "drop_last". Loading takes the
  // position and seed, and refuses a state whose size or batching differs from this loader's:
  // those would serve different batches.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  // Sets epoch() to `epoch`, batch_index() to 0 and order() to that epoch's permutation.
  void start_epoch(std::int64_t epoch);

  Tensor inputs_, labels_;
  DataLoaderOptions options_;
  std::int64_t size_ = 0, batches_per_epoch_ = 0;
  std::int64_t epoch_ = 0, batch_index_ = 0;
  std::vector<std::int64_t> order_;
};

struct TextBatch {
  Tensor inputs;  // [B, T] i32: tokens s .. s+T-1 of each window
  Tensor targets;  // [B, T] i32: tokens s+1 .. s+T, the token that follows each input
  std::int64_t global_rows = 0;  // windows of the whole batch this one is a shard of
};

// B windows of T + 1 consecutive tokens at random starts, as inputs and targets shifted by one.
// Step k draws its starts from Philox under `seed` at blocks k * ceil(2B / 4) onwards: window b
// starts at floor(u_b * (N - T) / 2^64), u_b made of words 2b and 2b+1. Windows may overlap.
class TextBatcher {
 public:
  // tokens: a 1-D i32 CPU tensor (a TextCorpus split) of N >= context + 1 tokens; batch_size and
  // context (T) >= 1. With a shard, next() returns only that shard's windows of each batch of
  // batch_size (at least one per rank).
  TextBatcher(Tensor tokens, std::int64_t batch_size, std::int64_t context, std::uint64_t seed = 0, Shard shard = {});

  TextBatch next();

  std::int64_t batch_size() const { return batch_size_; }
  std::int64_t context() const { return context_; }
  std::int64_t step() const { return step_; }  // batches drawn so far

  // "step", "seed_high", "seed_low", and "size", "batch_size", "context", which must match on load.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  Tensor tokens_;
  std::int64_t batch_size_, context_;
  std::uint64_t seed_;
  Shard shard_;
  std::int64_t step_ = 0;
};

// For evaluation: the non-overlapping windows of `tokens`, in order, B at a time (the last batch
// may hold fewer): window w has inputs tokens[w T, (w+1) T) and targets one token later. That makes
// (N - 1) / T windows (rounded down); the few tokens after the last one are not used. The same
// tokens always give the same batches, so validation losses of different runs compare.
std::vector<TextBatch> sequential_batches(const Tensor& tokens, std::int64_t batch_size, std::int64_t context);

}  // namespace mg::data
